"""The executor pool with real children: spawn, secrecy, restart mid-call, the sharedFilesystem
probe, and the execution-domain lock (unit-tested on a mock clock and through real commands)."""

from __future__ import annotations

import functools
import json
import os
import signal
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import trio
import trio.testing

from runtime.executor_client import ExecutorUnavailable
from runtime.executors import DomainLock, ExecutorPool, ProjectUnknown
from tools.base import ToolError, ToolResult
from tools.executor import PROTOCOL_VERSION

from ..procfs import alive, read_proc
from .conftest import (ExecutorProcess, group_members, kill_group, remote_pool, running_executor, running_pool, tool_ctx,
                       tools_by_name, wait_group_gone)

BOUND_S = 30.0


ctx = functools.partial(tool_ctx, "ses_pool")  # (call_id, project="p")


async def read_int(path: Path) -> int:
    with trio.fail_after(10):
        while True:
            text = path.read_text() if path.exists() else ""
            if text.endswith("\n"):
                return int(text)
            await trio.sleep(0.01)


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[tuple[ExecutorPool, Path]]:
    ws = tmp_path / "ws"
    ws.mkdir()
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        yield pool, ws


async def test_a_spawned_child_keeps_its_token_out_of_argv(local: tuple[ExecutorPool, Path]) -> None:
    pool, _ = local
    ex = await pool.get("p")
    assert ex.process is not None and ex.client.hello_reply is not None
    assert ex.client.hello_reply.protocol_version == 8
    token = dict(ex.client._meta)["authorization"].removeprefix("Bearer ")
    cmdline = Path(f"/proc/{ex.process.pid}/cmdline").read_bytes()
    assert b"executor" in cmdline and token.encode() not in cmdline
    assert await pool.get("p") is ex  # one child per project
    with pytest.raises(ProjectUnknown):
        await pool.get("nope")


async def test_executor_killed_mid_command_fails_clearly_and_the_next_call_respawns(
        local: tuple[ExecutorPool, Path]) -> None:
    pool, ws = local
    specs = tools_by_name(pool, ws.parent / "artifacts")
    ex = await pool.get("p")
    assert ex.process is not None
    first_pid = ex.process.pid
    pgid = 0
    outcome: dict[str, Any] = {}
    try:
        with trio.fail_after(BOUND_S):
            async with trio.open_nursery() as nursery:
                async def command() -> None:
                    try:
                        outcome["result"] = await specs["run_command"].run(
                            {"command": "echo $$ > pgid.txt; exec sleep 100"}, ctx("c1"))
                    except ToolError as exc:
                        outcome["error"] = exc

                nursery.start_soon(command)
                pgid = await read_int(ws / "pgid.txt")  # the command runs
                os.kill(first_pid, signal.SIGKILL)  # the executor dies under it
        err = outcome.get("error")
        assert isinstance(err, ToolError), outcome
        assert err.code == "EXECUTOR_UNAVAILABLE" and "not reachable" in err.message, (err.code, err.message)
    finally:
        if pgid:
            kill_group(pgid)  # a killed executor cannot reap its commands (see docs/executor.md)
            wait_group_gone(pgid)

    # Reconnect: the next call through the pool spawns a new child and works.
    with trio.fail_after(BOUND_S):
        result: ToolResult = await specs["read_file"].run({"path": "pgid.txt"}, ctx("c2"))
    assert not result.is_error and result.structured_content["content"].strip() == str(pgid)
    ex2 = await pool.get("p")
    assert ex2 is not ex and ex2.process is not None and ex2.process.pid != first_pid
    with trio.fail_after(BOUND_S):
        done = await specs["run_command"].run({"command": "echo back"}, ctx("c3"))
    assert not done.is_error and done.content[0].text.startswith("back\n")  # type: ignore[union-attr]


@asynccontextmanager
async def child_killed_mid_command(pool: ExecutorPool) -> AsyncIterator[tuple[list[Any], int]]:
    """Run a long command on project "p"'s child and kill the child outright meanwhile: yields
    the command's events after the kill and its process group (ended on leaving, if still there)."""
    ex = await pool.get("p")
    assert ex.process is not None
    pgid = 0
    try:
        with trio.fail_after(BOUND_S):
            async with ex.client.run("echo $$; exec sleep 100") as events:
                pgid = int((await events.receive()).stdout)
                ex.process.kill()
                rest = [ev async for ev in events]
        yield rest, pgid
    finally:
        if pgid:
            kill_group(pgid)
            wait_group_gone(pgid)


async def test_the_client_sees_an_in_band_unavailable_error_when_the_executor_dies(
        local: tuple[ExecutorPool, Path]) -> None:
    pool, ws = local
    async with child_killed_mid_command(pool) as (rest, _):
        assert len(rest) == 1 and isinstance(rest[0], ExecutorUnavailable)
        assert rest[0].code == "EXECUTOR_UNAVAILABLE"
    with trio.fail_after(BOUND_S):
        again = await pool.get("p")
        assert (await again.client.call("read_file", {"path": "."})).result["kind"] == "directory"


async def test_probe_shared_is_true_for_a_local_child_on_the_same_workspace(local: tuple[ExecutorPool, Path]) -> None:
    pool, ws = local
    ex = await pool.get("p")
    assert await pool.probe_shared(ex) is True
    assert not [p.name for p in ws.iterdir() if p.name.startswith(".lens-probe-")]


async def test_probe_shared_is_false_when_the_executor_serves_another_directory(executor: ExecutorProcess,
                                                                               tmp_path: Path) -> None:
    elsewhere = tmp_path / "core-side"
    elsewhere.mkdir()
    async with remote_pool(executor, tmp_path / "executors", workspaces={"p": elsewhere},
                           shared_filesystem=True) as pool:  # (claimed, not true)
        ex = await pool.get("p")
        assert ex.shared_filesystem is True  # the configuration's claim
        assert await pool.probe_shared(ex) is False  # ... which the probe refutes
    assert list(elsewhere.iterdir()) == []
    assert not [p.name for p in executor.workspace.iterdir() if p.name.startswith(".lens-probe-")]


async def _group_gone(pgid: int, timeout: float = 10.0) -> list[int]:
    """Poll (bounded, without blocking trio) until no live process is left in ``pgid``."""
    with trio.move_on_after(timeout):
        while group_members(pgid):
            await trio.sleep(0.02)
    return group_members(pgid)


TERM_IGNORING = "trap '' TERM; echo $$; while :; do sleep 0.1; done"


async def test_stopping_the_pool_ends_a_command_that_ignores_sigterm(tmp_path: Path) -> None:
    # The pool gives a stopping child 3 s before SIGKILL; the child gives its calls 2 s, then its
    # commands SIGTERM and 2 s more. A command that ignores SIGTERM outlived the SIGKILLed child
    # and ran on after the daemon had stopped, until some later executor over that state reaped it.
    ws = tmp_path / "ws"
    ws.mkdir()
    pgid = 0
    try:
        with trio.fail_after(BOUND_S):
            async with trio.open_nursery() as outer:
                async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
                    ex = await pool.get("p")
                    running = trio.Event()

                    async def command() -> None:
                        nonlocal pgid
                        async with ex.client.run(TERM_IGNORING) as events:
                            async for ev in events:
                                if not pgid and not isinstance(ev, Exception):
                                    pgid = int(ev.stdout)
                                    running.set()

                    outer.start_soon(command)
                    await running.wait()
                # The pool has stopped (as at daemon shutdown): its child is gone.
                assert ex.process is not None and ex.process.returncode is not None
                outer.cancel_scope.cancel()
        assert await _group_gone(pgid) == []
    finally:
        if pgid:
            kill_group(pgid)


async def test_a_child_killed_outright_has_its_commands_ended_by_the_pool(local: tuple[ExecutorPool, Path]) -> None:
    # Before, they ran on until the next call spawned a new executor over the same state.
    pool, _ = local
    async with child_killed_mid_command(pool) as (rest, pgid):
        assert [type(ev) for ev in rest] == [ExecutorUnavailable]
        assert await _group_gone(pgid) == []


# ---------------------------------------------------------------------------- execution-domain lock


async def test_domain_lock_readers_share_writers_exclude_and_are_not_starved(autojump_clock: Any) -> None:
    lock = DomainLock()
    spans: dict[str, tuple[float, float]] = {}

    async def hold(name: str, write: bool, start: float, duration: float) -> None:
        await trio.sleep(start)
        async with (lock.write() if write else lock.read()):
            began = trio.current_time()
            await trio.sleep(duration)
            spans[name] = (began, trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold, "r1", False, 0.0, 1.0)
        nursery.start_soon(hold, "r2", False, 0.1, 1.0)
        nursery.start_soon(hold, "w1", True, 0.5, 1.0)   # waits for r1 and r2
        nursery.start_soon(hold, "r3", False, 0.6, 1.0)  # arrives while w1 waits: not before w1
        nursery.start_soon(hold, "w2", True, 0.7, 1.0)

    def overlap(a: str, b: str) -> bool:
        return spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]

    assert overlap("r1", "r2")  # reads concurrent
    for w in ("w1", "w2"):
        for other in spans.keys() - {w}:
            assert not overlap(w, other), (w, other, spans)  # writes exclusive
    assert spans["w1"][0] >= spans["r2"][1]
    assert spans["r3"][0] >= spans["w1"][1]  # a waiting writer holds back new readers


async def reader_around_a_writer_that_gives_up(reader_comes_at: float) -> list[Any]:
    """A reader holds the domain from 0 s to 5 s; a writer waits for it from 0.5 s and gives up at
    1.5 s; a second reader comes at ``reader_comes_at``. What entered, and when (virtual time)."""
    lock = DomainLock()
    entered = []
    async with trio.open_nursery() as nursery:
        async def reader_holding() -> None:
            async with lock.read():
                await trio.sleep(5)

        async def writer() -> None:
            await trio.sleep(0.5)  # the reader holds the domain by now
            with trio.move_on_after(1):
                async with lock.write():
                    entered.append("w")

        async def second_reader() -> None:
            await trio.sleep(reader_comes_at)
            async with lock.read():
                entered.append(("r", trio.current_time()))

        nursery.start_soon(reader_holding)
        nursery.start_soon(writer)
        nursery.start_soon(second_reader)
    return entered


async def test_domain_lock_a_cancelled_waiting_writer_lets_readers_in(autojump_clock: Any) -> None:
    entered = await reader_around_a_writer_that_gives_up(2)  # after the writer gave up
    assert entered == [("r", pytest.approx(2.0))]


async def test_domain_lock_readers_held_back_by_a_writer_go_in_when_it_gives_up(autojump_clock: Any) -> None:
    # A reader that came while a writer waited was held back; when the writer's wait was
    # cancelled, nothing woke that reader, which then waited for the first reader to finish.
    entered = await reader_around_a_writer_that_gives_up(1)  # while the writer waits
    assert entered == [("r", pytest.approx(1.5))]


async def test_projects_on_one_workspace_share_one_domain_lock(executor: ExecutorProcess, tmp_path: Path) -> None:
    # Each project had a lock of its own: two projects on one directory (which POST /projects
    # allows), or any two on a remote executor (which serves one workspace), edited and ran
    # commands in the same files at once.
    one, other = tmp_path / "one", tmp_path / "other"
    one.mkdir()
    other.mkdir()
    async with running_pool(tmp_path / "executors", {"a": one, "b": one, "c": other}) as pool:
        a, b, c = await pool.get("a"), await pool.get("b"), await pool.get("c")
        assert a.lock is b.lock and a.lock is not c.lock
        assert a.process is not None
        a.process.kill()  # (a child spawned again keeps the domain's lock)
        await a.process.wait()
        again = await pool.get("a")
        assert again is not a and again.lock is b.lock
    async with remote_pool(executor, tmp_path / "executors", workspaces={"a": one, "c": other}) as pool:
        assert (await pool.get("a")).lock is (await pool.get("c")).lock


async def test_real_commands_are_serialized_and_a_read_waits_for_a_write(executor: ExecutorProcess,
                                                                        tmp_path: Path) -> None:
    ws = executor.workspace
    names = [f"lock{i}_{os.getpid()}_{time.monotonic_ns()}" for i in range(3)]
    async with remote_pool(executor, tmp_path / "executors") as pool:
        specs = tools_by_name(pool, tmp_path / "artifacts")
        read_done: list[int] = []
        with trio.fail_after(BOUND_S):
            async with trio.open_nursery() as nursery:
                async def command(i: int, name: str) -> None:
                    res = await specs["run_command"].run({"command": (
                        f"date +%s%N > {name}.start; echo go > {name}.running; "
                        f"while [ ! -e {name}.release ]; do sleep 0.01; done; date +%s%N > {name}.end")},
                        ctx(f"cmd{i}"))
                    assert not res.is_error, res.content

                async def read() -> None:
                    res = await specs["read_file"].run({"path": "."}, ctx("read"))
                    assert not res.is_error
                    read_done.append(time.time_ns())

                for i, name in enumerate(names):
                    nursery.start_soon(command, i, name)
                # Whichever command got the lock runs; the others wait for it. Release them one by one.
                released = 0
                while released < len(names):
                    running = []
                    with trio.fail_after(10):
                        while not running:
                            running = [n for n in names if (ws / f"{n}.running").exists()
                                       and not (ws / f"{n}.release").exists()]
                            await trio.sleep(0.01)
                    assert len(running) == 1, running  # never two commands at once
                    if released == 0:
                        nursery.start_soon(read)  # a read while a write holds the domain
                    (ws / f"{running[0]}.release").touch()
                    released += 1
        spans = sorted((int((ws / f"{n}.start").read_text()), int((ws / f"{n}.end").read_text())) for n in names)
        for (s1, e1), (s2, _) in zip(spans, spans[1:]):
            assert e1 <= s2, spans  # no two commands overlapped
        assert read_done and read_done[0] >= spans[0][1]  # the read ran after the first write ended


async def test_command_output_that_is_not_utf8_stays_within_the_cap_as_text(local: tuple[ExecutorPool, Path],
                                                                             tmp_path: Path) -> None:
    # Each invalid byte becomes U+FFFD (three bytes) in the text result: 16 MiB of 0xFF made a
    # 48 MiB result the log refused. The text is capped at max_output_bytes too, and says so.
    pool, _ = local
    specs = tools_by_name(pool, tmp_path / "artifacts")
    with trio.fail_after(BOUND_S):
        res = await specs["run_command"].run(
            {"command": "head -c 3000 /dev/zero | tr '\\0' '\\377'", "max_output_bytes": 1000}, ctx("u1"))
    text = res.content[0].text  # type: ignore[union-attr]
    body, note = text.rsplit("\n", 1)
    assert note == "[exit 0, output truncated]" and res.structured_content["truncated"] is True
    assert len(body.encode()) <= 1000 and set(body) == {"\ufffd"}
    with trio.fail_after(BOUND_S):
        ok = await specs["run_command"].run({"command": "printf 'caf\\303\\251'", "max_output_bytes": 5}, ctx("u2"))
    assert ok.content[0].text == "café\n[exit 0]" and ok.structured_content["truncated"] is False  # type: ignore[union-attr]
    for bad in [{"command": "echo a\u0000b"}, {"command": "ls", "cwd": "x\u0000"}]:
        with pytest.raises(ToolError) as info:
            await specs["run_command"].run(bad, ctx("u3"))
        assert info.value.code == "INVALID_ARGUMENT" and "NUL" in info.value.message


async def test_a_command_is_at_most_16_kib_as_a_jobs_is(local: tuple[ExecutorPool, Path], tmp_path: Path) -> None:
    # run_command had no limit of its own (only the registry's 16 MiB on a call's arguments): a
    # command of megabytes went to the shell, where a job's is refused past 16 KiB.
    pool, ws = local
    specs = tools_by_name(pool, tmp_path / "artifacts")
    head = "touch ran; echo ok #"
    edge = head + "é" * ((16 * 1024 - len(head)) // 2)  # (UTF-8 bytes are counted, not characters)
    assert len(edge.encode()) == 16 * 1024
    with trio.fail_after(BOUND_S):
        res = await specs["run_command"].run({"command": edge}, ctx("l1"))
    assert res.content[0].text == "ok\n\n[exit 0]", res  # type: ignore[union-attr]
    (ws / "ran").unlink()
    for n, over in enumerate([edge + "x", head + "é" * (16 * 1024)]):
        with pytest.raises(ToolError) as info:
            await specs["run_command"].run({"command": over}, ctx(f"l{n + 2}"))
        assert info.value.code == "COMMAND_TOO_LONG" and "16384 bytes" in info.value.message
    assert not (ws / "ran").exists()


async def test_commands_never_see_the_credentials_in_the_daemons_environment(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Provider keys (a provider's apiKeyEnv, the SDKs' own variables, the web search key) stay with the daemon: a
    # model (or text it read) asking a command for `env` must not find them.
    from runtime.config import parse_config
    from runtime.credentials import secret_env_names

    cfg = parse_config('{"providers": [{"id": "oa", "protocol": "openai-chat", "apiKeyEnv": "LENS_TEST_KEY"}],'
                       ' "executor": {"address": "127.0.0.1:1", "tokenEnv": "LENS_TEST_REMOTE_TOKEN"}}')
    hidden = secret_env_names(cfg)
    assert hidden >= {"LENS_TEST_KEY", "LENS_TEST_REMOTE_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "EXA_API_KEY"}
    for name in ("LENS_TEST_KEY", "LENS_TEST_REMOTE_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "EXA_API_KEY"):
        monkeypatch.setenv(name, f"secret-{name}")
    monkeypatch.setenv("LENS_TEST_PLAIN", "visible")
    ws = tmp_path / "ws"
    ws.mkdir()
    async with running_pool(tmp_path / "executors", {"p": ws}, hidden_env=hidden) as pool:
        specs = tools_by_name(pool, tmp_path / "artifacts")
        with trio.fail_after(BOUND_S):
            res = await specs["run_command"].run({"command": "env"}, ctx("e1"))
            # the executor's own environment, as any command of its user can read it: the token
            # reaches a local executor on its standard input, never in its environment
            parent = await specs["run_command"].run({"command": "tr '\\0' '\\n' < /proc/$PPID/environ"}, ctx("e2"))
        ex = await pool.get("p")
        token = dict(ex.client._meta)["authorization"].removeprefix("Bearer ")
    out = res.content[0].text  # type: ignore[union-attr]
    assert "LENS_TEST_PLAIN=visible" in out
    assert "secret-" not in out and "LENS_EXECUTOR_TOKEN" not in out
    environ = parent.content[0].text  # type: ignore[union-attr]
    assert "LENS_TEST_PLAIN=visible" in environ  # (it did read the executor's environment)
    assert token not in environ and "LENS_EXECUTOR_TOKEN" not in environ and "secret-" not in environ


@pytest.mark.parametrize(("stdin", "env_token"), [(b"", "x" * 32), (b"short\n", None), (b"", None)])
def test_an_executor_without_a_usable_token_refuses_to_start(tmp_path: Path, stdin: bytes, env_token: str | None) -> None:
    # With --token-stdin the environment is not consulted; without it, the environment must hold one.
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LENS_EXECUTOR_TOKEN"}
    args = ["--token-stdin"] if env_token is not None or stdin else []
    if env_token is not None:
        env["LENS_EXECUTOR_TOKEN"] = env_token
    proc = subprocess.run([sys.executable, "-m", "runtime.cli", "executor", "serve", "--workspace", str(tmp_path),
                           "--listen", "127.0.0.1:0", *args], input=stdin, env=env, capture_output=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(b"lens executor: EXECUTOR_TOKEN_MISSING: set ")
    assert b"the shared secret (at least 16 characters)" in proc.stderr and b"Traceback" not in proc.stderr


@pytest.mark.parametrize(("stdin", "env_token"), [
    (b"", "\u00c4" * 20), (b"", "abcdefghijklmnop\x7f"), ("geheimnis-schl\u00fcssel-1\n".encode(), None),
    (b"abcdefgh\tijklmnopq\n", None)], ids=["env-non-ascii", "env-del", "stdin-non-ascii", "stdin-tab"])
def test_an_executor_token_no_grpc_header_can_carry_refuses_to_start(tmp_path: Path, stdin: bytes,
                                                                     env_token: str | None) -> None:
    # Such a token started the executor, and every call then failed "INTERNAL: Invalid metadata"
    # on the client (grpc refuses to send the header), naming neither the token nor its fault.
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LENS_EXECUTOR_TOKEN"}
    args = [] if env_token is not None else ["--token-stdin"]
    if env_token is not None:
        env["LENS_EXECUTOR_TOKEN"] = env_token
    proc = subprocess.run([sys.executable, "-m", "runtime.cli", "executor", "serve", "--workspace", str(tmp_path),
                           "--listen", "127.0.0.1:0", "--state", str(tmp_path.parent / "state"), "--exit-with-stdin", *args],
                          input=stdin, env=env, capture_output=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(b"lens executor: EXECUTOR_TOKEN_INVALID: "), proc.stderr
    assert b"printable ASCII" in proc.stderr and b"Traceback" not in proc.stderr, proc.stderr
    assert b"listening on" not in proc.stdout


def test_an_executor_token_is_at_most_4096_characters(tmp_path: Path) -> None:
    # A longer token started the executor, and its calls then failed by chance (grpc refuses
    # headers past 8 KiB with a probability that grows to 16 KiB, then always) as "EXECUTOR_ERROR:
    # executor call failed (RESOURCE_EXHAUSTED: received metadata size exceeds soft limit ...)".
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "LENS_EXECUTOR_TOKEN"}
    proc = subprocess.run([sys.executable, "-m", "runtime.cli", "executor", "serve", "--workspace", str(tmp_path),
                           "--listen", "127.0.0.1:0", "--state", str(tmp_path.parent / "state"), "--token-stdin"],
                          input=b"t" * (4096 + 1) + b"\n", env=env, capture_output=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(b"lens executor: EXECUTOR_TOKEN_INVALID: the token on standard input must be at "
                                  b"most 4096 characters"), proc.stderr
    assert b"Traceback" not in proc.stderr and b"listening on" not in proc.stdout


async def test_a_token_of_4096_characters_is_carried_by_every_call(tmp_path: Path) -> None:
    async with running_executor(tmp_path, token="t" * 4096) as (_, client):
        with trio.fail_after(30):
            for _ in range(20):  # (past 8 KiB grpc refuses only some calls: many are tried)
                assert (await client.hello()).protocol_version == PROTOCOL_VERSION
                await client.call("read_file", {"path": "."})


KILLED_DAEMON = """
import os, signal, sys
from pathlib import Path

import trio

from runtime.executors import ExecutorPool


async def main() -> None:
    ws = Path(sys.argv[1])

    async def workspace_of(project_id):
        return ws

    pool = ExecutorPool(Path(sys.argv[2]), workspace_of)
    async with trio.open_nursery() as nursery:
        await nursery.start(pool.run)
        ex = await pool.get("p")
        print(ex.process.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup of any kind


trio.run(main)
"""


def _exited(pid: int) -> bool:
    return not alive(pid)  # (a zombie whose new parent has not reaped it yet has exited too)


def test_a_daemon_killed_outright_takes_its_executors_with_it(tmp_path: Path) -> None:
    """The daemon holds each child's standard input; its end (SIGKILL included) stops the child.
    Before, every kill -9 of the daemon left an executor running, with its commands."""
    import subprocess
    import sys
    import time

    ws = tmp_path / "ws"
    ws.mkdir()
    proc = subprocess.run([sys.executable, "-c", KILLED_DAEMON, str(ws), str(tmp_path / "executors")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    pid = int(proc.stdout.split()[0])
    deadline = time.monotonic() + BOUND_S
    while not _exited(pid):
        assert time.monotonic() < deadline, f"executor {pid} still runs after its daemon was killed"
        time.sleep(0.05)  # bounded poll of an outside process


def test_an_executor_told_to_exit_with_its_standard_input_does(tmp_path: Path) -> None:
    import subprocess
    import sys

    with subprocess.Popen([sys.executable, "-m", "runtime.cli", "executor", "serve", "--workspace", str(tmp_path),
                           "--listen", "127.0.0.1:0", "--state", str(tmp_path.parent / "state"),
                           "--token-stdin", "--exit-with-stdin"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(b"x" * 32 + b"\n")
            proc.stdin.flush()
            assert b"listening on" in proc.stdout.readline()
            assert proc.poll() is None  # serving while its input is open
            proc.stdin.close()
            assert proc.wait(timeout=BOUND_S) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


async def test_the_allowlist_judges_a_path_leading_to_a_name_that_is_not_utf8(local: tuple[ExecutorPool, Path],
                                                                              tmp_path: Path) -> None:
    # The executor's resolve answered with the name a symlink leads to, and a name that is not
    # UTF-8 could not be sent: every call through such a link was refused INVALID_ARGUMENT
    # ("arguments are not usable JSON"), inside the allowlist as outside it.
    import dataclasses

    pool, ws = local
    root = os.fsencode(ws)
    os.makedirs(root + b"/src/\xff")
    (Path(os.fsdecode(root + b"/src/\xff")) / "f.txt").write_text("inside\n")
    os.makedirs(root + b"/\xfe")
    (Path(os.fsdecode(root + b"/\xfe")) / "f.txt").write_text("outside\n")
    os.symlink(b"\xff", root + b"/src/in")
    os.symlink(b"../\xfe", root + b"/src/out")
    specs = tools_by_name(pool, tmp_path / "artifacts")
    allowed = dataclasses.replace(ctx("u1"), workspace_allowlist=["src"])
    with trio.fail_after(BOUND_S):
        res = await specs["read_file"].run({"path": "src/in/f.txt"}, allowed)
        assert res.content[0].text == "inside\n", res  # type: ignore[union-attr]
        with pytest.raises(ToolError) as info:
            await specs["read_file"].run({"path": "src/out/f.txt"}, dataclasses.replace(allowed, call_id="u2"))
    assert info.value.code == "PATH_NOT_ALLOWED" and "\\udcfe/f.txt" in info.value.message, info.value
    info.value.message.encode("utf-8")  # (the name is escaped: the message can be recorded)


# ---------------------------------------------------------------------------- children nothing uses


def _gone(pid: int) -> bool:
    """No such process, or not a live one (a zombie not reaped yet is not gone)."""
    p = read_proc(pid)  # (None once reaped: also when that happens between its reads)
    return p is None or p.state == "X"


async def test_a_child_nothing_uses_is_stopped_and_the_next_call_spawns_another(tmp_path: Path) -> None:
    # Each project used kept its executor child (some 50 MB, a dozen threads) until the daemon
    # stopped. Stopped after a while unused (bound small here), never while a command runs or
    # anyone waits for its domain lock; the project's next call spawns another.
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n")
    async with running_pool(tmp_path / "executors", {"p": ws}, idle_stop_s=0.3) as pool:
        ex = await pool.get("p")
        assert ex.process is not None
        first = ex.process.pid
        # a command running for several bounds: its child is kept (used all along)
        async with ex.client.run("sleep 1.2; echo done", timeout_ms=60_000) as events:
            out = [ev async for ev in events]
        assert out[-1].WhichOneof("event") == "exit" and out[-1].exit.exit_code == 0
        assert not _gone(first) and await pool.get("p") is ex
        # the domain lock held (a session waiting for it holds its executor): kept as well
        async with ex.lock.write():
            await trio.sleep(1.0)  # (several bounds)
            assert not _gone(first) and ex.process.returncode is None
        with trio.fail_after(BOUND_S):  # then unused: stopped, reaped, and no longer handed out
            while not _gone(first):
                await trio.sleep(0.02)
        again = await pool.get("p")
        assert again is not ex and again.process is not None and again.process.pid != first
        outcome = await again.client.call("read_file", {"path": "a.txt"})
        assert "hello" in json.dumps(outcome.result)


async def test_a_child_started_while_the_pool_stops_is_ended_not_left_running(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # open_process forks in a thread, which a cancel does not interrupt: the pool could stop
    # meanwhile, and the spawn then called start_soon on the nursery it no longer had (an
    # AttributeError, reported to the caller as EXECUTOR_UNAVAILABLE), leaving the child running
    # and unreaped (a ResourceWarning once collected). It is now ended, and the caller told why.
    ws = tmp_path / "ws"
    ws.mkdir()

    async def workspace_of(project_id: str) -> Path | None:
        return ws

    pool = ExecutorPool(tmp_path / "executors", workspace_of, None)
    real_open = trio.lowlevel.open_process
    spawned: list[trio.Process] = []
    pool_scope = trio.CancelScope()

    async def the_pool_stops_meanwhile(*args: Any, **kwargs: Any) -> trio.Process:
        pool_scope.cancel()
        with trio.CancelScope(shield=True):
            await trio.testing.wait_all_tasks_blocked()  # (the pool's run has ended)
            proc = await real_open(*args, **kwargs)
        spawned.append(proc)
        return proc

    async def run_pool(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with pool_scope:
            await pool.run(task_status=task_status)

    with trio.fail_after(BOUND_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(run_pool)
            monkeypatch.setattr(trio.lowlevel, "open_process", the_pool_stops_meanwhile)
            with pytest.raises(ExecutorUnavailable) as caught:
                await pool.get("p")
    assert "the executor pool is stopping" in caught.value.message, caught.value.message
    assert len(spawned) == 1 and spawned[0].returncode is not None  # ended and reaped, not left behind
    assert _gone(spawned[0].pid)


async def test_a_dead_childs_reap_is_waited_for_before_its_replacement_starts(tmp_path: Path) -> None:
    # The replacement's own reap at its start, over the same state, could take the dead child's
    # records of its groups first: the pool's reap then found none, and call_ended said the
    # commands were ended. get waits (within call_end_wait_s) for the dead child's reap, which
    # cannot finish here while its standard output is held open.
    ws = tmp_path / "ws"
    ws.mkdir()
    async with running_pool(tmp_path / "executors", {"p": ws}, call_end_wait_s=0.5) as pool:
        ex = await pool.get("p")
        assert ex.process is not None and ex.gone is not None
        held = os.open(f"/proc/{ex.process.pid}/fd/1", os.O_WRONLY)
        try:
            ex.process.kill()
            with trio.fail_after(BOUND_S):
                await ex.process.wait()
            began = trio.current_time()
            with trio.fail_after(BOUND_S):
                again = await pool.get("p")
            assert trio.current_time() - began >= 0.5  # (the bound: the reap could not finish)
            assert not ex.gone.is_set()
        finally:
            os.close(held)
        with trio.fail_after(BOUND_S):
            await ex.gone.wait()
        assert again is not ex and again.process is not None and again.process.returncode is None
