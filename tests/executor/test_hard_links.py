"""Hard links through the file tools, over the real executor process.

A hard link in the workspace to a file outside it (``ln ~/.ssh/id_rsa notes.txt``, made by a
command, a package manager or the user) is a name inside the workspace, and its other names
cannot be found without searching every directory. A user of a confined workspace expects the
file tools not to reach a file outside it, so no file tool reads or edits a regular file with
more than one name: ``HARD_LINKED`` (see docs/decisions.md, "Web tools and confinement: what the
last audits left").
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from runtime.executor_client import ExecutorClient

from tests.web.server import png

from .test_tools import fails, sub  # noqa: F401  (sub is a fixture)

SECRET = "OUTSIDE-SECRET-4f1c"


def outside_file(tmp_path: Path, name: str, data: bytes) -> tuple[Path, os.stat_result]:
    target = tmp_path / "outside" / name
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(data)
    os.utime(target, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    return target, target.stat()


async def test_a_hard_link_to_an_outside_file_is_neither_read_nor_edited(
        client: ExecutorClient, workspace: Path, sub: str, tmp_path: Path) -> None:
    original = f"key = {SECRET}\nline two\n".encode()
    target, before = outside_file(tmp_path, "credentials", original)
    os.link(target, workspace / sub / "notes.txt")
    path = f"{sub}/notes.txt"

    calls = [
        ("read_file", {"path": path}),
        ("read_file", {"path": path, "offset": 0}),
        ("edit_file", {"path": path, "mode": "edit", "edits": [{"old_string": "line two", "new_string": "2"}]}),
        ("edit_file", {"path": path, "mode": "rewrite", "content": "replaced\n"}),
        ("patch_file", {"path": path, "patch": "@@\n-line two\n+2\n"}),
        ("restore", {"path": path, "content_hex": b"old\n".hex(),
                     "expect_sha256": hashlib.sha256(original).hexdigest()}),
        ("restore", {"path": path, "content_hex": None, "expect_sha256": hashlib.sha256(original).hexdigest()}),
    ]
    for tool, args in calls:
        err = await fails("HARD_LINKED", client.call(tool, args))
        assert SECRET not in err.message, tool
        assert f"{path}: a file with more than one name (hard links)" in err.message, tool
    # a create at that name never overwrites, as before
    await fails("ALREADY_EXISTS", client.call("edit_file", {"path": path, "mode": "create", "content": "x"}))
    # nothing changed, outside or inside: the link is still the outside file's second name
    after = target.stat()
    assert target.read_bytes() == original
    assert (after.st_ino, after.st_mtime_ns, after.st_mode, after.st_nlink) == \
        (before.st_ino, before.st_mtime_ns, before.st_mode, 2)
    assert (workspace / sub / "notes.txt").stat().st_ino == before.st_ino
    # the directory is still listed (a listing reads no file's bytes)
    listing = await client.call("read_file", {"path": sub})
    assert listing.result["entries"] == ["notes.txt"]


async def test_an_image_with_two_names_is_not_viewed(client: ExecutorClient, workspace: Path, sub: str,
                                                     tmp_path: Path) -> None:
    target, _ = outside_file(tmp_path, "photo.png", png(3, 2))
    os.link(target, workspace / sub / "photo.png")
    await fails("HARD_LINKED", client.call("view_image", {"path": f"{sub}/photo.png"}))
    # with one name again, it is an image as any other
    (workspace / sub / "photo.png").unlink()
    (workspace / sub / "photo.png").write_bytes(png(3, 2))
    out = await client.call("view_image", {"path": f"{sub}/photo.png"})
    assert out.result["mime"] == "image/png"


async def test_the_rule_is_the_link_count_of_the_file_opened(client: ExecutorClient, workspace: Path,
                                                             sub: str) -> None:
    # Both names inside the workspace: refused as well (which name is the other cannot be known
    # without a search); one name, or a symlink to a file of one name, reads as before.
    d = workspace / sub
    (d / "a.txt").write_text("alpha\n")
    os.link(d / "a.txt", d / "b.txt")
    await fails("HARD_LINKED", client.call("read_file", {"path": f"{sub}/a.txt"}))
    await fails("HARD_LINKED", client.call("read_file", {"path": f"{sub}/b.txt"}))
    (d / "b.txt").unlink()  # one name again: read and edited
    assert (await client.call("read_file", {"path": f"{sub}/a.txt"})).result["content"] == "alpha\n"
    (d / "s.txt").symlink_to("a.txt")
    assert (await client.call("read_file", {"path": f"{sub}/s.txt"})).result["content"] == "alpha\n"
    out = await client.call("edit_file", {"path": f"{sub}/a.txt", "mode": "edit",
                                          "edits": [{"old_string": "alpha", "new_string": "beta"}]})
    assert out.result["changed"] and (d / "a.txt").read_text() == "beta\n"
