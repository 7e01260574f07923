"""Pairing and credentials end to end, as a hostile local user and a careless operator would
meet them: the real daemon on a loopback port 0, real HTTP/1.1 and HTTP/2, the pair file on disk.

- A revocation or a re-issue refuses the old credential from the next request on, on a
  connection (HTTP/1.1 kept alive or HTTP/2) that was already authenticated too.
- A revoked client asking again holds a place under ``server.maxPendingPairings`` as a new
  one does.
- A client revoked (or removed by hand) that asks again before the daemon's watcher has seen
  the change is recorded as pending, not answered "pending" with nothing recorded.
- A pair file other users can write (or that another user owns) grants nothing: every
  credential is refused (503 ``PAIR_FILE_INVALID``) until its owner makes it private again.
"""

from __future__ import annotations

import json
import os
from typing import Any

import trio

from tests.daemon.conftest import API, LIMIT, Daemon, error_of, run_lens, wait_until


async def test_a_revocation_refuses_the_credential_on_its_next_request(daemon: Daemon) -> None:
    # `lens pair revoke` has returned: the credential it revoked must not open another request,
    # not even in the quarter of a second before the daemon's watcher looks at the file.
    for i in range(5):
        token = await daemon.pair(f"revoked-{i}", strong=True)
        await trio.to_thread.run_sync(daemon.pairs().revoke, f"revoked-{i}")
        r = await daemon.get("/projects", token)
        assert r.status_code == 401 and error_of(r) == "AUTH_INVALID", r.text


async def test_a_reissue_refuses_the_old_credential_and_takes_the_new_at_once(daemon: Daemon) -> None:
    old = await daemon.pair("phone", strong=True)
    for _ in range(5):
        new = await trio.to_thread.run_sync(lambda: daemon.pairs().approve("phone", strong=False))
        r = await daemon.get("/projects", old)
        assert r.status_code == 401 and error_of(r) == "AUTH_INVALID", r.text
        r = await daemon.post("/projects", new, {"name": "x", "workspace": "/nonexistent"})
        assert r.status_code == 403 and error_of(r) == "FORBIDDEN", r.text  # read-only now, at once
        old = new


async def _h2_get(stream: trio.SocketStream, conn: Any, stream_id: int, path: str, port: int,
                  token: str) -> tuple[int, bytes]:
    import h2.events

    conn.send_headers(stream_id, [(":method", "GET"), (":path", API + path), (":scheme", "http"),
                                  (":authority", f"127.0.0.1:{port}"), ("authorization", f"Bearer {token}")],
                      end_stream=True)
    await stream.send_all(conn.data_to_send())
    status, body = 0, b""
    with trio.fail_after(LIMIT):
        while True:
            data = await stream.receive_some(65536)
            assert data, "the connection ended before the answer"
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == stream_id:
                    status = int(dict(ev.headers)[b":status"])
                elif isinstance(ev, h2.events.DataReceived) and ev.stream_id == stream_id:
                    body += ev.data
                    conn.acknowledge_received_data(ev.flow_controlled_length, stream_id)
                elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == stream_id:
                    if out := conn.data_to_send():
                        await stream.send_all(out)
                    return status, body
            if out := conn.data_to_send():
                await stream.send_all(out)


async def test_a_revocation_reaches_an_http2_connection_already_authenticated(daemon: Daemon) -> None:
    import h2.config
    import h2.connection

    token = await daemon.pair("h2-client", strong=True)
    with trio.fail_after(LIMIT):
        stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
    async with stream:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        status, _ = await _h2_get(stream, conn, 1, "/projects", daemon.port, token)
        assert status == 200
        await trio.to_thread.run_sync(daemon.pairs().revoke, "h2-client")
        status, body = await _h2_get(stream, conn, 3, "/projects", daemon.port, token)
        assert status == 401 and json.loads(body)["error"]["code"] == "AUTH_INVALID", body


async def test_a_revoked_client_asking_again_counts_against_the_pending_limit(daemon_factory) -> None:
    d = await daemon_factory(config={"server": {"maxPendingPairings": 1}})
    await d.pair("old-laptop")
    await trio.to_thread.run_sync(d.pairs().revoke, "old-laptop")
    await d.register("new-phone")  # the one pending place, taken
    r = await d.post("/pair/requests", body={"clientId": "old-laptop", "name": "again"})
    assert r.status_code == 429 and error_of(r) == "PAIRING_LIMIT", r.text
    records = {c["clientId"]: c.get("status", "pending") for c in json.loads(d.pair_path.read_text())["clients"]}
    assert records == {"old-laptop": "revoked", "new-phone": "pending"}
    # once the place is free (the pending request denied), the revoked client may ask again
    await trio.to_thread.run_sync(d.pairs().revoke, "new-phone")
    await d.register("old-laptop")
    records = {c["clientId"]: c.get("status", "pending") for c in json.loads(d.pair_path.read_text())["clients"]}
    assert records == {"old-laptop": "pending", "new-phone": "revoked"}


def _mode(path: Any) -> int:
    return os.stat(path).st_mode & 0o777


async def test_a_pair_file_other_users_can_write_grants_nothing(daemon: Daemon) -> None:
    # Whoever can write the pair file can add a record whose hash matches a credential of their
    # own, with strong trust: it is as secret as an SSH authorized_keys file. One a careless
    # `chmod` (or an editor under umask 0) left writable by the group or by everyone is refused.
    token = await daemon.pair("owner", strong=True)
    for mode in (0o666, 0o620, 0o602):
        os.chmod(daemon.pair_path, mode)
        r = await daemon.get("/projects", token)
        assert r.status_code == 503 and error_of(r) == "PAIR_FILE_INVALID", (oct(mode), r.text)
        out = await run_lens(daemon.root, "pair", "list", check=False)
        assert out.returncode == 2 and "writable by other users" in out.stderr and "chmod 600" in out.stderr, out.stderr
        before = daemon.pair_path.read_bytes()
        out = await run_lens(daemon.root, "pair", "approve", "--client", "owner", check=False)
        assert out.returncode == 2 and "PAIR_FILE_INVALID" in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert daemon.pair_path.read_bytes() == before and _mode(daemon.pair_path) == mode  # not made private by it
        r = await daemon.post("/pair/requests", body={"clientId": "newcomer", "name": ""})
        assert r.status_code == 503 and error_of(r) == "PAIR_FILE_INVALID", r.text
    os.chmod(daemon.pair_path, 0o600)  # the owner's fix: the daemon takes it without a restart
    r = await daemon.get("/projects", token)
    assert r.status_code == 200, r.text
    os.chmod(daemon.pair_path, 0o644)  # readable by others holds only hashes: still fine
    assert (await daemon.get("/projects", token)).status_code == 200


async def test_a_pair_file_another_user_owns_grants_nothing(daemon: Daemon) -> None:
    if os.geteuid() != 0:  # (only root may give a file away)
        import pytest
        pytest.skip("needs root to chown the pair file")
    token = await daemon.pair("owner", strong=True)
    os.chown(daemon.pair_path, 65534, -1)
    try:
        r = await daemon.get("/projects", token)
        assert r.status_code == 503 and error_of(r) == "PAIR_FILE_INVALID", r.text
        out = await run_lens(daemon.root, "pair", "list", check=False)
        assert out.returncode == 2 and "owned by another user" in out.stderr, out.stderr
    finally:
        os.chown(daemon.pair_path, os.geteuid(), -1)
    assert (await daemon.get("/projects", token)).status_code == 200


async def test_a_pairing_request_right_after_a_revocation_or_an_edit_is_recorded(
        monkeypatch: Any, daemon_factory: Any) -> None:
    # The daemon learns of `lens pair revoke` (another process) or a hand edit by watching the
    # file: at once with inotify, within a poll without it (a network file system, the watch
    # limit reached). A client revoked or removed that asks again in between was answered
    # "pending", and nothing was recorded: `lens pair list` showed it revoked, or not at all, and
    # `lens pair approve` answered CLIENT_NOT_FOUND. No inotify here, and polls an hour apart.
    import runtime.filewatch
    import runtime.pairing

    monkeypatch.setattr(runtime.filewatch, "_libc", lambda: None)
    monkeypatch.setattr(runtime.pairing, "POLL_SECONDS", 3600.0)
    d = await daemon_factory()
    await d.pair("revoked")
    await d.pair("removed")
    await run_lens(d.root, "pair", "revoke", "--client", "revoked")
    data = json.loads(d.pair_path.read_text())
    data["clients"] = [c for c in data["clients"] if c["clientId"] != "removed"]
    d.pair_path.write_text(json.dumps(data))
    for cid in ("revoked", "removed"):
        r = await d.post("/pair/requests", body={"clientId": cid, "name": "again"})
        assert r.status_code == 202 and r.json() == {"clientId": cid, "status": "pending"}, r.text
    records = {c["clientId"]: c.get("status", "pending") for c in json.loads(d.pair_path.read_text())["clients"]}
    assert records == {"revoked": "pending", "removed": "pending"}
    out = await run_lens(d.root, "pair", "approve", "--client", "removed")
    assert (await d.get("/projects", out.stdout.strip().splitlines()[-1])).status_code == 200
