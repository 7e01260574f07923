"""Resources over many cycles: ``lens serve`` as a real process (port 0, the built-in ``faux``
provider, a real executor child) runs one kind of work many times, and its file descriptors,
threads, child processes and resident memory — and its executor's — are read from outside,
through ``/proc``.

Each test takes a baseline after a warm-up cycle (the first cycle opens what the daemon keeps for
its lifetime: the executor child and its gRPC channel, SQLite readers, worker threads), runs the
cycle :data:`N` times and then waits — polling, with a deadline — until the counts are back
within the test's allowances of the baseline; they must be. Resident memory must grow little in
the second half of the cycles (the first half may still fill caches and allocator arenas); a
cycle works in a session of its own where it can, since a session that grows makes the daemon's
memory grow for good reasons (its log and the page caches over it). At the end ``lens log
verify`` is clean.

One test runs in process: the daemon's trio tasks (walked from the root task through every child
nursery) return to their count once sessions passivated, and no object of a session's state
(its actor, a model request holding its Working Context) outlives the passivation.

Nothing sleeps for ordering: every wait is a poll of an observable condition with a deadline.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import httpx2
import pytest
import trio

from runtime.actor import SessionActor
from runtime.providers.base import ModelRequest
from tools.executor.server import CALL_THREAD_NAME

from ..mcp.conftest import SERVER
from ..procfs import executor_of, processes, thread_names
from .conftest import LIMIT, Daemon, DaemonFactory, finished, run_lens, wait_until
from .test_serve_process import ServeProcess, as_daemon

N = 50  # cycles of each kind: a leak of one descriptor or thread a cycle is 50 of them
# Fewer where a cycle is slow: each pairing waits for the daemon to see the pair file change
# (it looks every fraction of a second), each executor kill for a new child to start (a Python
# process); a leak of one a cycle is still far past the allowances.
PAIRING_CYCLES = 30
EXECUTOR_CYCLES = 20
IDLE_SECONDS = 0.2  # sessions.idleSeconds: an idle actor passivates this soon
# Descriptors and threads may differ from the baseline by this much after the cycles: the HTTP
# connections of this test's client that the daemon has not seen closed yet (the pool keeps up to
# two when a stream and a request overlapped; each is one socket in the daemon).
FD_ALLOWANCE = 2
# Threads: trio's worker threads (to_thread: SQLite reads, snapshot writes) are cached and end
# after 10 s idle; a thread started by a cycle's last read may still be there.
THREAD_ALLOWANCE = 2
# The executor's gRPC server keeps every thread its pool started (named CALL_THREAD_NAME): their
# count is the most calls served at once (at most SERVER_THREADS), not a leak, and it grew by 3
# over a run's cycles on a loaded machine (one cycle's call still ending while the next began).
# They are counted apart (ex_pool) and not judged; every other thread of the executor is.
# Resident memory may grow this much over the second half of the cycles (N/2 of them): 64 KiB a
# cycle. A leak of what one cycle makes (a session's state, a stream's buffers, an SQLite
# statement cache per session) is far more; allocator noise and the log's page cache are less.
RSS_PER_CYCLE = 64 * 1024
# Plus once, whatever the count: the allocator takes memory in steps (a glibc arena's heap grows
# by 128 KiB and more), so a step that falls inside the second half is no leak. A test failed once
# on a loaded machine at 644 KiB over 10 executor respawns against 640 allowed; a leak of a
# cycle's resources still shows over the cycles, where this allowance does not grow.
RSS_STEP_ALLOWANCE = 256 * 1024
SETTLE = 15.0  # seconds: bound on the wait for the counts to come back


# --------------------------------------------------------------------------- /proc


def _count(path: str) -> int:
    try:
        return len(os.listdir(path))
    except OSError:  # (the process is gone, or going: a reap between two reads is ESRCH, not ENOENT)
        return 0


def rss(pid: int) -> int:
    """Resident memory in bytes (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def children(pid: int) -> list[int]:
    return sorted(p.pid for p in processes() if p.ppid == pid and p.state != "Z")


def zombies(pid: int) -> list[int]:
    return sorted(p.pid for p in processes() if p.ppid == pid and p.state == "Z")


@dataclass(frozen=True)
class Usage:
    fds: int
    threads: int
    children: int
    zombies: int
    ex_fds: int
    ex_threads: int  # (the pool's threads left out)
    ex_children: int
    ex_pool: int  # the gRPC server's pool threads: reported, not judged

    @staticmethod
    def of(pid: int) -> "Usage":
        ex = executor_of(pid)
        pool = thread_names(ex)[CALL_THREAD_NAME] if ex else 0
        return Usage(_count(f"/proc/{pid}/fd"), _count(f"/proc/{pid}/task"), len(children(pid)), len(zombies(pid)),
                     _count(f"/proc/{ex}/fd") if ex else 0, _count(f"/proc/{ex}/task") - pool if ex else 0,
                     len(children(ex)) if ex else 0, pool)

    def within(self, base: "Usage") -> bool:
        return (self.fds <= base.fds + FD_ALLOWANCE and self.threads <= base.threads + THREAD_ALLOWANCE
                and self.children <= base.children and self.zombies == 0
                and self.ex_fds <= base.ex_fds + FD_ALLOWANCE
                and self.ex_threads <= base.ex_threads + THREAD_ALLOWANCE and self.ex_children <= base.ex_children)


# --------------------------------------------------------------------------- the daemon process


@dataclass
class Proc:
    d: Daemon
    serve: ServeProcess
    token: str
    project: str

    @property
    def pid(self) -> int:
        assert self.serve.proc is not None
        return self.serve.proc.pid


def config(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"sessions": {"idleSeconds": IDLE_SECONDS}, **(extra or {})}


@pytest.fixture
async def lens(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[Callable[..., Any]]:
    """``await lens(config)``: ``lens serve`` as a process in ``tmp_path``, paired (strong), with one
    project whose workspace holds ``a.txt``; stopped by SIGTERM after the test, then the log verified."""
    started: list[tuple[ServeProcess, httpx2.AsyncClient]] = []

    async def start(cfg: dict[str, Any]) -> Proc:
        (tmp_path / "config").mkdir(exist_ok=True)
        (tmp_path / "config" / "lens.jsonc").write_text(json.dumps(cfg))
        serve = ServeProcess(tmp_path)
        url = await serve.run(nursery)
        client = httpx2.AsyncClient(base_url=url, timeout=LIMIT)
        started.append((serve, client))
        d = as_daemon(tmp_path, url, client)
        token = await d.pair("cycles", strong=True)
        project = await d.project(token, "p")
        (tmp_path / "workspaces" / "p" / "a.txt").write_text("alpha\n")
        return Proc(d, serve, token, project["id"])

    yield start
    for serve, client in started:
        await client.aclose()
        try:
            assert await serve.terminate() == 0, (tmp_path / "serve-0.err").read_text()[-3000:]
        finally:
            serve.kill()
    if started:
        out = await run_lens(tmp_path, "log", "verify", "--data", "data")
        assert out.returncode == 0, out.stdout + out.stderr


async def cycles(p: Proc, one: Callable[[int], Any], n: int = N, *, rss_check: bool = True) -> None:
    """Warm up with one cycle, take the baseline, run ``n`` cycles; then the counts must come back
    to the baseline (within the allowances) and memory must grow little over the second half."""
    await one(-1)
    await settle(p)
    base = Usage.of(p.pid)
    # (every executor has served a call by now, its hello at least: the names are read)
    assert base.ex_pool >= 1 or executor_of(p.pid) is None, base
    half_rss = 0
    for i in range(n):
        await one(i)
        if i == n // 2 - 1:
            await settle(p)
            half_rss = rss(p.pid)
    await settle(p)
    end_rss = rss(p.pid)

    async def back() -> Usage | None:
        now = Usage.of(p.pid)
        return now if now.within(base) else None

    try:
        await wait_until(back, SETTLE, "resources back at the baseline", interval=0.1)
    except AssertionError:
        raise AssertionError(f"after {n} cycles: {Usage.of(p.pid)}; baseline {base}") from None
    if not rss_check:
        return
    growth = end_rss - half_rss
    assert growth <= RSS_PER_CYCLE * (n - n // 2) + RSS_STEP_ALLOWANCE, (
        f"resident memory grew {growth // 1024} KiB over the last {n - n // 2} cycles "
        f"({half_rss // 1024} -> {end_rss // 1024} KiB)")


async def settle(p: Proc) -> None:
    """Wait until nothing is under way: every session idle (the list answers from the sessions
    projection: it wakes no actor) and the executor runs no command (a command stopped by an
    abort or a job stop ends a moment after the call is answered: the executor gives it a grace
    period after SIGTERM)."""
    async def quiet() -> bool:
        r = await p.d.get("/sessions", p.token)
        assert r.status_code == 200, r.text
        ex = executor_of(p.pid)
        return all(s["status"] == "idle" for s in r.json()["sessions"]) and not (ex and children(ex))

    await wait_until(quiet, LIMIT, "nothing under way")


async def delete(p: Proc, sid: str) -> None:
    r = await p.d.request("DELETE", f"/sessions/{sid}", p.token, json_body={})
    assert r.status_code == 200, r.text


async def new_session(p: Proc) -> str:
    return (await p.d.session(p.token, p.project))["id"]


async def wait_kind(p: Proc, sid: str, kind: str, count: int = 1) -> list[dict[str, Any]]:
    async def seen() -> list[dict[str, Any]] | None:
        found = [e for e in await p.d.events(p.token, sid) if e["kind"] == kind]
        return found if len(found) >= count else None

    return await wait_until(seen, LIMIT, f"{count} {kind} in {sid}")


async def sse_cut(port: int, token: str, target: str) -> None:
    """An SSE request on a raw socket: the first events read, then the socket closed mid-stream."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    with trio.fail_after(LIMIT):
        await stream.send_all((f"GET /api/v1{target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                               f"Authorization: Bearer {token}\r\nLast-Event-ID: 0\r\n\r\n").encode())
        data = b""
        while data.count(b"\nid: ") < 2:
            chunk = await stream.receive_some(65536)
            assert chunk, data
            data += chunk
    await stream.aclose()


# --------------------------------------------------------------------------- the cycles


async def test_sessions_with_a_tool_call_created_run_and_deleted(lens: Any) -> None:
    p = await lens(config())

    async def one(i: int) -> None:
        sid = await new_session(p)
        await p.d.submit(p.token, sid, f"r{i}", '/tool read_file {"path": "a.txt"}')
        await wait_kind(p, sid, "task.finished")
        await p.d.wait_idle(p.token, sid)
        assert [b["status"] for b in finished(await p.d.events(p.token, sid))] == ["ok"]
        await delete(p, sid)

    await cycles(p, one)


async def test_sse_streams_read_and_dropped_abruptly_or_cleanly(lens: Any) -> None:
    p = await lens(config())
    sid = await new_session(p)
    await p.d.submit(p.token, sid, "first", "hello")
    await p.d.wait_idle(p.token, sid)

    async def one(i: int) -> None:
        target = "/events/stream" if i % 2 else f"/events/stream?session={sid}"
        await sse_cut(p.d.port, p.token, target)
        async with p.d.sse(p.token, params={"session": sid} if i % 2 else None, last_event_id=0) as s:
            for _ in range(3):
                assert await s.next_event() is not None

    await cycles(p, one)


async def test_forks_made_and_deleted(lens: Any) -> None:
    p = await lens(config())
    sid = await new_session(p)
    await p.d.submit(p.token, sid, "first", '/tool read_file {"path": "a.txt"}')
    await p.d.wait_idle(p.token, sid)
    seqs = [e["seq"] for e in await p.d.events(p.token, sid)]

    async def one(i: int) -> None:
        r = await p.d.post(f"/sessions/{sid}/fork", p.token, {"seq": seqs[i % len(seqs)]})
        assert r.status_code == 201, r.text
        await delete(p, r.json()["id"])

    await cycles(p, one)


async def test_background_jobs_stopped_or_left_to_finish(lens: Any) -> None:
    p = await lens(config())

    async def one(i: int) -> None:
        sid = await new_session(p)
        stop = i % 2 == 0
        command = "sleep 600" if stop else "echo done"
        await p.d.submit(p.token, sid, f"j{i}", "/tool job " + json.dumps({"action": "start", "command": command}))
        started = (await wait_kind(p, sid, "job.started"))[0]
        if stop:
            r = await p.d.post(f"/sessions/{sid}/jobs/{started['body']['job_id']}/stop", p.token)
            assert r.status_code == 200, r.text
        ended = (await wait_kind(p, sid, "job.finished"))[0]
        assert ended["body"]["job_id"] == started["body"]["job_id"]
        assert ended["body"]["status"] == ("stopped" if stop else "exited"), ended
        await wait_kind(p, sid, "task.finished", 2)  # (the report of its end answered)
        await p.d.wait_idle(p.token, sid)
        await delete(p, sid)

    await cycles(p, one)


async def test_runs_aborted_inside_a_long_command(lens: Any) -> None:
    p = await lens(config())

    async def one(i: int) -> None:
        sid = await new_session(p)
        await p.d.submit(p.token, sid, f"a{i}", '/tool run_command {"command": "sleep 600"}')
        await p.d.wait_running_call(p.token, sid)
        r = await p.d.post(f"/sessions/{sid}/abort", p.token)
        assert r.status_code == 200, r.text
        await p.d.wait_idle(p.token, sid)
        assert [b["name"] for b in finished(await p.d.events(p.token, sid))] == ["run_command"]
        await delete(p, sid)

    await cycles(p, one)


async def test_history_search_and_read(lens: Any) -> None:
    p = await lens(config())
    sid = await new_session(p)
    for i in range(3):
        await p.d.submit(p.token, sid, f"h{i}", f"searchable note number {i}")
    await p.d.wait_idle(p.token, sid)

    async def one(i: int) -> None:
        r = await p.d.post("/history/search", p.token, {"projectId": p.project, "query": "searchable", "limit": 2})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["results"], body
        item = body["results"][i % len(body["results"])]["contextItemId"]
        r = await p.d.get(f"/history/items/{item}", p.token, params={"offset": 0, "limit": 8})
        assert r.status_code == 200 and r.json()["contextItemId"] == item, r.text

    await cycles(p, one)


async def test_pairing_requests_approved_and_revoked(lens: Any) -> None:
    p = await lens(config())

    async def one(i: int) -> None:
        client = f"cycle-{i + 1}"
        token = await p.d.pair(client, strong=i % 2 == 0)
        await trio.to_thread.run_sync(p.d.pairs().revoke, client)
        await p.d.wait_refused(token)

    await cycles(p, one, n=PAIRING_CYCLES)


async def test_executor_killed_from_outside_and_spawned_again(lens: Any) -> None:
    p = await lens(config())

    async def one(i: int) -> None:
        old = executor_of(p.pid)
        if old is not None:
            os.kill(old, signal.SIGKILL)

            async def reaped() -> bool:  # (by the daemon: no zombie left)
                return old not in children(p.pid) and old not in zombies(p.pid)

            await wait_until(reaped, LIMIT, "the killed executor reaped")
        sid = await new_session(p)
        await p.d.submit(p.token, sid, f"x{i}", '/tool read_file {"path": "a.txt"}')
        await wait_kind(p, sid, "task.finished")
        await p.d.wait_idle(p.token, sid)
        assert [b["status"] for b in finished(await p.d.events(p.token, sid))] == ["ok"]
        assert executor_of(p.pid) not in (None, old)
        await delete(p, sid)

    await cycles(p, one, n=EXECUTOR_CYCLES)


async def test_mcp_servers_killed_from_outside_and_restarted(lens: Any) -> None:
    # Restarts are bounded by design: maxRestarts in a row (a run counts as stable, and resets
    # the count, only after 60 s), 1 s before the first, doubling. So each server is restarted a
    # few times only — three (the warm-up and two cycles: 1 + 2 + 4 s of backoff) — and several
    # servers are killed at once, to make twelve restarts; no memory bound over so few cycles.
    names = [f"t{k}" for k in range(4)]
    p = await lens(config({"mcpServers": {name: {"command": sys.executable, "args": [SERVER]} for name in names}}))

    async def running() -> dict[str, int] | None:
        r = await p.d.get("/tools/inventory", p.token)
        assert r.status_code == 200, r.text
        servers = r.json()["mcpServers"]
        assert all(s["status"] in ("starting", "running", "restarting") for s in servers), servers
        up = {s["name"]: s["pid"] for s in servers if s["status"] == "running" and s["pid"]}
        return up if len(up) == len(names) else None

    async def one(i: int) -> None:
        old = await wait_until(running, LIMIT, "the MCP servers running")
        for pid in old.values():
            os.kill(pid, signal.SIGKILL)

        async def again() -> bool:
            now = await running()
            return now is not None and not set(now.values()) & set(old.values()) and not zombies(p.pid)

        await wait_until(again, 20, "the MCP servers started again")

    await cycles(p, one, n=2, rss_check=False)


# --------------------------------------------------------------------------- in process: trio tasks


def trio_tasks() -> int:
    """Every task of this trio run, walked from the root task through each child nursery."""
    todo, n = [trio.lowlevel.current_root_task()], 0
    while todo:
        task = todo.pop()
        n += 1
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    return n


def alive(cls: type) -> int:
    """How many objects of exactly ``cls`` are alive after a full collection."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is cls)


async def test_in_process_tasks_and_session_state_freed_once_sessions_passivate(daemon_factory: DaemonFactory) -> None:
    # The daemon in this process: its trio tasks are counted from the root task, and what a
    # passivated session leaves in memory is looked for directly. Each cycle: a fresh session runs
    # a tool call, starts a background job, and is deleted inside a long command (the deletion
    # aborts the run and stops the job); a long-lived one takes an input; an SSE stream reads a
    # few events and is closed, another is cut off. Once every actor has passivated (idleSeconds
    # after its last call), the task count is the baseline's and nothing of a session's state is
    # left: no actor, and no model request (which holds its agent's whole Working Context).
    d = await daemon_factory(config=config())
    token = await d.pair("tasks", strong=True)
    project = (await d.project(token, "p"))["id"]
    (d.root / "workspaces" / "p" / "a.txt").write_text("alpha\n")
    kept = (await d.session(token, project))["id"]
    inputs = 0

    async def one(i: int) -> None:
        nonlocal inputs
        sid = (await d.session(token, project))["id"]
        await d.submit(token, sid, f"r{i}", '/tool read_file {"path": "a.txt"}')
        await d.submit(token, kept, f"k{i}", '/tool read_file {"path": "a.txt"}')
        inputs += 1
        await d.wait_idle(token, sid)
        await d.wait_idle(token, kept)
        await d.submit(token, sid, f"j{i}", "/tool job " + json.dumps({"action": "start", "command": "sleep 600"}))
        await d.wait_idle(token, sid)
        await d.submit(token, sid, f"c{i}", '/tool run_command {"command": "sleep 600"}')
        await d.wait_running_call(token, sid)
        r = await d.request("DELETE", f"/sessions/{sid}", token, json_body={})
        assert r.status_code == 200, r.text
        kinds = [e["kind"] for e in await d.events(token, sid)]
        assert kinds.count("job.started") == kinds.count("job.finished") == 1 and kinds[-1] == "session.deleted", kinds
        async with d.sse(token, params={"session": kept}, last_event_id=0) as stream:
            for _ in range(3):
                assert await stream.next_event() is not None
        await sse_cut(d.port, token, f"/events/stream?session={kept}")

    async def passivated() -> bool:
        return alive(SessionActor) == 0

    await one(-1)
    await wait_until(passivated, LIMIT, "every actor passivated")
    base = trio_tasks()
    for i in range(20):
        await one(i)
    await wait_until(passivated, LIMIT, "every actor passivated")

    async def tasks_back() -> bool:
        return trio_tasks() <= base

    try:
        await wait_until(tasks_back, LIMIT, "the trio tasks back at the baseline")
    except AssertionError:
        raise AssertionError(f"{trio_tasks()} trio tasks; {base} at the baseline") from None
    assert alive(ModelRequest) == 0

    async def commands_ended() -> bool:  # (the jobs and commands the deletions stopped)
        ex = executor_of(os.getpid())
        return ex is not None and not children(ex)

    await wait_until(commands_ended, LIMIT, "no command left running")
    assert sum(e["kind"] == "task.finished" for e in await d.events(token, kept)) == inputs
