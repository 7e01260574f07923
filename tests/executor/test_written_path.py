"""An edit's result names the file it wrote (F-EXE-5, F-HAR-3), and revert_call restores that file.

Core reaches the module's real executor process through a gRPC relay that records the tools it
calls (``tests/executor/relay.py``), so a test can count the round trips an edit costs.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import AsyncIterator

import msgspec
import pytest

from events import types as t
from proto import executor_pb2 as pb

from .conftest import ExecutorProcess
from .relay import Relay
from .test_tools import CoreTools, core_tools

_n = itertools.count()


@pytest.fixture
def sub(workspace: Path) -> str:
    name = f"w{next(_n)}"
    (workspace / name).mkdir()
    return name


def _older(reply: pb.ToolReply) -> pb.ToolReply:
    """The reply as an executor built before it named the file written sends it."""
    reply.ClearField("written_path")
    return reply


@pytest.fixture
async def relayed(executor: ExecutorProcess, tmp_path: Path) -> AsyncIterator[tuple[CoreTools, Relay]]:
    with Relay(executor.address) as relay:
        async with core_tools(executor, tmp_path, address=relay.address) as (core, _):
            yield core, relay


@pytest.fixture
async def relayed_older(executor: ExecutorProcess, tmp_path: Path) -> AsyncIterator[tuple[CoreTools, Relay]]:
    with Relay(executor.address, edit_reply=_older) as relay:
        async with core_tools(executor, tmp_path, address=relay.address) as (core, _):
            yield core, relay


def _written(events: list[t._Event]) -> list[str | None]:
    return [e.written_path for e in events if isinstance(e, t.FileEdited)]


def _links(workspace: Path, sub: str) -> Path:
    base = workspace / sub
    (base / "d" / "e").mkdir(parents=True)
    (base / "d" / "f.txt").write_text("one\n")
    (base / "l").symlink_to("d/e")          # a directory link
    (base / "lf").symlink_to("d/f.txt")     # a file link
    (base / "chain").symlink_to("lf")       # a link to a link
    return base


async def test_an_edit_records_the_file_it_wrote_in_one_round_trip(relayed: tuple[CoreTools, Relay],
                                                                    workspace: Path, sub: str) -> None:
    # Each edit that changed a file cost a second call, `resolve`, to learn which file it wrote.
    core, relay = relayed
    base = _links(workspace, sub)
    steps = [("edit_file", {"path": f"{sub}/l/../f.txt", "mode": "rewrite", "content": "two\n"}, f"{sub}/d/f.txt"),
             ("edit_file", {"path": f"{sub}/lf", "mode": "edit", "edits": [{"old_string": "two", "new_string": "3"}]},
              f"{sub}/d/f.txt"),
             ("patch_file", {"path": f"{sub}/chain", "patch": "@@\n-3\n+four\n"}, f"{sub}/d/f.txt"),
             ("edit_file", {"path": f"./{sub}/l/new.txt", "mode": "create", "content": "hi\n"}, f"{sub}/d/e/new.txt"),
             ("edit_file", {"path": f"{sub}/l/made/deep.txt", "mode": "create", "content": "hi\n"},
              f"{sub}/d/e/made/deep.txt"),
             ("edit_file", {"path": str(base / "lf"), "mode": "rewrite", "content": "five\n"}, f"{sub}/d/f.txt")]
    for tool, args, written in steps:
        relay.tools.clear()
        _, res = await core.run(tool, args)
        assert not res.is_error, res.content
        assert _written(res.events) == [written], (args, res.events)
        assert res.structured_content["path"] == args["path"]  # (the spec's shape, as given)
        assert relay.tools == [tool], (args, relay.tools)
    relay.tools.clear()
    _, res = await core.run("edit_file", {"path": f"{sub}/lf", "mode": "rewrite", "content": "five\n"})
    assert not res.structured_content["changed"] and res.events == [] and relay.tools == ["edit_file"]
    assert (base / "d" / "f.txt").read_text() == "five\n" and (base / "lf").is_symlink()


async def test_an_older_executor_is_asked_where_the_edit_led(relayed_older: tuple[CoreTools, Relay],
                                                             workspace: Path, sub: str) -> None:
    core, relay = relayed_older
    _links(workspace, sub)
    relay.tools.clear()
    _, res = await core.run("edit_file", {"path": f"{sub}/lf", "mode": "rewrite", "content": "two\n"})
    assert not res.is_error and _written(res.events) == [f"{sub}/d/f.txt"]
    assert relay.tools == ["edit_file", "resolve"]


async def test_a_written_name_that_is_not_utf8_is_not_recorded(relayed: tuple[CoreTools, Relay],
                                                                 workspace: Path, sub: str) -> None:
    # The log's text cannot hold such a name: the file.edited event could not be encoded, and
    # the edit, made, was answered RESULT_NOT_RECORDED (no file history, nothing to revert).
    core, relay = relayed
    base = os.fsencode(workspace / sub)
    os.makedirs(base + b"/\xff")
    os.symlink(b"\xff", base + b"/ln")
    relay.tools.clear()
    cid, res = await core.run("edit_file", {"path": f"{sub}/ln/f.txt", "mode": "create", "content": "x\n"})
    assert not res.is_error and _written(res.events) == [None] and relay.tools == ["edit_file"]
    msgspec.msgpack.encode(res.events)  # (recordable)
    _, rev = await core.run("revert_call", {"call_id": cid})  # through the path as given
    assert not rev.is_error, rev.content
    assert not os.path.exists(base + b"/\xff/f.txt")


async def test_a_revert_restores_the_file_the_edit_wrote(relayed: tuple[CoreTools, Relay], workspace: Path,
                                                         sub: str) -> None:
    # revert_call restored through the path as given: a link retargeted since sent the restore to
    # another file (holding the same bytes: overwritten; other bytes: CONFLICT, the edited file
    # left as the edit made it).
    core, _ = relayed
    base = workspace / sub
    (base / "a.txt").write_text("a\n")
    (base / "b.txt").write_text("b\n")
    (base / "c.txt").write_text("c\n")
    (base / "l").symlink_to("a.txt")
    (base / "m").symlink_to("c.txt")
    edit_a, _ = await core.run("edit_file", {"path": f"{sub}/l", "mode": "rewrite", "content": "x\n"})
    edit_c, _ = await core.run("edit_file", {"path": f"{sub}/m", "mode": "rewrite", "content": "y\n"})
    for link, to in (("l", "b.txt"), ("m", "a.txt")):
        (base / link).unlink()
        (base / link).symlink_to(to)
    (base / "b.txt").write_text("x\n")  # the same bytes as the edit left in a.txt
    _, rev = await core.run("revert_call", {"call_id": edit_a})
    assert not rev.is_error, rev.content
    assert (base / "a.txt").read_text() == "a\n" and (base / "b.txt").read_text() == "x\n"
    assert rev.structured_content["paths"] == [f"{sub}/a.txt"]
    _, rev = await core.run("revert_call", {"call_id": edit_c})
    assert not rev.is_error, rev.content
    assert (base / "c.txt").read_text() == "c\n" and (base / "a.txt").read_text() == "a\n"
    # A conflict names the file and the path the edit was given.
    edit_d, _ = await core.run("edit_file", {"path": f"{sub}/l", "mode": "rewrite", "content": "z\n"})
    (base / "b.txt").write_text("changed since\n")
    _, rev = await core.run("revert_call", {"call_id": edit_d})
    assert rev.is_error and rev.error_code == "CONFLICT"
    message = rev.structured_content["error"]["message"]
    assert message.startswith(f"{sub}/b.txt (edited as {sub}/l): the file changed since that call"), message
    # A log from before the written path was kept: restored through the path as given.
    edit_f, _ = await core.run("edit_file", {"path": f"{sub}/l", "mode": "rewrite", "content": "w\n"})
    core.edits[edit_f] = [msgspec.structs.replace(e, written_path=None) for e in core.edits[edit_f]]
    _, rev = await core.run("revert_call", {"call_id": edit_f})
    assert not rev.is_error and rev.structured_content["paths"] == [f"{sub}/l"]
    assert (base / "b.txt").read_text() == "changed since\n"
