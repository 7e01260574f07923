"""Commands left running by a killed executor are reaped by the next one (tools.executor.groups).

A SIGKILLed executor cannot kill its commands' process groups; the group ids it recorded under its
state directory let the executor started next over the same state directory do it. Every group
a test starts is killed on the way out, whatever happens.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.procfs import read_proc
from tools.executor.commands import run_command
from tools.executor.groups import GroupRegistry, _boot_id, _start_time, wait_ended
from tools.reaper import live_members

from .conftest import (group_members, kill_group, poll_until, running_executor, start_executor, stop_process,
                       wait_group_gone)

BOUND_S = 20.0
ROOT = Path(__file__).resolve().parents[2]  # the checkout (its packages, for a child interpreter)


async def test_a_restarted_executor_kills_the_commands_a_killed_one_left(tmp_path: Path) -> None:
    pgid = 0
    try:
        async with running_executor(tmp_path) as (first, client):
            with trio.fail_after(BOUND_S):
                # (the pid is printed once both sleeps are forked: printed first, the executor was
                # sometimes killed before the shell had forked the second)
                async with client.run("sleep 100 & sleep 100 & echo $$; wait") as events:
                    pgid = int((await events.receive()).stdout)
                    record = first.state / "commands" / str(pgid)
                    assert record.read_text().split() == [_boot_id(), _start_time(pgid), str(first.pid),
                                                          _start_time(first.pid)]
                    first.proc.send_signal(signal.SIGKILL)
                    first.proc.wait(timeout=BOUND_S)
        assert len(group_members(pgid)) == 3  # the shell and its two sleeps run on, unowned
        second = start_executor(tmp_path)  # same state directory
        try:
            assert wait_group_gone(pgid) == []
            assert list((second.state / "commands").iterdir()) == []
            assert f"killed 1 command process group(s) left running by an earlier executor: [{pgid}]" in second.output()
        finally:
            stop_process(second.proc)
    finally:
        if pgid:
            kill_group(pgid)


# An executor of its own, killed at a chosen point: after its command's shell started, before the
# shell's group was recorded (here, a registry that names the group and then never returns).
KILLED_BEFORE_THE_RECORD = """
import sys, time
from pathlib import Path
from tools.executor.commands import run_command
from tools.executor.groups import GroupRegistry

class Unrecorded(GroupRegistry):
    def started(self, pgid):
        print(pgid, flush=True)
        time.sleep(100)

next(run_command(sys.argv[1], Path.cwd(), timeout_ms=100_000, max_output=1024, cancelled=lambda: False,
                 groups=Unrecorded(None)))
"""


def test_a_command_whose_executor_dies_before_recording_its_group_never_runs(tmp_path: Path) -> None:
    # Found by the kill -9 property test with the executor as the victim: a job reported crashed
    # (EXECUTOR_UNAVAILABLE) whose command then ran all the same. The executor was killed after
    # starting the command's shell and before recording its group, so no reap could find it and
    # it ran on unowned; the shell now waits until its group is recorded.
    proc = subprocess.Popen([sys.executable, "-c", KILLED_BEFORE_THE_RECORD, "echo ran > ran.txt; exec sleep 100"],
                            cwd=tmp_path, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    pgid = 0
    try:
        assert proc.stdout is not None
        pgid = int(proc.stdout.readline())
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=BOUND_S)
        assert wait_group_gone(pgid) == []  # the shell ended by itself, the command unrun
        assert not (tmp_path / "ran.txt").exists()
    finally:
        stop_process(proc)
        proc.stdout.close()
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


@pytest.fixture(scope="module")
def gone_executor() -> tuple[int, str]:
    """The pid and start time of a process that has exited (an executor killed earlier)."""
    proc = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    start = _start_time(proc.pid)  # read while it waits for input
    proc.communicate(timeout=BOUND_S)  # end of input: it exits
    assert start is not None
    return proc.pid, start


def write_record(state: Path, pgid: int, text: str) -> None:
    (state / "commands").mkdir(exist_ok=True)
    (state / "commands" / str(pgid)).write_text(text)


def test_reap_kills_a_group_whose_executor_is_gone_and_forgets_it(tmp_path: Path, live_group: int,
                                                                   gone_executor: tuple[int, str]) -> None:
    owner, owner_start = gone_executor
    write_record(tmp_path, live_group, f"{_boot_id()} {_start_time(live_group)} {owner} {owner_start}")
    assert GroupRegistry(tmp_path).reap() == [live_group]
    assert wait_group_gone(live_group) == []
    assert list((tmp_path / "commands").iterdir()) == []


def test_reap_leaves_the_groups_of_a_running_executor_to_it(tmp_path: Path, live_group: int) -> None:
    # A second executor over the same state directory while the first still runs (this process
    # plays the first): its commands are not the newcomer's to kill.
    GroupRegistry(tmp_path).started(live_group)
    assert GroupRegistry(tmp_path).reap() == []
    assert group_members(live_group) == [live_group]
    assert [p.name for p in (tmp_path / "commands").iterdir()] == [str(live_group)]


@pytest.mark.parametrize("record", ["another-boot {start} {owner} {owner_start}", "{boot} 1 {owner} {owner_start}",
                                    "{boot} {start}", "garbage", ""])
def test_reap_leaves_alone_a_group_id_that_is_not_provably_its_own(tmp_path: Path, live_group: int, record: str,
                                                                     gone_executor: tuple[int, str]) -> None:
    # Another boot id (rebooted since), another leader start time (the id was reused), or an
    # unreadable record: the live process is someone else's and must survive; the record goes.
    owner, owner_start = gone_executor
    write_record(tmp_path, live_group, record.format(boot=_boot_id(), start=_start_time(live_group),
                                                     owner=owner, owner_start=owner_start))
    assert GroupRegistry(tmp_path).reap() == []
    assert group_members(live_group) == [live_group]
    assert list((tmp_path / "commands").iterdir()) == []


def test_reap_ignores_groups_that_ended_and_stray_files(tmp_path: Path, gone_executor: tuple[int, str]) -> None:
    owner, owner_start = gone_executor
    proc = subprocess.Popen(["true"], start_new_session=True)
    start = _start_time(proc.pid) or "0"
    proc.wait(timeout=BOUND_S)
    write_record(tmp_path, proc.pid, f"{_boot_id()} {start} {owner} {owner_start}")
    write_record(tmp_path, 0, "")  # (named "0": never a group to signal)
    (tmp_path / "commands" / "123.tmp").write_text("half-written")
    assert GroupRegistry(tmp_path).reap() == []
    assert list((tmp_path / "commands").iterdir()) == []


def test_no_state_directory_records_nothing() -> None:
    groups = GroupRegistry(None)
    groups.started(1)
    groups.ended(1)
    assert groups.reap() == []


async def test_an_entry_that_cannot_be_read_or_removed_does_not_keep_the_executor_from_starting(tmp_path: Path) -> None:
    # A directory named like a group id under <state>/commands made the reap's clean-up raise
    # (unlink of a directory), and `lens executor serve` exited "lens: IO_ERROR: Is a directory":
    # the project's executor never started again until someone removed it by hand.
    commands = tmp_path / "state" / "commands"
    (commands / "12345").mkdir(parents=True)
    (commands / "4444").write_bytes(b"\xff\xfe")  # (a record that is not text: forgotten, as before)
    async with running_executor(tmp_path) as (ex, _):
        pass  # (it started and answered the handshake)
    assert "cannot" in ex.output() and "12345" in ex.output()  # (said, as a warning)
    assert sorted(p.name for p in commands.iterdir()) == ["12345"]


def test_end_left_kills_the_groups_and_forgets_their_records(tmp_path: Path, live_group: int,
                                                            gone_executor: tuple[int, str]) -> None:
    # The whole of end_left: the group killed, its record gone, True. (Its wait for what the
    # kill has not yet ended is shown by wait_ended's tests below: a killed sleep is gone before
    # /proc is read.) The killed process stays a zombie until this test's fixture waits for it:
    # it runs nothing, and counts as ended.
    owner, owner_start = gone_executor
    write_record(tmp_path, live_group, f"{_boot_id()} {_start_time(live_group)} {owner} {owner_start}")
    assert GroupRegistry(tmp_path).end_left(BOUND_S) is True
    assert group_members(live_group) == []
    assert list((tmp_path / "commands").iterdir()) == []


def zombie(pid: int) -> bool:
    proc = read_proc(pid)
    return proc is not None and proc.state == "Z"


@pytest.fixture
def zombie_beside_a_member() -> Iterator[tuple[int, int]]:
    """A group whose leader has exited, unwaited for (a zombie), beside a member that runs on
    for a moment, then ends by itself: ``(pgid, member pid)``."""
    leader = subprocess.Popen(["sh", "-c", "sleep 0.5 & echo $!"], start_new_session=True, stdout=subprocess.PIPE)
    try:
        assert leader.stdout is not None
        member = int(leader.stdout.readline())
        assert poll_until(lambda: zombie(leader.pid), BOUND_S)
        yield leader.pid, member
    finally:
        kill_group(leader.pid)
        leader.wait(timeout=BOUND_S)
        leader.stdout.close()


def test_the_live_members_of_a_group_leave_out_its_zombie(zombie_beside_a_member: tuple[int, int]) -> None:
    pgid, member = zombie_beside_a_member
    assert live_members((pgid,)) == [member]


def test_wait_ended_returns_once_no_process_of_the_groups_runs(zombie_beside_a_member: tuple[int, int]) -> None:
    # SIGKILL is sent, not done: the pool says a dead executor's commands were ended only once
    # end_left's wait returns, so none of their processes may run then. Here the member runs on
    # by itself: the wait returns once it has ended, the zombie leader counted as ended.
    pgid, member = zombie_beside_a_member
    assert live_members((pgid,)) == [member]  # (it runs as the wait begins)
    assert wait_ended([pgid], BOUND_S) is True
    assert live_members((pgid,)) == []
    assert zombie(pgid)


def test_wait_ended_stops_waiting_when_told(live_group: int) -> None:
    # The daemon's stop now: the pool's reap waits in a thread, which only a flag can stop.
    began = time.monotonic()
    assert wait_ended([live_group], BOUND_S, stopped=lambda: True) is False
    assert time.monotonic() - began < BOUND_S / 4  # (not the bound)
    assert group_members(live_group) == [live_group]


def test_wait_ended_says_when_a_group_still_runs_at_its_bound(live_group: int) -> None:
    began = time.monotonic()
    assert wait_ended([live_group], 0.2) is False
    assert 0.2 <= time.monotonic() - began < BOUND_S
    assert group_members(live_group) == [live_group]


def test_end_left_says_when_a_record_cannot_be_read(tmp_path: Path) -> None:
    # A record that cannot be read (a directory in its place) may name a group still running:
    # not "ended", though nothing was killed.
    (tmp_path / "commands" / "12345").mkdir(parents=True)
    groups = GroupRegistry(tmp_path)
    assert groups.end_left(BOUND_S) is False
    assert groups.reap() == []  # (reap's answer, the groups it signalled, is as before)
