"""Provider keys searched for where they must never be (F-MOD-6), for the tests that give ``lens
serve`` canary keys: ``test_provider_keys`` (providers that misbehave) and ``test_keys_in_answers``
(keys that come back as content).

:func:`watched` runs ``lens serve`` as a real process with :data:`KEYS` in its environment, each
keyed provider pointed at a loopback server speaking its wire protocol, and keeps every HTTP answer
and the live stream; :func:`leaks_everywhere` then searches every surface for every canary, whole
and any :data:`PIECE`-character piece of it.
"""

from __future__ import annotations

import json
import os
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import httpx2
import trio
import zstandard

from ..providers.servers.base import ScriptedServer
from .conftest import LIMIT, Daemon, ServeProcess, as_daemon, run_lens, served_once

# Distinctive values, no 8 characters of which occur anywhere by chance.
KEYS = {
    "OPENAI_API_KEY": "sk-proj-Q7mZ4kT1vB8nR3wY6pJ0dF5hGcanaryChatA1",
    "LENS_TEST_RESPONSES_KEY": "sk-proj-X2cV9bN4mL7kJ1hG3fD8sCanaryRespB2",
    "ANTHROPIC_API_KEY": "sk-ant-api03-W5eR8tY2uI6oP9aS3dF7gHcanaryAnthC3",
}
CANARIES = list(KEYS.values())
PIECE = 8  # a leak is the whole value or any piece of this many characters
SLOW = 30.0  # seconds: a session's first turn waits for its project's executor (a bound, not a time)


def pieces(value: str) -> set[str]:
    return {value[i:i + PIECE] for i in range(len(value) - PIECE + 1)}


def leaks(where: str, data: bytes | str, canaries: list[str] = CANARIES) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    found = []
    for canary in canaries:
        hit = next((p for p in sorted(pieces(canary)) if p in text), None)
        if hit is not None:
            at = text.index(hit)
            found.append(f"{where}: {hit!r} of {canary[:4]}…: …{text[max(0, at - 80):at + 80]!r}…")
    return found


def unpacked(data: bytes) -> bytes:
    """``data`` followed by the content of every zstd frame in it (event bodies, snapshots)."""
    out = [data]
    at = data.find(ZSTD_MAGIC)
    while at >= 0:
        try:
            out.append(zstandard.ZstdDecompressor().decompressobj().decompress(data[at:]))
        except zstandard.ZstdError:
            pass
        at = data.find(ZSTD_MAGIC, at + 1)
    return b"\n".join(out)


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def config(url: str) -> dict[str, Any]:
    return {
        "providers": [
            {"id": "chat", "protocol": "openai-chat", "baseUrl": url + "/v1", "apiKeyEnv": "OPENAI_API_KEY",
             "maxRetries": 0, "models": [{"id": "m"}]},
            {"id": "resp", "protocol": "openai-responses", "baseUrl": url + "/v1",
             "apiKeyEnv": "LENS_TEST_RESPONSES_KEY", "maxRetries": 0, "models": [{"id": "m"}]},
            {"id": "anth", "protocol": "anthropic", "baseUrl": url, "apiKeyEnv": "ANTHROPIC_API_KEY",
             "maxRetries": 0, "models": [{"id": "m"}]},
            {"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]},
        ],
        "defaultModel": "chat/m",
        "sessions": {"snapshotEvery": 4},  # (snapshots are written: their files are searched too)
    }


def loop_config(url: str, key_env: str, **more: Any) -> dict[str, Any]:
    """One Chat Completions provider at the loopback server ``url`` (its key in ``key_env``) as the
    default model, and ``more`` of the config."""
    return {"providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{url}/v1", "apiKeyEnv": key_env,
                           "maxRetries": 0, "models": [{"id": "m"}]}],
            "defaultModel": "loop/m", **more}


class Recorder:
    """Every answer the daemon gave a client: status line, headers and body."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    async def on_response(self, resp: httpx2.Response) -> None:
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            return  # (the stream's bytes are kept by the reader)
        await resp.aread()
        head = "\n".join(f"{k}: {v}" for k, v in resp.headers.items())
        self.seen.append((f"{resp.request.method} {resp.request.url.path}", head.encode() + b"\n\n" + resp.content))


async def watch(d: Daemon, token: str, into: bytearray) -> None:
    """The live stream, answers' deltas included, from the start of the log."""
    async with d.sse(token, last_event_id=0) as stream:
        async for chunk in stream._chunks:
            into.extend(chunk)


async def stream_caught_up(d: Daemon, sse: bytearray) -> None:
    """Wait (bounded) until the stream ``watch`` keeps in ``sse`` has given the log's last seq."""
    last = (await d.get("/health")).json()["lastSeq"]
    with trio.fail_after(LIMIT):
        while f"id: {last}\n".encode() not in sse:
            await trio.sleep(0.02)


@dataclass
class Watched:
    """A ``lens serve`` of :func:`watched` and what was kept of it."""

    cwd: Path
    server: ScriptedServer  # the keyed providers' loopback server
    serve: ServeProcess
    d: Daemon  # the suite's client helpers on it
    token: str  # a strong client's credential
    project: dict[str, Any]  # project "p"
    recorder: Recorder  # every answer the daemon gave
    sse: bytearray  # the live stream's bytes, from seq 0


@asynccontextmanager
async def watched(cwd: Path, client_id: str) -> AsyncIterator[Watched]:
    """``lens serve`` in ``cwd`` with :data:`KEYS` in its environment and :func:`config`'s
    providers on a loopback server, a strong client ``client_id`` paired (by the CLI), a project,
    and the stream watched from seq 0. When the block ends the stream is read up to the log's last
    seq, and ``lens serve`` must stop with exit 0: search it then (:func:`leaks_everywhere`)."""
    server = ScriptedServer()
    recorder = Recorder()
    sse = bytearray()
    (cwd / "config").mkdir()
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        (cwd / "config" / "lens.jsonc").write_text(json.dumps(config(url), indent=2))
        serve = ServeProcess(cwd, env={**os.environ, **KEYS})
        async with served_once(serve) as daemon_url:
            # (No connection is kept alive: a request sent on an idle one just as the daemon's
            # keep-alive timer closes it fails without an answer — the race every HTTP/1.1 client
            # meets, which a client expiring its connections first only narrows. On a loaded
            # machine this test met it. Keys are what it is about, not connection reuse.)
            async with httpx2.AsyncClient(base_url=daemon_url, timeout=LIMIT,
                                          limits=httpx2.Limits(max_keepalive_connections=0),
                                          event_hooks={"response": [recorder.on_response]}) as client:
                d = as_daemon(cwd, daemon_url, client)
                token = await d.pair(client_id, strong=True, via="cli")
                project = await d.project(token, "p")
                async with trio.open_nursery() as inner:
                    inner.start_soon(watch, d, token, sse)
                    yield Watched(cwd, server, serve, d, token, project, recorder, sse)
                    await stream_caught_up(d, sse)
                    inner.cancel_scope.cancel()
        nursery.cancel_scope.cancel()


async def leaks_everywhere(w: Watched, *, raw: bool = False) -> tuple[list[str], str]:
    """Every canary found where no key may be, after :func:`watched`'s block: the daemon's stdout
    and stderr, every answer it gave, the stream, the raw bytes of every file under the data
    directory (zstd frames unpacked) and ``lens log decode`` (with ``raw``, also ``--raw``).
    Returns what was found and ``lens log decode``'s output."""
    found: list[str] = []
    found += leaks("stdout", "\n".join(w.serve.lines))
    found += leaks("stderr", (w.cwd / w.serve.stderr_name).read_bytes())
    for where, data in w.recorder.seen:
        found += leaks(where, data)
    found += leaks("SSE stream", bytes(w.sse))
    for path in sorted((w.cwd / "data").rglob("*")):
        if path.is_file():
            found += leaks(str(path.relative_to(w.cwd)), unpacked(path.read_bytes()))
    decoded = await run_lens(w.cwd, "log", "decode", "--data", "data")
    found += leaks("lens log decode", decoded.stdout + decoded.stderr)
    if raw:
        out = await run_lens(w.cwd, "log", "decode", "--data", "data", "--raw")
        found += leaks("lens log decode --raw", out.stdout + out.stderr)
    return found, decoded.stdout
