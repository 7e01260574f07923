"""Every workspace tool through the real executor process, by the client and by the Core tools.

The Core tools (tools.workspace_tools) reach the module's executor through the real
:class:`ExecutorPool` configured with it as a remote executor (the ``executor.address`` path).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
import sys
import zlib
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import trio

from events import types as t
from projections.session_state import take_reverted
from runtime.executor_client import ExecutorClient, ExecutorToolError
from runtime.executors import ExecutorPool
from tools.artifacts import ArtifactStore
from tools.base import ToolResult, ToolSpec
from tools.workspace_tools import workspace_tools

from .conftest import ExecutorProcess, remote_pool, tool_ctx

_n = itertools.count()


def png(width: int = 2, height: int = 1) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


@pytest.fixture
def sub(workspace: Path, request: pytest.FixtureRequest) -> str:
    """A fresh directory of the shared workspace for this test (workspace-relative name)."""
    name = f"t{next(_n)}_{request.node.name[:40].replace('[', '_').replace(']', '')}"
    (workspace / name).mkdir()
    return name


async def fails(code: str, coro: Any) -> ExecutorToolError:
    with pytest.raises(ExecutorToolError) as info:
        await coro
    assert info.value.code == code, f"expected {code}, got {info.value.code}: {info.value}"
    return info.value


# ---------------------------------------------------------------------------- by the client


async def test_read_file_of_a_file_and_of_a_directory(client: ExecutorClient, workspace: Path, sub: str) -> None:
    (workspace / sub / "a.txt").write_text("one\ntwo\nthree\n")
    (workspace / sub / ".hidden").write_text("")
    (workspace / sub / "dir").mkdir()
    out = await client.call("read_file", {"path": f"{sub}/a.txt"})
    assert out.result["kind"] == "file" and out.result["content"] == "one\ntwo\nthree\n" and out.result["eof"]
    page = await client.call("read_file", {"path": f"{sub}/a.txt", "start_line": 2, "max_lines": 1})
    assert page.result["content"] == "two\n" and not page.result["eof"]
    nxt = await client.call("read_file", {"path": f"{sub}/a.txt", "offset": page.result["next_offset"]})
    assert nxt.result["content"] == "three\n"
    listing = await client.call("read_file", {"path": sub})
    assert listing.result["kind"] == "directory"
    assert listing.result["entries"] == [".hidden", "a.txt", "dir/"]
    assert out.before is None and out.after is None  # reads carry no file history


async def test_edit_file_create_rewrite_and_edit(client: ExecutorClient, workspace: Path, sub: str) -> None:
    path = f"{sub}/deep/new.txt"
    made = await client.call("edit_file", {"path": path, "mode": "create", "content": "alpha\nbeta\n"})
    assert made.result == {"path": path, "changed": True, "units_applied": 1, "bytes_written": 11}
    assert made.before is None and made.after == b"alpha\nbeta\n"
    assert (workspace / path).read_bytes() == b"alpha\nbeta\n"
    await fails("ALREADY_EXISTS", client.call("edit_file", {"path": path, "mode": "create", "content": "x"}))

    rw = await client.call("edit_file", {"path": path, "mode": "rewrite", "content": "gamma\n"})
    assert rw.before == b"alpha\nbeta\n" and rw.after == b"gamma\n" and rw.result["bytes_written"] == 6

    ed = await client.call("edit_file", {"path": path, "mode": "edit", "edits": [
        {"old_string": "gamma", "new_string": "delta"}, {"old_string": "delta\n", "new_string": "delta\nepsilon\n"}]})
    assert ed.result == {"path": path, "changed": True, "units_applied": 2, "bytes_written": 14}
    assert (workspace / path).read_bytes() == b"delta\nepsilon\n"

    same = await client.call("edit_file", {"path": path, "mode": "rewrite", "content": "delta\nepsilon\n"})
    assert same.result["changed"] is False and same.result["bytes_written"] == 0


async def test_patch_file(client: ExecutorClient, workspace: Path, sub: str) -> None:
    (workspace / sub / "p.txt").write_bytes(b"a\r\nb\r\nc\r\n")
    patch = "@@\n a\n-b\n+B\n+B2\n c\n"
    out = await client.call("patch_file", {"path": f"{sub}/p.txt", "patch": patch})
    assert out.result == {"path": f"{sub}/p.txt", "changed": True, "units_applied": 1, "bytes_written": 13}
    assert (workspace / sub / "p.txt").read_bytes() == b"a\r\nB\r\nB2\r\nc\r\n"  # the nearby line ending
    assert out.before == b"a\r\nb\r\nc\r\n"
    await fails("NO_MATCH", client.call("patch_file", {"path": f"{sub}/p.txt", "patch": "@@\n-zzz\n+y\n"}))
    await fails("INVALID_PATCH", client.call("patch_file", {"path": f"{sub}/p.txt", "patch": "nonsense"}))


async def test_view_image_returns_bytes_and_mime(client: ExecutorClient, workspace: Path, sub: str) -> None:
    data = png()
    (workspace / sub / "pic.bin").write_bytes(data)  # the extension does not matter
    out = await client.call("view_image", {"path": f"{sub}/pic.bin"})
    assert out.data == data and out.mime == "image/png"
    assert out.result == {"path": f"{sub}/pic.bin", "mime": "image/png", "size": len(data)}
    (workspace / sub / "text.png").write_text("not an image")
    await fails("NOT_AN_IMAGE", client.call("view_image", {"path": f"{sub}/text.png"}))


async def test_restore_puts_bytes_back_only_over_the_expected_content(client: ExecutorClient, workspace: Path,
                                                                       sub: str) -> None:
    target = workspace / sub / "r.txt"
    target.write_bytes(b"now\n")
    sha_now = hashlib.sha256(b"now\n").hexdigest()
    out = await client.call("restore", {"path": f"{sub}/r.txt", "content_hex": b"then\n".hex(),
                                        "expect_sha256": sha_now})
    assert out.result["changed"] is True and target.read_bytes() == b"then\n"
    await fails("CONFLICT", client.call("restore", {"path": f"{sub}/r.txt", "content_hex": b"x".hex(),
                                                    "expect_sha256": sha_now}))
    gone = await client.call("restore", {"path": f"{sub}/r.txt", "content_hex": None,
                                         "expect_sha256": hashlib.sha256(b"then\n").hexdigest()})
    assert gone.result["changed"] is True and not target.exists() and gone.after is None
    assert gone.result["removed"] is True and out.result["removed"] is False
    await fails("INVALID_ARGUMENT", client.call("restore", {"path": f"{sub}/r.txt", "content_hex": "zz",
                                                            "expect_sha256": None}))
    (workspace / sub / "kept.txt").write_text("keep\n")
    keep = hashlib.sha256(b"keep\n").hexdigest()
    for args in [{"path": f"{sub}/kept.txt", "expect_sha256": keep},  # no content_hex: it used to remove
                 {"path": f"{sub}/kept.txt", "content_hex": None, "expect_sha256": keep, "bogus": 1}]:
        await fails("INVALID_ARGUMENT", client.call("restore", args))
    assert (workspace / sub / "kept.txt").read_text() == "keep\n"


async def test_error_codes_come_through(client: ExecutorClient, workspace: Path, sub: str) -> None:
    (workspace / sub / "e.txt").write_text("same same\n")
    await fails("NO_MATCH", client.call("edit_file", {"path": f"{sub}/e.txt", "mode": "edit",
                                                      "edits": [{"old_string": "absent", "new_string": "x"}]}))
    await fails("NOT_UNIQUE", client.call("edit_file", {"path": f"{sub}/e.txt", "mode": "edit",
                                                        "edits": [{"old_string": "same", "new_string": "x"}]}))
    for escape in ("../outside.txt", f"{sub}/../../outside.txt", "/etc/passwd"):
        err = await fails("PATH_OUTSIDE_WORKSPACE", client.call("read_file", {"path": escape}))
        if escape.startswith("/"):
            assert "/etc" not in str(err) and "<absolute path>" in str(err)  # host paths never echoed
    (workspace / sub / "link").symlink_to("/etc")
    await fails("PATH_OUTSIDE_WORKSPACE", client.call("read_file", {"path": f"{sub}/link/passwd"}))
    await fails("PATH_OUTSIDE_WORKSPACE", client.call("edit_file", {"path": "../x", "mode": "create", "content": ""}))
    await fails("NOT_FOUND", client.call("read_file", {"path": f"{sub}/missing"}))
    await fails("INVALID_ARGUMENT", client.call("read_file", {"path": f"{sub}/e.txt", "bogus": 1}))
    await fails("TOOL_UNKNOWN", client.call("rm_rf", {"path": "."}))
    # The test-only hook is a tool name like any other: without the hook variable it would be
    # TOOL_UNKNOWN; its own argument check shows it is reachable here only because tests enable it.
    await fails("INVALID_ARGUMENT", client.call("_test_wait_cancel", {"marker": "../x"}))


async def test_an_unknown_tools_name_is_quoted_short(client: ExecutorClient) -> None:
    # The name was echoed whole up to the 2,000 characters every message is cut at; the HTTP
    # routes show a client's names up to 80, and so does this refusal now.
    err = await fails("TOOL_UNKNOWN", client.call("rm_rf", {}))
    assert err.message == "the executor has no tool 'rm_rf'", err.message
    err = await fails("TOOL_UNKNOWN", client.call("x" * 5000, {}))
    assert err.message == "the executor has no tool '" + "x" * 80 + "…'", err.message[:300]


async def test_a_path_hundreds_of_directories_deep_is_refused_and_makes_nothing(client: ExecutorClient,
                                                                                workspace: Path, sub: str) -> None:
    # A create 25,000 levels deep made ~20,000 nested directories, then failed with IO_ERROR once
    # the executor had no file descriptor left (its message, cut at 2000 characters, never said
    # why). 600 levels keep a regression's leftovers removable by pytest's (recursive) cleanup.
    err = await fails("INVALID_ARGUMENT", client.call("edit_file", {"path": f"{sub}/" + "d/" * 600 + "f",
                                                                    "mode": "create", "content": "x"}))
    assert "directories deep" in str(err)
    assert list((workspace / sub).iterdir()) == []


async def test_call_replay_applies_the_same_call_id_once(client: ExecutorClient, workspace: Path, sub: str) -> None:
    (workspace / sub / "c.txt").write_text("x")
    args = {"path": f"{sub}/c.txt", "mode": "edit", "edits": [{"old_string": "x", "new_string": "xy"}]}
    first = await client.call("edit_file", args, call_id=f"{sub}:call-1")
    second = await client.call("edit_file", args, call_id=f"{sub}:call-1")
    assert (workspace / sub / "c.txt").read_text() == "xy"  # applied once, not "xyy"
    assert second.result == first.result and second.before == b"x" and second.after == b"xy"
    third = await client.call("edit_file", args, call_id=f"{sub}:call-2")  # a new id applies again
    assert third.after == b"xyy"
    await fails("CALL_ID_REUSED", client.call("edit_file", {"path": f"{sub}/c.txt", "mode": "rewrite", "content": "z"},
                                              call_id=f"{sub}:call-1"))
    # patch_file shares the journal
    patch = {"path": f"{sub}/c.txt", "patch": "@@\n-xyy\n+patched\n"}
    await client.call("patch_file", patch, call_id=f"{sub}:call-3")
    again = await client.call("patch_file", patch, call_id=f"{sub}:call-3")
    assert again.result["changed"] is True and (workspace / sub / "c.txt").read_text() == "patched"


# ---------------------------------------------------------------------------- by the Core tools


class CoreTools:
    def __init__(self, specs: list[ToolSpec], artifacts: ArtifactStore) -> None:
        self.specs = {s.name: s for s in specs}
        self.artifacts = artifacts
        self.edits: dict[str, list[t.FileEdited]] = {}
        self._n = itertools.count(1)
        self.session_id = f"ses_core{next(_n)}"  # the executor's journal outlives one test

    async def run(self, name: str, args: dict[str, Any], *, call_id: str | None = None,
                  allowlist: list[str] | None = None) -> tuple[str, ToolResult]:
        from tools.base import ToolError

        call_id = call_id or f"call_{next(self._n)}"
        ctx = tool_ctx(self.session_id, call_id, "p1", file_edits=lambda cid: list(self.edits.get(cid, [])),
                       workspace_allowlist=allowlist)
        try:
            result = await self.specs[name].run(args, ctx)
        except ToolError as exc:
            result = ToolResult.error(exc.code, exc.message)
        for ev in result.events:  # what the actor's fold does with them
            if isinstance(ev, t.FileEdited):
                self.edits.setdefault(ev.call_id, []).append(ev)
            elif isinstance(ev, t.FileReverted):
                take_reverted(self.edits, ev)
        return call_id, result


@asynccontextmanager
async def core_tools(executor: ExecutorProcess, tmp_path: Path, *,
                     address: str | None = None) -> AsyncIterator[tuple[CoreTools, ExecutorPool]]:
    """The Core tools over the real pool whose project ``p1`` is served by ``executor`` (reached
    at ``address``: a relay in front of it), their artifacts in ``tmp_path / "artifacts"``: (the
    tools, the pool)."""
    async with remote_pool(executor, tmp_path / "executors", address=address, project="p1") as pool:
        artifacts = ArtifactStore(tmp_path / "artifacts")
        yield CoreTools(workspace_tools(pool, artifacts), artifacts), pool


@pytest.fixture
async def core(executor: ExecutorProcess, tmp_path: Path) -> AsyncIterator[CoreTools]:
    async with core_tools(executor, tmp_path) as (tools, _):
        yield tools


@pytest.fixture
async def core_and_pool(executor: ExecutorProcess, tmp_path: Path) -> AsyncIterator[tuple[CoreTools, ExecutorPool]]:
    async with core_tools(executor, tmp_path) as both:
        yield both


async def test_core_view_image_stores_an_artifact_and_keeps_only_its_id(core: CoreTools, workspace: Path,
                                                                         sub: str) -> None:
    data = png(3, 3)
    (workspace / sub / "img.png").write_bytes(data)
    _, res = await core.run("view_image", {"path": f"{sub}/img.png"})
    aid = hashlib.sha256(data).hexdigest()
    assert not res.is_error
    assert res.structured_content["artifact_id"] == aid and res.structured_content["mime"] == "image/png"
    assert core.artifacts.get(aid) == data
    images = [p for p in res.content if isinstance(p, t.ImagePart)]
    assert len(images) == 1 and images[0].artifact_id == aid and images[0].mime == "image/png"
    stored = [e for e in res.events if isinstance(e, t.ArtifactStored)]
    assert [(e.artifact_id, e.mime, e.size) for e in stored] == [(aid, "image/png", len(data))]
    import msgspec

    encoded = msgspec.msgpack.encode([res.content, res.structured_content, res.events])
    assert data not in encoded  # bytes never travel in the result


async def test_core_edit_then_revert_call_restores_exact_bytes(core: CoreTools, workspace: Path, sub: str) -> None:
    f = workspace / sub / "code.py"
    f.write_bytes(b"x = 1\r\ny = 2\r\n")
    cid, res = await core.run("edit_file", {"path": f"{sub}/code.py", "mode": "edit",
                                            "edits": [{"old_string": "x = 1", "new_string": "x = 10"}]})
    assert not res.is_error and f.read_bytes() == b"x = 10\r\ny = 2\r\n"
    edited = [e for e in res.events if isinstance(e, t.FileEdited)]
    assert len(edited) == 1
    e = edited[0]
    assert core.artifacts.get(e.before_artifact_id) == b"x = 1\r\ny = 2\r\n"  # type: ignore[arg-type]
    assert core.artifacts.get(e.after_artifact_id) == b"x = 10\r\ny = 2\r\n"  # type: ignore[arg-type]
    _, pres = await core.run("patch_file", {"path": f"{sub}/new.txt", "patch": "@@\n+x\n"})
    assert pres.is_error and pres.error_code == "NOT_FOUND"

    _, rev = await core.run("revert_call", {"call_id": cid})
    assert not rev.is_error, rev.content
    assert f.read_bytes() == b"x = 1\r\ny = 2\r\n"
    assert [type(ev).__name__ for ev in rev.events] == ["FileReverted"]
    _, again = await core.run("revert_call", {"call_id": cid})
    assert again.is_error and again.error_code == "NOTHING_TO_REVERT"


async def test_core_revert_call_reads_its_artifact_off_the_event_loop(core: CoreTools, workspace: Path,
                                                                       sub: str) -> None:
    # revert_call read the "before" (up to 8 MiB, and its SHA-256) on the event loop: every
    # session waited. Where the file is opened, a trio task must run before the read goes on:
    # possible only from a worker thread, while the loop is free.
    original = b"a line of the file before the edit\n" * 30_000
    (workspace / sub / "big.txt").write_bytes(original)
    cid, res = await core.run("edit_file", {"path": f"{sub}/big.txt", "mode": "rewrite", "content": "small\n"})
    assert not res.is_error, res.content
    [edit] = [e for e in res.events if isinstance(e, t.FileEdited)]
    watched = str(core.artifacts.root / edit.before_artifact_id)  # type: ignore[operator]
    token = trio.lowlevel.current_trio_token()
    seen: list[str] = []
    armed = True

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if not armed or event != "open" or str(args[0]) != watched:
            return
        try:
            trio.from_thread.run_sync(seen.append, "the loop ran a task during the read", trio_token=token)
        except RuntimeError:  # (called on the loop's own thread)
            seen.append("read on the event loop")

    sys.addaudithook(hook)  # (hooks stay for the process: this one is disarmed below)
    try:
        _, rev = await core.run("revert_call", {"call_id": cid})
    finally:
        armed = False
    assert not rev.is_error, rev.content
    assert seen == ["the loop ran a task during the read"]
    assert (workspace / sub / "big.txt").read_bytes() == original


async def test_core_revert_of_a_create_removes_the_file_and_refuses_after_a_change(core: CoreTools, workspace: Path,
                                                                                  sub: str) -> None:
    cid, res = await core.run("edit_file", {"path": f"{sub}/made.txt", "mode": "create", "content": "hi\n"})
    assert not res.is_error and (workspace / sub / "made.txt").read_text() == "hi\n"
    _, rev = await core.run("revert_call", {"call_id": cid})
    assert not rev.is_error and not (workspace / sub / "made.txt").exists()

    cid2, _ = await core.run("edit_file", {"path": f"{sub}/other.txt", "mode": "create", "content": "v1\n"})
    (workspace / sub / "other.txt").write_text("changed by someone else\n")
    _, conflict = await core.run("revert_call", {"call_id": cid2})
    assert conflict.is_error and conflict.error_code == "CONFLICT"
    message = conflict.structured_content["error"]["message"]
    assert message.startswith(f"{sub}/other.txt: the file changed since that call") and message.count("other.txt") == 1
    assert (workspace / sub / "other.txt").read_text() == "changed by someone else\n"


async def test_core_tool_errors_are_error_results_with_the_tools_code(core: CoreTools, sub: str) -> None:
    _, res = await core.run("read_file", {"path": "../../etc/passwd"})
    assert res.is_error and res.error_code == "PATH_OUTSIDE_WORKSPACE"
    _, res = await core.run("edit_file", {"path": f"{sub}/none.txt", "mode": "edit",
                                          "edits": [{"old_string": "a", "new_string": "b"}]})
    assert res.is_error and res.error_code == "NOT_FOUND"
    _, res = await core.run("read_file", {"path": sub})
    assert not res.is_error and res.structured_content["kind"] == "directory"
    assert json.loads(json.dumps(res.structured_content))  # JSON all the way


async def test_core_replay_of_an_edit_call_applies_once(core: CoreTools, workspace: Path, sub: str) -> None:
    (workspace / sub / "r.txt").write_text("a")
    args = {"path": f"{sub}/r.txt", "mode": "edit", "edits": [{"old_string": "a", "new_string": "aa"}]}
    _, first = await core.run("edit_file", args, call_id="call_replayed")
    _, second = await core.run("edit_file", args, call_id="call_replayed")  # the actor re-runs after a crash
    assert (workspace / sub / "r.txt").read_text() == "aa"
    assert first.structured_content == second.structured_content
