"""Browse listings over gRPC with the executor's cache of compiled .gitignore files: the service
owns one, a second listing reuses what the first compiled, and an edited .gitignore (the same
size, the same mtime) answers anew — in process (where the cache's counters can be read) and
through the real executor process."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from runtime.executor_client import ExecutorClient
from tools.executor.server import ExecutorService, build_server
from tools.files.workspace import Workspace



def names(result: dict[str, Any]) -> list[str]:
    return [e["path"] for e in result["entries"]]


def rewrite_keeping_size_and_mtime(path: Path, text: str) -> None:
    before = path.stat()
    path.write_text(text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


@pytest.fixture
async def in_process(tmp_path: Path) -> AsyncIterator[tuple[ExecutorService, ExecutorClient, Path]]:
    root = tmp_path / "ws"
    root.mkdir()
    service = ExecutorService(Workspace(root))
    token = secrets.token_urlsafe(32)
    server = build_server(service, token)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    client = ExecutorClient(f"127.0.0.1:{port}", token)
    try:
        await client.hello()
        yield service, client, root
    finally:
        client.close()
        server.stop(None).wait()


async def test_the_service_owns_a_cache_that_a_second_listing_reuses(
        in_process: tuple[ExecutorService, ExecutorClient, Path]) -> None:
    service, client, root = in_process
    assert service.ws.ignore_cache is service.ignore_cache
    assert ExecutorService(Workspace(root)).ignore_cache is not service.ignore_cache
    (root / ".gitignore").write_text("*.log\n")
    (root / "a.log").write_text("x")
    (root / "a.txt").write_text("x")
    first = (await client.call("browse_list", {"path": "."})).result
    assert names(first) == [".gitignore", "a.txt"] and first["ignored_hidden"] == 1
    assert (await client.call("browse_list", {"path": "."})).result == first
    stats = service.ignore_cache.stats()
    assert (stats.compiles, stats.hits) == (1, 1)
    rewrite_keeping_size_and_mtime(root / ".gitignore", "*.txt\n")
    assert names((await client.call("browse_list", {"path": "."})).result) == [".gitignore", "a.log"]
    assert service.ignore_cache.stats().compiles == 2


async def test_the_real_executor_answers_an_edited_gitignore_anew(client: ExecutorClient, workspace: Path) -> None:
    top = workspace / "edited-gitignore"
    top.mkdir()
    (top / ".gitignore").write_text("*.log\n")
    (top / "a.log").write_text("x")
    (top / "a.txt").write_text("x")
    listing = {"path": "edited-gitignore"}
    for _ in range(2):
        assert names((await client.call("browse_list", listing)).result) == [
            "edited-gitignore/.gitignore", "edited-gitignore/a.txt"]
    rewrite_keeping_size_and_mtime(top / ".gitignore", "*.txt\n")
    assert names((await client.call("browse_list", listing)).result) == [
        "edited-gitignore/.gitignore", "edited-gitignore/a.log"]
    (top / ".gitignore").write_text("a.*\n!a.txt\n")
    result = (await client.call("browse_list", listing)).result
    assert names(result) == ["edited-gitignore/.gitignore", "edited-gitignore/a.txt"]
    assert result["ignored_hidden"] == 1
    os.unlink(top / ".gitignore")
    assert names((await client.call("browse_list", listing)).result) == ["edited-gitignore/a.log",
                                                                          "edited-gitignore/a.txt"]
