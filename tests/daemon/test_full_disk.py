"""A disk that fills under a real ``lens serve``, made with ``RLIMIT_FSIZE`` (no mount needed).

The limit is lowered on the running process from outside (``prlimit``) to a little above the
size its event log's WAL has reached: appends then fail part-way through a write, as on a disk
that fills (Python ignores ``SIGXFSZ``: the write fails with ``EFBIG``, which SQLite reports as an
I/O error). The executor child is limited on its own, and the log commands through
``preexec_fn``. Every request during the fault must get a clear error (a stable code, 503 where
retrying later helps, never 500), the daemon must stay up with no traceback, nothing
acknowledged may be lost, and everything must work again once the limit is lifted, without a
restart and across one.
"""

from __future__ import annotations

import hashlib
import json
import re
import resource
import signal
import subprocess
from pathlib import Path
from typing import Any

import apsw
import httpx2
import trio

from runtime.http_parts import RETRY_AFTER_SECONDS
from tests.files.sample_images import png_of_size

from .conftest import (LIMIT, Daemon, RawResponse, as_daemon, assert_error_shape, lens_command,
                       projection_dump, run_lens, run_tool, serving, wait_until)

UNLIMITED = resource.RLIM_INFINITY


# A config under which the faux model runs a call of a few hundred kB: the body is let in, and
# the context is not compacted first (the call's text alone is past the faux model's window).
RUN_LARGE_CALLS = '{"server": {"maxBodyBytes": 4194304}, "context": {"compaction": {"auto": false}}}\n'


def limit_files(pid: int, size: int | None) -> None:
    """Files ``pid`` writes cannot grow past ``size`` bytes (``None``: no limit)."""
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (UNLIMITED if size is None else size, UNLIMITED))


def wal_size(data: Path) -> int:
    return (data / "events.db-wal").stat().st_size


def refused(r: httpx2.Response, where: str) -> str:
    """The error code of ``r``, checked to be the API's error shape with its table's status."""
    code, _ = assert_error_shape(RawResponse(r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content),
                                 where)
    return code


def integrity(path: Path) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute("PRAGMA integrity_check").fetchall()
    finally:
        conn.close()


def lens_limited(cwd: Path, size: int, *args: str) -> subprocess.CompletedProcess[str]:
    """``lens ARGS`` with files limited to ``size`` bytes (a disk that is full for it)."""
    return subprocess.run([*lens_command(), *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, UNLIMITED)))


async def fill_until_refused(d: Daemon, token: str, sid: str, acks: dict[str, int]) -> None:
    """Submit inputs (each answered by the faux model) until the log cannot take one."""
    for i in range(40):
        r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": f"fill{i}", "content": f"{i} " + "x" * 4000})
        if r.status_code == 202:
            acks[f"fill{i}"] = r.json()["seq"]
            continue
        assert refused(r, "an input on a full disk") == "SESSION_UNAVAILABLE", r.text
        assert "cannot write its event log right now" in r.text and "disk may be full" in r.text, r.text
        return
    raise AssertionError("the log never filled")


async def test_a_full_disk_answers_every_request_clearly_and_loses_nothing(tmp_path: Path) -> None:
    cwd = tmp_path
    data = cwd / "data"
    acks: dict[str, int] = {}
    async with serving(cwd) as (serve, d):
        assert serve.proc is not None
        pid = serve.proc.pid
        token = await d.pair("strong", strong=True)
        project = await d.project(token, "p")
        sid = (await d.session(token, project["id"]))["id"]
        acks["r0"] = (await d.submit(token, sid, "r0", "before the fault"))["seq"]
        await d.wait_idle(token, sid)
        config = (await d.get("/config/files/lens.jsonc", token)).json()
        await d.register("late")
        pair_file = (cwd / "config" / "pair.json").read_bytes()

        limit_files(pid, wal_size(data) + 16384)
        try:
            await fill_until_refused(d, token, sid, acks)
            # While the session's actor waits before its next try, every call is answered
            # at once (they waited out the whole pause: 1 s, then 2, 4…, up to 30).
            with trio.move_on_after(3.0) as waited:
                for i in range(6):
                    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": f"during{i}", "content": "x"})
                    assert refused(r, "an input on a full disk") == "SESSION_UNAVAILABLE", r.text
                    assert r.headers.get("retry-after") == str(RETRY_AFTER_SECONDS), r.headers
            assert not waited.cancelled_caught, "calls waited out the storage back-off"
            # A project: the log cannot record it. 503, not 500 STORE_WRITE_FAILED.
            ws = cwd / "workspaces" / "q"
            ws.mkdir(parents=True)
            r = await d.post("/projects", token, {"name": "q", "workspace": str(ws)})
            assert refused(r, "a project on a full disk") == "STORE_UNAVAILABLE", r.text
            assert r.headers.get("retry-after") == str(RETRY_AFTER_SECONDS), r.headers  # (a retry may go through)
            assert "nothing was recorded" in r.text and "disk may be full" in r.text, r.text
            # A config write replaces the (small) file whole, then the log cannot record it:
            # the answer says the file was written, rather than 500 "could not commit".
            text = '{\n  // written on a full disk\n}\n'
            r = await d.put("/config/files/lens.jsonc", token, {"text": text, "expectDigest": config["digest"]})
            assert refused(r, "a config write on a full disk") == "STORE_UNAVAILABLE", r.text
            assert "lens.jsonc was written" in r.text and "could not record the change" in r.text, r.text
            assert (cwd / "config" / "lens.jsonc").read_text() == text
            # Reads of the projections, which cannot follow the log, say so.
            r = await d.get("/sessions", token)
            assert r.status_code in (200, 503), r.text
            if r.status_code == 503:
                assert refused(r, "the session list on a full disk") == "PROJECTION_STALLED", r.text
            assert (await d.get("/health")).status_code == 200
            # An approval whose pair file cannot be replaced: refused whole.
            out = lens_limited(cwd, 100, "pair", "approve", "--client", "late")
            assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
            assert "lens: PAIR_FILE_UNWRITABLE: the pair file config/pair.json cannot be updated (the disk is full: " \
                   "the file may not grow that large (EFBIG))" in out.stderr, out.stderr
            assert (cwd / "config" / "pair.json").read_bytes() == pair_file
            assert sorted(p.name for p in (cwd / "config").iterdir()) == ["lens.jsonc", "pair.json",
                                                                          "pair.json.lock"]
        finally:
            limit_files(pid, None)

        async def accepted() -> bool:
            r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "after", "content": "after the fault"})
            if r.status_code != 202:  # (503 until the actor's next try)
                assert refused(r, "an input after the fault") == "SESSION_UNAVAILABLE", r.text
                return False
            acks["after"] = r.json()["seq"]
            return True

        await wait_until(accepted, 45, "the session to take inputs again", interval=0.25)
        view = await d.wait_idle(token, sid, timeout=20)
        assert view["items"][-1]["text"] == "(faux) You said: after the fault"
        assert "session.quarantined" not in {e["kind"] for e in await d.events(token, sid)}

        async def listed() -> bool:
            return (await d.get("/sessions", token)).status_code == 200

        await wait_until(listed, 45, "the projections to follow the log again", interval=0.25)
        r = await d.post("/projects", token, {"name": "q", "workspace": str(cwd / "workspaces" / "q")})
        assert r.status_code == 201, r.text

        # Full again, and stopped while full.
        limit_files(pid, wal_size(data) + 16384)
        await fill_until_refused(d, token, sid, acks)
        code = await serve.terminate()
        assert code == 0, (cwd / "serve-0.err").read_text()[-3000:]
    err = (cwd / "serve-0.err").read_text()
    assert "Traceback" not in err, err[-3000:]

    # The data directory, with the daemon down and the disk free again.
    verify = await run_lens(cwd, "log", "verify", "--data", "data", check=False)
    assert verify.returncode == 0, (verify.stdout, verify.stderr)
    assert integrity(data / "events.db") == [("ok",)] and integrity(data / "projections.db") == [("ok",)]
    decoded = [json.loads(line) for line in (await run_lens(cwd, "log", "decode", "--data", "data")).stdout.splitlines()]
    assert [e["seq"] for e in decoded] == list(range(1, len(decoded) + 1))
    submitted = {e["request_id"]: e["seq"] for e in decoded if e["kind"] == "input.submitted"}
    assert all(submitted.get(rid) == seq for rid, seq in acks.items()), (acks, submitted)

    # A restart after the fault recovers: every acknowledged input is answered, a new one too.
    async with serving(cwd, stderr_name="serve-1.err") as (again, d):
        await d.submit(token, sid, "restarted", "after the restart")
        view = await d.wait_idle(token, sid, timeout=30)
        assert view["items"][-1]["text"] == "(faux) You said: after the restart"
        users = [it["text"] for it in view["items"] if it["role"] == "user"]
        assert len(users) == len(acks) + 1, (len(users), len(acks))
        assert await again.terminate() == 0
    assert "Traceback" not in (cwd / "serve-1.err").read_text()
    kept = projection_dump(data)
    await run_lens(cwd, "log", "rebuild", "--data", "data")
    assert projection_dump(data) == kept


async def test_executor_writes_on_a_full_disk_fail_whole(tmp_path: Path) -> None:
    # A workspace write that fails part-way leaves the old content (or no file) and no temporary
    # file; the call fails with IO_ERROR saying the disk is full, the session goes on.
    cwd = tmp_path
    (cwd / "config").mkdir()
    (cwd / "config" / "lens.jsonc").write_text(RUN_LARGE_CALLS)
    async with serving(cwd) as (serve, d):
        token = await d.pair("strong", strong=True)
        project = await d.project(token, "p")
        ws = cwd / "workspaces" / "p"
        (ws / "a.txt").write_text("old\n")
        sid = (await d.session(token, project["id"]))["id"]

        async def call(rid: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
            return await run_tool(d, token, sid, rid, tool, args)

        assert (await call("spawn", "read_file", {"path": "a.txt"}))["status"] == "ok"
        found = re.search(r"executor for project \S+ on port \d+ \(pid (\d+)\)", (cwd / "serve-0.err").read_text())
        assert found is not None
        executor = int(found.group(1))
        big = "y" * 200_000  # (compresses to little in the log, which stays writable)
        limit_files(executor, 50_000)
        try:
            for rid, args in [("over", {"path": "a.txt", "mode": "rewrite", "content": big}),
                              ("new", {"path": "b.txt", "mode": "create", "content": big})]:
                body = await call(rid, "edit_file", args)
                assert body["status"] == "error" and body["error_code"] == "IO_ERROR", body
                # In words, with the errno name for whoever looks it up (was "operating-system error EFBIG").
                message = body["structured_content"]["error"]["message"]
                assert message == f"{args['path']}: cannot be written: the disk is full: the file may not grow that " \
                                  "large (EFBIG)", body
            assert sorted(p.name for p in ws.iterdir()) == ["a.txt"]  # no b.txt, no temporary file
            assert (ws / "a.txt").read_text() == "old\n"
        finally:
            limit_files(executor, None)
        body = await call("fine", "edit_file", {"path": "a.txt", "mode": "rewrite", "content": big})
        assert body["status"] == "ok", body
        assert (ws / "a.txt").read_text() == big
        assert await serve.terminate() == 0
    assert "Traceback" not in (cwd / "serve-0.err").read_text()


async def test_the_log_commands_on_a_full_disk_say_so_and_change_nothing(tmp_path: Path) -> None:
    cwd = tmp_path
    data = cwd / "data"
    async with serving(cwd) as (serve, d):
        token = await d.pair("strong", strong=True)
        sid = (await d.session(token, (await d.project(token, "p"))["id"]))["id"]
        for i in range(5):
            await d.submit(token, sid, f"r{i}", f"words {i} " + "z" * 3000)
        await d.wait_idle(token, sid)
        assert await serve.terminate() == 0
    kept = projection_dump(data)
    events = (data / "events.db").read_bytes()

    # Too full to even open the log (SQLite makes its -shm file at the first open): this was
    # "events.db is damaged … Restore it from a backup", for a log with nothing wrong in it.
    for args in (["log", "verify"], ["log", "stats"], ["log", "rebuild"], ["serve", "--port", "0"]):
        out = lens_limited(cwd, 100, *args, "--data", "data")
        assert out.returncode != 0, (args, out.stdout, out.stderr)
        assert "lens: STORE_OPEN_FAILED: cannot open data/events.db" in out.stderr, (args, out.stderr)
        assert "disk may be full" in out.stderr and "not a sign that the log is damaged" in out.stderr, out.stderr
        assert "damaged:" not in out.stderr and "backup" not in out.stderr and "Traceback" not in out.stderr, out.stderr

    # Room to open the log, none to rebuild the projections: one transaction, rolled back.
    size = (data / "projections.db").stat().st_size // 2
    out = lens_limited(cwd, size, "log", "rebuild", "--data", "data")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "lens: PROJECTIONS_WRITE_FAILED:" in out.stderr and "disk may be full" in out.stderr, out.stderr
    assert "the rebuild changed nothing" in out.stderr, out.stderr

    # Stats on projections that must be made first: computed in memory, with a note.
    for name in ("projections.db", "projections.db-wal", "projections.db-shm"):
        (data / name).unlink(missing_ok=True)
    out = lens_limited(cwd, 40_000, "log", "stats", "--data", "data", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["total"]["events"] > 0
    assert "projections.db could not be written" in out.stderr and "computed in memory" in out.stderr, out.stderr

    assert (data / "events.db").read_bytes() == events
    await run_lens(cwd, "log", "rebuild", "--data", "data")
    assert projection_dump(data) == kept
    assert (await run_lens(cwd, "log", "verify", "--data", "data")).returncode == 0


async def test_the_daemons_own_files_on_a_full_disk_fail_whole_and_say_so(tmp_path: Path) -> None:
    # The files the daemon writes beside its databases: the artifacts of an edit's history and of
    # view_image, and a config file. Each refused with a stable code naming the full disk, nothing
    # half-written, each done once the limit is lifted (no restart).
    cwd = tmp_path
    data = cwd / "data"
    (cwd / "config").mkdir()
    setting = RUN_LARGE_CALLS
    (cwd / "config" / "lens.jsonc").write_text(setting)
    async with serving(cwd) as (serve, d):
        assert serve.proc is not None
        token = await d.pair("strong", strong=True)
        project = await d.project(token, "p")
        ws = cwd / "workspaces" / "p"
        (ws / "a.txt").write_text("old\n")
        sid = (await d.session(token, project["id"]))["id"]
        config = (await d.get("/config/files/lens.jsonc", token)).json()
        # The executor starts before the limit (a child keeps the limit it was started with). An
        # edit before the fault stores "old\n" and "mid\n"; a.txt holds "mid\n", c.txt bytes stored nowhere.
        first = await run_tool(d, token, sid, "first", "edit_file", {"path": "a.txt", "mode": "rewrite",
                                                                      "content": "mid\n"})
        assert first["status"] == "ok", first
        (ws / "c.txt").write_text("fresh\n")
        named = sorted(hashlib.sha256(b).hexdigest() for b in (b"old\n", b"mid\n"))
        assert sorted(p.name for p in (data / "artifacts").iterdir()) == named
        # Room for the databases to go on growing; none for the files below (their text
        # compresses to little in the log).
        room = max(p.stat().st_size for p in data.iterdir() if p.is_file()) + 256 * 1024
        big = "y" * (room + 100_000)
        (ws / "big.png").write_bytes(png_of_size(room + 100_000))
        text = setting + "// " + "c" * (room + 100_000) + "\n"
        limit_files(serve.proc.pid, room)
        try:
            body = await run_tool(d, token, sid, "over", "edit_file",
                                  {"path": "a.txt", "mode": "rewrite", "content": big})
            assert body["status"] == "error" and body["error_code"] == "ARTIFACT_WRITE_FAILED", body
            message = body["structured_content"]["error"]["message"]
            assert message.startswith("a.txt was changed, but the copies revert_call restores from could not be "
                                      "stored (the disk is full: the file may not grow that large (EFBIG))"), message
            assert "revert_call cannot undo this call" in message, message
            # Its "before" ("fresh\n", stored afresh) went with the failed "after": no file no event names.
            body = await run_tool(d, token, sid, "over-c", "edit_file",
                                  {"path": "c.txt", "mode": "rewrite", "content": big})
            assert body["status"] == "error" and body["error_code"] == "ARTIFACT_WRITE_FAILED", body
            body = await run_tool(d, token, sid, "image", "view_image", {"path": "big.png"})
            assert body["status"] == "error" and body["error_code"] == "ARTIFACT_WRITE_FAILED", body
            assert "big.png could not be stored (the disk is full:" in body["structured_content"]["error"]["message"]
            r = await d.put("/config/files/lens.jsonc", token, {"text": text, "expectDigest": config["digest"]})
            assert refused(r, "a config write on a full disk") == "CONFIG_FILE_UNWRITABLE", r.text
            assert "lens.jsonc cannot be written (the disk is full:" in r.text, r.text
            assert "nothing was changed" in r.text, r.text
            assert (cwd / "config" / "lens.jsonc").read_text() == setting
            # Nothing half-written and nothing left over: no temporary file, no artifact but the
            # two the first edit's event names (a.txt's "before", "mid\n", is one of them: kept), the
            # config file as it was.
            kept = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (data / "artifacts").iterdir()}
            assert sorted(kept) == named and all(name == digest for name, digest in kept.items()), kept
            assert sorted(p.name for p in (cwd / "config").iterdir()) == ["lens.jsonc", "pair.json", "pair.json.lock"]
            assert (await d.get("/health")).status_code == 200
        finally:
            limit_files(serve.proc.pid, None)

        body = await run_tool(d, token, sid, "image-again", "view_image", {"path": "big.png"})
        assert body["status"] == "ok", body
        r = await d.get(f"/artifacts/{body['structured_content']['artifact_id']}", token)
        assert r.status_code == 200 and r.content == (ws / "big.png").read_bytes()
        body = await run_tool(d, token, sid, "edit-again", "edit_file", {"path": "a.txt", "mode": "rewrite",
                                                                         "content": big + "z"})
        assert body["status"] == "ok", body
        assert (await run_tool(d, token, sid, "undo", "revert_call", {"call_id": body["call_id"]}))["status"] == "ok"
        assert (ws / "a.txt").read_text() == big  # (the edit made while full, which has no history to undo)
        # The first edit's history survived the failed one that shared its bytes: it still reverts.
        (ws / "a.txt").write_text("mid\n")
        assert (await run_tool(d, token, sid, "undo-first", "revert_call", {"call_id": first["call_id"]}))[
            "status"] == "ok"
        assert (ws / "a.txt").read_text() == "old\n"
        r = await d.put("/config/files/lens.jsonc", token, {"text": text, "expectDigest": config["digest"]})
        assert r.status_code == 200, r.text
        assert await serve.terminate() == 0
    assert "Traceback" not in (cwd / "serve-0.err").read_text()


async def test_the_daemons_own_lines_on_a_full_disk_are_lost_not_fatal(tmp_path: Path) -> None:
    # Standard output and error redirected to files on the full disk: files made sparse at 8 MiB,
    # limited once it listens (appends fail; the databases, far smaller, can still grow). The daemon's
    # lines and log records are lost; it serves on, and stops with exit 0. (Its last line,
    # "lens: stopped", failed with EFBIG and the daemon exited 1.)
    cwd = tmp_path
    size = 8 * 1024 * 1024
    for name in ("out.txt", "err.txt"):
        with open(cwd / name, "wb") as f:
            f.truncate(size)
    with open(cwd / "out.txt", "ab") as out, open(cwd / "err.txt", "ab") as err:
        proc = await trio.lowlevel.open_process([*lens_command(), "serve", "--port", "0", "--data", "data"], cwd=cwd,
                                                stdout=out, stderr=err)
    try:
        async def listening() -> str | None:
            found = re.search(rb"lens: listening on (http://\S+)\n", (cwd / "out.txt").read_bytes()[size:])
            return found.group(1).decode() if found else None

        url = await wait_until(listening, 30, "the daemon to listen")
        full = max((cwd / name).stat().st_size for name in ("out.txt", "err.txt"))
        limit_files(proc.pid, full)
        async with httpx2.AsyncClient(base_url=url, timeout=LIMIT) as client:
            d = as_daemon(cwd, url, client)
            token = await d.pair("strong", strong=True)
            sid = (await d.session(token, (await d.project(token, "p"))["id"]))["id"]
            # (The executor it starts logs a line, and an answer is given with no output at all.)
            assert (await run_tool(d, token, sid, "r0", "read_file", {"path": "."}))["status"] == "ok"
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(LIMIT):
                assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
    assert [(cwd / name).stat().st_size <= full for name in ("out.txt", "err.txt")] == [True, True]
