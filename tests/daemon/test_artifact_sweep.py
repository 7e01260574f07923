"""The start-up sweep of ``artifacts/`` (docs/decisions.md, "Artifacts no event names, swept at
start-up"), against a real ``lens serve`` (faux model, loopback port 0, a data directory in a
temporary one) killed with SIGKILL between an artifact's store and the event naming it.

The window is made, not hoped for: ``web_fetch`` of a binary stores it as an artifact, then the
actor appends the call's ``tool.finished`` (with its ``artifact.stored``). The page's server is
the test's; when the daemon asks for the page, the test takes the event log's SQLite write lock
(``BEGIN IMMEDIATE``, as another writer would), then answers. The daemon stores the file and its
append waits on the lock; the test sees the file in ``artifacts/`` and kills the daemon. Nothing
sleeps for ordering: every wait is a poll with a bound.
"""

from __future__ import annotations

import hashlib
import json
import signal
from pathlib import Path

import apsw
import trio

from ..unwritable import unwritable
from ..web.server import Request, WebServer, response
from .conftest import LIMIT, run_lens, run_tool, serving, wait_until

CONFIG = {"web": {"allowPrivateAddresses": True}}
NAMED = b"\x00\x01named bytes, recorded by their event\xff" * 8
ORPHAN = b"\x00\x02stored, then the daemon was killed before its event\xff" * 8
RERUN = b"\x00\x03the same page, fetched again after the restart\xff" * 8
SWEPT = "lens: removed "
WHERE = "data/artifacts"  # (as the daemon names it: under --data data)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def set_up(cwd: Path) -> None:
    (cwd / "config").mkdir()
    (cwd / "config" / "lens.jsonc").write_text(json.dumps(CONFIG))


def swept_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(SWEPT) or line.startswith("lens: note: ")]


async def decoded_text(cwd: Path) -> str:
    return (await run_lens(cwd, "log", "decode", "--data", "data")).stdout


async def test_an_artifact_stored_before_a_kill_is_gone_after_the_restart_and_a_named_one_stays(
        tmp_path: Path, nursery: trio.Nursery) -> None:
    cwd = tmp_path
    set_up(cwd)
    artifacts = cwd / "data" / "artifacts"
    web = WebServer("127.0.0.1")
    await nursery.start(web.run)
    named_url = web.reply("/named.bin", NAMED, "application/octet-stream")
    holder: list[apsw.Connection] = []

    async def hold_the_log_then_answer(req: Request, stream: trio.SocketStream) -> None:
        if holder:  # the call run again after the restart (web_fetch is replay-safe): other bytes
            await stream.send_all(response(200, RERUN, [("Content-Type", "application/octet-stream")]))
            return
        # tool.started is committed (the call runs after it): the next append is the result's.
        conn = apsw.Connection(str(cwd / "data" / "events.db"))
        conn.setbusytimeout(int(LIMIT * 1000))
        await trio.to_thread.run_sync(conn.execute, "BEGIN IMMEDIATE")
        holder.append(conn)
        await stream.send_all(response(200, ORPHAN, [("Content-Type", "application/octet-stream")]))

    orphan_url = web.route("/orphan.bin", hold_the_log_then_answer)
    try:
        async with serving(cwd) as (serve, d):
            assert serve.proc is not None
            assert swept_lines(serve.lines) == []  # a new data directory: nothing to sweep, nothing said
            token = await d.pair("strong", strong=True)
            pid = (await d.project(token))["id"]
            kept_sid = (await d.session(token, pid))["id"]
            body = await run_tool(d, token, kept_sid, "r1", "web_fetch", {"url": named_url})
            assert body["structured_content"]["artifact_id"] == sha(NAMED)
            # Named only by a session deleted since: it stays all the same (shared by content).
            r = await d.request("DELETE", f"/sessions/{kept_sid}", token)
            assert r.status_code in (200, 202, 204), r.text
            sid = (await d.session(token, pid))["id"]
            await d.submit(token, sid, "r2", f"/tool web_fetch {json.dumps({'url': orphan_url})}")

            async def stored() -> bool:
                return (artifacts / sha(ORPHAN)).is_file()

            await wait_until(stored, what="the fetched binary stored while its event waits on the log")
            serve.proc.send_signal(signal.SIGKILL)
            with trio.fail_after(10):
                assert await serve.proc.wait() == -signal.SIGKILL
    finally:
        for conn in holder:
            conn.execute("ROLLBACK")
            conn.close()
    # What the kill left: the orphan whole, named by no event; a partial write of a kill mid-write
    # (replace_atomically's temporary name); and a file that is not the store's.
    assert (artifacts / sha(ORPHAN)).read_bytes() == ORPHAN
    text = await decoded_text(cwd)
    assert sha(NAMED) in text and sha(ORPHAN) not in text
    partial = artifacts / f".{sha(b'half')}.{'ab' * 6}.tmp"
    partial.write_bytes(b"ha")
    foreign = artifacts / "notes.txt"
    foreign.write_text("an operator's file")

    async with serving(cwd, stderr_name="serve-1.err") as (serve, d):
        assert (artifacts / sha(NAMED)).read_bytes() == NAMED
        assert not (artifacts / sha(ORPHAN)).exists()
        assert not partial.exists()
        assert foreign.read_text() == "an operator's file"
        assert swept_lines(serve.lines) == [
            f"lens: removed 1 artifact(s) no event names and 1 partial file(s) of interrupted writes from {WHERE}"]
        token = await d.pair("strong-2", strong=True)
        r = await d.get(f"/artifacts/{sha(NAMED)}", token)
        assert r.status_code == 200 and r.content == NAMED
        # The killed call ran again (web_fetch is replay-safe): its result is recorded this time.
        assert (await d.wait_idle(token, sid))["status"] == "idle"
        assert sha(RERUN) in json.dumps(await d.events(token, sid))
        # The same bytes as the swept file, fetched again: stored afresh.
        body = await run_tool(d, token, sid, "r3", "web_fetch", {"url": web.reply("/again.bin", ORPHAN,
                                                                                   "application/octet-stream")})
        assert body["structured_content"]["artifact_id"] == sha(ORPHAN)
        assert (artifacts / sha(ORPHAN)).read_bytes() == ORPHAN
        assert await serve.terminate() == 0

    # Every file is named now: nothing goes, also when the names are folded afresh at this start.
    for name in ("projections.db", "projections.db-wal", "projections.db-shm"):
        (cwd / "data" / name).unlink(missing_ok=True)
    async with serving(cwd, stderr_name="serve-2.err") as (serve, d):
        assert swept_lines(serve.lines) == []
        assert (artifacts / sha(ORPHAN)).read_bytes() == ORPHAN and (artifacts / sha(NAMED)).is_file()
        assert await serve.terminate() == 0


async def test_an_artifacts_path_that_is_no_directory_is_a_note_at_start_not_a_crash(tmp_path: Path) -> None:
    cwd = tmp_path
    async with serving(cwd) as (serve, d):
        token = await d.pair("strong", strong=True)
        await d.project(token)
        assert await serve.terminate() == 0
    artifacts = cwd / "data" / "artifacts"
    artifacts.write_bytes(b"not a directory")
    async with serving(cwd, stderr_name="serve-1.err") as (serve, d):
        assert swept_lines(serve.lines) == [
            f"lens: note: {WHERE} cannot be read (Not a directory); nothing in it was removed, and artifacts "
            f"may not be stored or served until it is a readable directory again"]
        token = await d.pair("strong-2", strong=True)
        r = await d.get("/projects", token)
        assert r.status_code == 200 and len(r.json()["projects"]) == 1
        assert await serve.terminate() == 0
    assert artifacts.read_bytes() == b"not a directory"
    assert "Traceback" not in (cwd / "serve-1.err").read_text()


async def test_files_that_cannot_be_removed_are_named_in_a_note_and_the_daemon_serves(tmp_path: Path) -> None:
    cwd = tmp_path
    async with serving(cwd) as (serve, d):
        token = await d.pair("strong", strong=True)
        await d.project(token)
        assert await serve.terminate() == 0
    artifacts = cwd / "data" / "artifacts"
    artifacts.mkdir()
    orphan = artifacts / sha(ORPHAN)
    orphan.write_bytes(ORPHAN)
    with unwritable(artifacts):
        async with serving(cwd, stderr_name="serve-1.err") as (serve, d):
            lines = swept_lines(serve.lines)
            assert len(lines) == 1 and lines[0].startswith(
                f"lens: note: 1 file(s) no event names could not be removed from {WHERE}, e.g. {sha(ORPHAN)} ("), lines
            assert lines[0].endswith("); they stay"), lines
            token = await d.pair("strong-2", strong=True)
            assert (await d.get("/projects", token)).status_code == 200
            assert await serve.terminate() == 0
        assert orphan.read_bytes() == ORPHAN
    async with serving(cwd, stderr_name="serve-2.err") as (serve, d):  # writable again: it goes
        assert swept_lines(serve.lines) == [
            f"lens: removed 1 artifact(s) no event names and 0 partial file(s) of interrupted writes from {WHERE}"]
        assert await serve.terminate() == 0
    assert not orphan.exists()
