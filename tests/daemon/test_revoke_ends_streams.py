"""A revocation ends the revoked client's open SSE streams at once: the change of the pair file
wakes the daemon's watcher (inotify), which wakes every stream. With the watcher's poll and the
streams' own check an hour apart, the stream still ends as soon as ``lens pair revoke`` (the
real CLI, another process) has replaced the file, or a ``chmod`` has made it writable by others;
a stream of another client stays open. Real daemon on port 0, real SSE over HTTP/1.1."""

from __future__ import annotations

import os

import pytest

import runtime.pairing
import runtime.stream_api

from .conftest import Daemon, DaemonFactory, run_lens

HOUR = 3600.0


@pytest.fixture
async def slow_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only a notification can end the stream within the test's bound (no request is made
    # meanwhile: a credential check would notice the file changed too).
    monkeypatch.setattr(runtime.pairing, "POLL_SECONDS", HOUR)
    monkeypatch.setattr(runtime.stream_api, "WATCH_SECONDS", HOUR)


async def _open(d: Daemon) -> tuple[str, str]:
    return await d.pair("leaked", strong=False), await d.pair("kept", strong=False)


async def test_lens_pair_revoke_ends_the_clients_open_stream_at_once(slow_polls: None,
                                                                      daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={"server": {"heartbeatSeconds": 3600}})
    leaked, kept = await _open(d)
    owner = await d.pair("owner", strong=True)
    async with d.sse(leaked) as stream, d.sse(kept) as other:
        assert (await stream.next()).comment == "lens stream"
        assert (await other.next()).comment == "lens stream"
        out = await run_lens(d.root, "pair", "revoke", "--client", "leaked")
        assert out.returncode == 0
        end = await stream.until(lambda m: m.event is not None, timeout=20)
        assert end.event == "stream.end" and end.json()["reason"] == "credential revoked", end
        assert await stream.next(timeout=10) is None  # and the response is over
        # the other client's stream is still open: it gets the next event
        await d.project(owner)
        created = await other.until(lambda m: m.event is not None)
        assert created.event == "project.created", created


async def test_a_pair_file_made_writable_by_others_ends_open_streams_at_once(slow_polls: None,
                                                                              daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={"server": {"heartbeatSeconds": 3600}})
    leaked, _kept = await _open(d)
    async with d.sse(leaked) as stream:
        assert (await stream.next()).comment == "lens stream"
        os.chmod(d.pair_path, 0o666)
        end = await stream.until(lambda m: m.event is not None, timeout=20)
        assert end.event == "stream.end" and end.json()["reason"] == "pair file invalid", end
