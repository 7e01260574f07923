"""The call journal (call replay, F-EXE-5) through the real executor process: a record damaged on
disk, a state directory an executor of another workspace journaled into, and a write the disk
had no room for (``RLIMIT_FSIZE`` on the executor, as in ``tests/daemon/test_full_disk.py``).

A replayed call id must never apply an edit twice, and a record it cannot trust is an
``IO_ERROR`` naming the journal (never a message about the caller's arguments, nor an edit
applied afresh over the one already made).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

import pytest
import trio

from runtime.executor_client import ExecutorToolError
from tests.daemon.test_full_disk import limit_files
from tests.files.helpers import leftovers

from .conftest import running_executor

BOUND_S = 20.0


def record_path(state: Path, call_id: str) -> Path:
    return state / "calls" / (hashlib.sha256(call_id.encode()).hexdigest() + ".json")


async def refused(code: str, call: Any) -> ExecutorToolError:
    with pytest.raises(ExecutorToolError) as info:
        await call
    assert info.value.code == code, str(info.value)
    return info.value


DAMAGE: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "an unknown state": lambda r: {**r, "state": "half-done"},
    "a result that is no object": lambda r: {**r, "structured": "changed"},
    "a result that is a list": lambda r: {**r, "structured": [1, 2]},
    "a digest that is a number": lambda r: {**r, "before_sha256": 5},
    "a digest that is a path": lambda r: {**r, "after_sha256": "../calls/x"},
    "a written path that is a number": lambda r: {**r, "written_path": 7},
    "a tool that is a number": lambda r: {**r, "tool": 5},
    "another record version": lambda r: {**r, "v": 2},
}


@pytest.mark.parametrize("damage", list(DAMAGE))
async def test_a_damaged_record_is_an_io_error_and_the_edit_is_not_applied_again(tmp_path: Path, damage: str) -> None:
    async with running_executor(tmp_path) as (ex, client):
        with trio.fail_after(BOUND_S):
            (ex.workspace / "f.txt").write_text("x")
            args = {"path": "f.txt", "mode": "edit", "edits": [{"old_string": "x", "new_string": "xy"}]}
            await client.call("edit_file", args, call_id="s:1")
            rec = record_path(ex.state, "s:1")
            rec.write_text(json.dumps(DAMAGE[damage](json.loads(rec.read_text()))))
            err = await refused("IO_ERROR", client.call("edit_file", args, call_id="s:1"))
            assert "call journal" in str(err) and "unreadable record" in str(err)
            assert (ex.workspace / "f.txt").read_text() == "xy"  # applied once, not "xyy"


async def test_a_journal_of_another_workspace_replays_nothing_here(tmp_path: Path) -> None:
    """Two executors, one after the other, over one ``--state`` with two workspaces: a call id the
    first journaled is not answered in the second as done (its file there was never written)."""
    state = tmp_path / "state"
    args = {"path": "new.txt", "mode": "create", "content": "hello"}
    async with running_executor(tmp_path / "a", state=state) as (first, client):
        with trio.fail_after(BOUND_S):
            await client.call("edit_file", args, call_id="s:1")
    assert (first.workspace / "new.txt").read_text() == "hello"
    async with running_executor(tmp_path / "b", state=state) as (second, client):
        with trio.fail_after(BOUND_S):
            err = await refused("CALL_ID_REUSED", client.call("edit_file", args, call_id="s:1"))
            assert "another workspace" in str(err)
            assert not (second.workspace / "new.txt").exists()
            # The first workspace's record is left as it was: replayed there, it still answers.
            fresh = await client.call("edit_file", args, call_id="s:2")
            assert fresh.result["changed"] is True and (second.workspace / "new.txt").read_text() == "hello"
    async with running_executor(tmp_path / "a", state=state) as (_, client):
        with trio.fail_after(BOUND_S):
            replay = await client.call("edit_file", args, call_id="s:1")
            assert replay.result == {"path": "new.txt", "changed": True, "units_applied": 1, "bytes_written": 5}


async def test_a_write_the_disk_had_no_room_for_leaves_no_record_to_replay(tmp_path: Path) -> None:
    """A call whose file could not be written (the disk full once its record was journaled: its
    bytes were in the journal already) left a ``pending`` record. Run again under the same call
    id (as Core re-runs a call a restart found unfinished), it answered for a write it never made:
    "changed" when the file had come to hold its bytes by another call (history and revert_call
    then credit it with that change), CONFLICT when the file had changed otherwise. The failed
    call is now as if never tried: run again, it is applied to the file as it is."""
    room = 4096  # the largest file the limited executor can write
    big = "x" * (room + 1)
    async with running_executor(tmp_path) as (ex, client):
        with trio.fail_after(BOUND_S):
            ws = ex.workspace
            for name in ("a.txt", "b.txt"):
                (ws / name).write_text(big)
                # (shrunk by a call: both contents are the journal's blobs from now on)
                await client.call("edit_file", {"path": name, "mode": "rewrite", "content": "small\n"},
                                  call_id=f"s:shrink-{name}")
            grow = {name: {"path": name, "mode": "rewrite", "content": big} for name in ("a.txt", "b.txt")}
            grow["d/c.txt"] = {"path": "d/c.txt", "mode": "create", "content": big}
            limit_files(ex.pid, room)
            try:
                for name, args in grow.items():
                    err = await refused("IO_ERROR", client.call("edit_file", args, call_id=f"s:grow-{name}"))
                    assert str(err) == (f"{name}: cannot be written: the disk is full: the file may not grow "
                                        "that large (EFBIG)")
                    assert not record_path(ex.state, f"s:grow-{name}").exists()
            finally:
                limit_files(ex.pid, None)
            assert [(ws / n).read_text() for n in ("a.txt", "b.txt")] == ["small\n", "small\n"]
            assert not (ws / "d").exists() and leftovers(ws) == []
            # Meanwhile another call writes what the failed one meant to, and b.txt changes otherwise.
            await client.call("edit_file", grow["a.txt"], call_id="s:other")
            await client.call("edit_file", grow["d/c.txt"], call_id="s:other-create")
            (ws / "b.txt").write_text("third\n")
            same = await client.call("edit_file", grow["a.txt"], call_id="s:grow-a.txt")
            assert same.result == {"path": "a.txt", "changed": False, "units_applied": 1, "bytes_written": 0}
            assert same.before == big.encode() == same.after
            again = await client.call("edit_file", grow["b.txt"], call_id="s:grow-b.txt")
            assert again.result == {"path": "b.txt", "changed": True, "units_applied": 1, "bytes_written": room + 1}
            assert again.before == b"third\n" and (ws / "b.txt").read_text() == big
            err = await refused("ALREADY_EXISTS", client.call("edit_file", grow["d/c.txt"],
                                                              call_id="s:grow-d/c.txt"))
            assert str(err) == "d/c.txt: already exists; create never overwrites"
