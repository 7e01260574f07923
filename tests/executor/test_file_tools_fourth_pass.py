"""A fourth pass over the file tools (F-EXE-2..6, F-EXE-9) as a client sees them: every call crosses
the real ``lens executor serve`` over gRPC.

The earlier passes (``test_file_tools_acceptance.py``, ``_second_pass``, ``_third_pass``, the
property tests and tests/files) are not repeated; these are the edges they left: a workspace
whose disk has no room for the file a call writes (made with ``RLIMIT_FSIZE`` on the executor,
as ``tests/daemon/test_full_disk.py`` makes it for the daemon: no mount, no root).
"""

from __future__ import annotations

from pathlib import Path

from runtime.executor_client import ExecutorClient

from tests.daemon.test_full_disk import limit_files
from tests.files.helpers import leftovers

from .conftest import running_executor
from .test_tools import fails, sub  # noqa: F401  (sub is a fixture)

ROOM = 4096  # the largest file the limited executor can write


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


async def test_a_call_the_disk_has_no_room_for_changes_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    # "create (…; parents created; atomic publish …)": a create that could not write its file
    # left behind every directory it had made for it, though the call failed and wrote nothing.
    async with running_executor(tmp_path) as (ex, client):
        ws = ex.workspace
        (ws / "kept").mkdir()
        (ws / "kept" / "f.txt").write_bytes(b"one\r\ntwo\r\n")
        limit_files(ex.pid, ROOM)
        big = "x" * (ROOM + 1)
        for call_id in ("", "s:create"):
            err = await fails("IO_ERROR", client.call("edit_file", {"path": "kept/a/b/new.txt", "mode": "create",
                                                                     "content": big}, call_id=call_id))
            assert str(err) == ("kept/a/b/new.txt: cannot be written: the disk is full: the file may not grow that "
                                "large (EFBIG)")
            assert tree(ws) == ["kept", "kept/f.txt"]
        # a refused update leaves the file byte for byte as it was, and no temp file: without a call
        # id the workspace write itself fails (its temp file removed); with one, the journal's
        # record of the call, written first, is what has no room
        for tool, args in [("edit_file", {"mode": "rewrite", "content": big}),
                           ("edit_file", {"mode": "edit", "edits": [{"old_string": "two", "new_string": big}]}),
                           ("patch_file", {"patch": f"@@\n one\n-two\n+{big}\n"})]:
            for call_id in ("", f"s:{tool}"):
                err = await fails("IO_ERROR", client.call(tool, {"path": "kept/f.txt", **args}, call_id=call_id))
                assert str(err) == ("kept/f.txt: cannot be written: the disk is full: the file may not grow that "
                                    "large (EFBIG)")
                assert (ws / "kept" / "f.txt").read_bytes() == b"one\r\ntwo\r\n"
                assert leftovers(ws) == [] and tree(ws) == ["kept", "kept/f.txt"]
        # what fits is written, its directories made
        out = await client.call("edit_file", {"path": "kept/a/b/new.txt", "mode": "create", "content": "fits\n"})
        assert out.result == {"path": "kept/a/b/new.txt", "changed": True, "units_applied": 1, "bytes_written": 5}
        limit_files(ex.pid, None)
        out = await client.call("edit_file", {"path": "kept/c/new.txt", "mode": "create", "content": big},
                                call_id="s:later")
        assert out.result == {"path": "kept/c/new.txt", "changed": True, "units_applied": 1,
                              "bytes_written": ROOM + 1}
        assert tree(ws) == ["kept", "kept/a", "kept/a/b", "kept/a/b/new.txt", "kept/c", "kept/c/new.txt",
                            "kept/f.txt"]


# ---------------------------------------------------------------------------- a new file by the wrong tool


async def test_a_patch_that_adds_a_file_is_refused_saying_which_call_makes_one(client: ExecutorClient,
                                                                              workspace: Path, sub: str) -> None:
    # A model used to the apply_patch envelope sends "*** Add File:", or a pure add to a path that
    # does not exist; both were refused without a word of what makes a new file.
    for patch in ("*** Begin Patch\n*** Add File: new.txt\n+hello\n*** End Patch\n",
                  "*** Add File: new.txt\n+hello\n"):
        err = await fails("INVALID_PATCH", client.call("patch_file", {"path": f"{sub}/new.txt", "patch": patch}))
        assert str(err).endswith("(no envelope: patch_file takes only the hunks of the existing file its path "
                                 "names; edit_file with mode create makes a new file)"), str(err)
    for tool, args in [("patch_file", {"patch": "@@\n+hello\n"}), ("edit_file", {"mode": "rewrite", "content": "x"}),
                       ("edit_file", {"mode": "edit", "edits": [{"old_string": "a", "new_string": "b"}]})]:
        err = await fails("NOT_FOUND", client.call(tool, {"path": f"{sub}/new.txt", **args}))
        assert str(err) == f"{sub}/new.txt: no such file (edit_file with mode create makes a new file)"
        # a missing directory on the way: the same hint (the create makes it), and nothing made
        err = await fails("NOT_FOUND", client.call(tool, {"path": f"{sub}/missing/new.txt", **args}))
        assert str(err) == (f"{sub}/missing/new.txt: a parent directory does not exist (edit_file with mode create "
                            "makes a new file, and its directories)")
        assert not (workspace / sub / "missing").exists()
    # a patch whose header names another file than its path: refused, the file untouched
    (workspace / sub / "f.txt").write_bytes(b"a\n")
    err = await fails("INVALID_PATCH", client.call("patch_file", {"path": f"{sub}/f.txt",
                                                                 "patch": "--- a/other.txt\n+++ b/other.txt\n@@\n-a\n+b\n"}))
    assert str(err) == ("line 1: expected a '@@' hunk header (no envelope: patch_file takes only the hunks of the "
                        "existing file its path names)")
    assert sorted(p.name for p in (workspace / sub).iterdir()) == ["f.txt"]
    assert (workspace / sub / "f.txt").read_bytes() == b"a\n"
    out = await client.call("edit_file", {"path": f"{sub}/new.txt", "mode": "create", "content": "hello\n"})
    assert out.result == {"path": f"{sub}/new.txt", "changed": True, "units_applied": 1, "bytes_written": 6}


async def test_a_create_over_a_link_to_nothing_says_it_is_a_link(client: ExecutorClient, workspace: Path,
                                                                 sub: str) -> None:
    # read_file answers such a path "no such file", and the create then said "already exists":
    # both true, neither saying why. The link is named, and left as it is.
    (workspace / sub / "dangling").symlink_to("gone.txt")
    await fails("NOT_FOUND", client.call("read_file", {"path": f"{sub}/dangling"}))
    err = await fails("ALREADY_EXISTS", client.call("edit_file", {"path": f"{sub}/dangling", "mode": "create",
                                                                  "content": "x"}))
    assert str(err) == (f"{sub}/dangling: already exists as a symbolic link whose target does not exist; create "
                        "never overwrites, nor writes through a link")
    assert (workspace / sub / "dangling").readlink() == Path("gone.txt")
    assert not (workspace / sub / "gone.txt").exists()
    # an update of it says the same, not that a create makes it (a create there is refused above),
    # and so for a link to a file in a directory that does not exist; nothing is made
    (workspace / sub / "deeper").symlink_to("missing/gone.txt")
    for tool, args in [("patch_file", {"patch": "@@\n+hello\n"}), ("edit_file", {"mode": "rewrite", "content": "x"}),
                       ("edit_file", {"mode": "edit", "edits": [{"old_string": "a", "new_string": "b"}]})]:
        for name in ("dangling", "deeper"):
            err = await fails("NOT_FOUND", client.call(tool, {"path": f"{sub}/{name}", **args}))
            assert str(err) == f"{sub}/{name}: no such file: a symbolic link whose target does not exist"
    assert sorted(p.name for p in (workspace / sub).iterdir()) == ["dangling", "deeper"]


async def test_a_hunk_repeated_after_its_anchor_is_not_told_to_add_the_anchor_it_has(client: ExecutorClient,
                                                                                     workspace: Path, sub: str) -> None:
    # The hunk must be unique among the places after its anchor; with two such places the answer
    # said "add context or an anchor" to a hunk that had one.
    f = workspace / sub / "f.py"
    f.write_bytes(b"def f():\n    return 1\n\ndef g():\n    return 1\n")
    err = await fails("NOT_UNIQUE", client.call("patch_file", {"path": f"{sub}/f.py",
                                                               "patch": "@@ def f():\n-    return 1\n+    return 2\n"}))
    assert str(err) == (f"{sub}/f.py: hunk 0: matches 2 places after its anchor; add context (the hunk must be "
                        "the only match after its anchor line, not only the first)")
    err = await fails("NOT_UNIQUE", client.call("patch_file", {"path": f"{sub}/f.py",
                                                               "patch": "@@\n-    return 1\n+    return 2\n"}))
    assert str(err) == f"{sub}/f.py: hunk 0: matches 2 places in the file; add context or an anchor"
    out = await client.call("patch_file", {"path": f"{sub}/f.py",
                                           "patch": "@@ def f():\n-    return 1\n+    return 2\n \n def g():\n"})
    after = b"def f():\n    return 2\n\ndef g():\n    return 1\n"
    assert out.result == {"path": f"{sub}/f.py", "changed": True, "units_applied": 1, "bytes_written": len(after)}
    assert f.read_bytes() == after
