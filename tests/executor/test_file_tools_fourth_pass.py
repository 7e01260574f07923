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

from .conftest import start_executor, stop_process
from .test_tools import fails

ROOM = 4096  # the largest file the limited executor can write


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


async def test_a_call_the_disk_has_no_room_for_changes_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    # "create (…; parents created; atomic publish …)": a create that could not write its file
    # left behind every directory it had made for it, though the call failed and wrote nothing.
    ex = start_executor(tmp_path)
    client = ExecutorClient(ex.address, ex.token)
    try:
        await client.hello()
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
        # a refused update leaves the file byte for byte as it was, and no temp file
        for tool, args in [("edit_file", {"mode": "rewrite", "content": big}),
                           ("edit_file", {"mode": "edit", "edits": [{"old_string": "two", "new_string": big}]}),
                           ("patch_file", {"patch": f"@@\n one\n-two\n+{big}\n"})]:
            await fails("IO_ERROR", client.call(tool, {"path": "kept/f.txt", **args}, call_id=f"s:{tool}"))
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
    finally:
        client.close()
        stop_process(ex.proc)
