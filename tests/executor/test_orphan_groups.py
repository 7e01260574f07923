"""Commands left running by a killed executor are reaped by the next one (tools.executor.groups).

A SIGKILLed executor cannot kill its commands' process groups; the group ids it recorded under its
state directory let the executor started next over the same state directory do it. Every group
a test starts is killed on the way out, whatever happens.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
import trio

from runtime.executor_client import ExecutorClient
from tools.executor.commands import run_command
from tools.executor.groups import GroupRegistry, _boot_id, _start_time

from .conftest import group_members, kill_group, start_executor, stop_process, wait_group_gone

BOUND_S = 20.0


async def test_a_restarted_executor_kills_the_commands_a_killed_one_left(tmp_path: Path) -> None:
    first = start_executor(tmp_path)
    pgid = 0
    try:
        client = ExecutorClient(first.address, first.token)
        try:
            with trio.fail_after(BOUND_S):
                async with client.run("echo $$; sleep 100 & sleep 100") as events:
                    pgid = int((await events.receive()).stdout)
                    record = first.state / "commands" / str(pgid)
                    assert record.read_text().split() == [_boot_id(), _start_time(pgid)]
                    first.proc.send_signal(signal.SIGKILL)
                    first.proc.wait(timeout=BOUND_S)
        finally:
            client.close()
        assert len(group_members(pgid)) == 3  # the shell and its two sleeps run on, unowned
        second = start_executor(tmp_path)  # same state directory
        try:
            assert wait_group_gone(pgid) == []
            assert list((second.state / "commands").iterdir()) == []
            assert f"killed 1 command process group(s) left running by an earlier executor: [{pgid}]" in second.output()
        finally:
            stop_process(second.proc)
    finally:
        stop_process(first.proc)
        if pgid:
            kill_group(pgid)


def test_a_finished_command_leaves_no_record(tmp_path: Path) -> None:
    groups = GroupRegistry(tmp_path)
    items = list(run_command("echo hi", tmp_path, timeout_ms=10_000, max_output=1024,
                             cancelled=lambda: False, groups=groups))
    assert items[0].data == b"hi\n" and items[-1].exit_code == 0
    assert list((tmp_path / "commands").iterdir()) == []
    assert groups.reap() == []


@pytest.fixture
def live_group():
    """A process leading its own group (a stand-in for a command left running); killed after."""
    proc = subprocess.Popen(["sleep", "100"], start_new_session=True)
    try:
        yield proc.pid
    finally:
        kill_group(proc.pid)
        proc.wait(timeout=BOUND_S)


def test_reap_kills_a_recorded_group_and_forgets_it(tmp_path: Path, live_group: int) -> None:
    GroupRegistry(tmp_path).started(live_group)
    assert GroupRegistry(tmp_path).reap() == [live_group]
    assert wait_group_gone(live_group) == []
    assert list((tmp_path / "commands").iterdir()) == []


@pytest.mark.parametrize("record", ["another-boot {start}", "{boot} 1", "garbage", ""])
def test_reap_leaves_alone_a_group_id_that_is_not_provably_its_own(tmp_path: Path, live_group: int,
                                                                     record: str) -> None:
    # Another boot id (rebooted since), another start time (the id was reused), or an unreadable
    # record: the live process is someone else's and must survive; the record is dropped.
    (tmp_path / "commands").mkdir()
    text = record.format(boot=_boot_id(), start=_start_time(live_group))
    (tmp_path / "commands" / str(live_group)).write_text(text)
    assert GroupRegistry(tmp_path).reap() == []
    assert group_members(live_group) == [live_group]
    assert list((tmp_path / "commands").iterdir()) == []


def test_reap_ignores_groups_that_ended_and_stray_files(tmp_path: Path) -> None:
    proc = subprocess.Popen(["true"], start_new_session=True)
    groups = GroupRegistry(tmp_path)
    (tmp_path / "commands" / str(proc.pid)).write_text(f"{_boot_id()} 0")  # as if recorded
    proc.wait(timeout=BOUND_S)
    (tmp_path / "commands" / "123.tmp").write_text("half-written")
    assert groups.reap() == []
    assert list((tmp_path / "commands").iterdir()) == []


def test_no_state_directory_records_nothing() -> None:
    groups = GroupRegistry(None)
    groups.started(1)
    groups.ended(1)
    assert groups.reap() == []
