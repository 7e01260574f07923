"""F-CTX-5: a request the provider began answering was paid for, also when an abort or a stop cut
it off: what the provider had reported by then is recorded and counts in the session's usage. A
model request a stop cut off stays open (``model.cut_off`` records its usage) and is asked again
after the restart.

An Anthropic Messages server on loopback (the official SDK, the real wire protocol) reports the
input counts in its ``message_start`` and then stalls, as a long answer does."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import trio
import trio.testing

from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import ScriptedServer
from .conftest import LIMIT, Daemon, error_of, run_lens, serving, wait_until

START_USAGE = {"input_tokens": 321, "output_tokens": 1, "cache_read_tokens": None}
CUT = {"input_tokens": 321, "output_tokens": None, "cache_read_tokens": None, "cache_write_tokens": None,
       "reasoning_tokens": None, "total_input_tokens": None}  # (no cache counts sent: the total is unknown)


def _config(url: str) -> dict:
    return {"providers": [{"id": "claude", "protocol": "anthropic", "baseUrl": url,
                           "models": [{"id": "claude-test", "contextWindow": 50000}]}],
            "defaultModel": "claude/claude-test"}


def _stalled() -> object:
    # message_start, ping, the text block's start and its first delta; then nothing more
    return message_stream(text=["Hel", "lo"], usage={"input_tokens": 321, "output_tokens": 1}, stall_after=4)


async def _session(d: Daemon) -> tuple[str, str]:
    token = await d.pair("cut-client", strong=True)
    return token, (await d.session(token, (await d.project(token))["id"]))["id"]


async def _answered_session(daemon_factory, nursery) -> tuple[ScriptedServer, Daemon, str, str]:
    server = ScriptedServer()
    url = await server.start(nursery)
    server.push(message_stream(text="hi", usage={"input_tokens": 10, "output_tokens": 1}, output_tokens=2))
    d = await daemon_factory(config=_config(url))
    token, sid = await _session(d)
    await d.submit(token, sid, "r1", "hello there")
    await d.wait_idle(token, sid)
    return server, d, token, sid


async def _summary_begun(server: ScriptedServer) -> None:
    """The summarizing request reached the server, and what it sent was read (the daemon runs in
    this trio run: every task blocked means the SDK is waiting for the frames that never come)."""
    async def asked() -> bool:
        return len(server.requests) == 2

    await wait_until(asked, what="the summarizing request")
    with trio.fail_after(LIMIT):
        await trio.testing.wait_all_tasks_blocked(cushion=0.05)


async def test_an_abort_during_a_model_answer_records_what_it_had_reported(daemon_factory, nursery):
    server = ScriptedServer()
    url = await server.start(nursery)
    server.push(_stalled())
    d = await daemon_factory(config=_config(url))
    token, sid = await _session(d)
    async with d.sse(token, params={"session": sid}) as stream:
        await d.submit(token, sid, "r1", "a long answer, please")
        await stream.until(lambda m: m.event == "model.delta")
        r = await d.post(f"/sessions/{sid}/abort", token)
        assert r.status_code == 200 and r.json()["aborted"] is True, r.text
    events = await d.events(token, sid)
    (failed,) = [e for e in events if e["kind"] == "model.failed"]
    assert failed["body"]["code"] == "ABORTED" and failed["body"]["usage"] == CUT, failed
    usage = (await d.view(token, sid))["usage"]
    assert usage["requests"] == 1 and usage["inputTokens"] == 321 and usage["unreported"]["outputTokens"] == 1, usage


async def test_an_abort_before_the_model_answered_records_no_usage(daemon_factory, nursery):
    # A request the provider had not begun answering was not paid for: nothing to count (and not
    # a count of zero).
    server = ScriptedServer()
    url = await server.start(nursery)
    server.push(message_stream(text="never", stall_after=0))
    d = await daemon_factory(config=_config(url))
    token, sid = await _session(d)
    await d.submit(token, sid, "r1", "a long answer, please")

    async def asked() -> bool:
        return len(server.requests) == 1

    await wait_until(asked, what="the model request")
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200, r.text
    (failed,) = [e for e in await d.events(token, sid) if e["kind"] == "model.failed"]
    assert failed["body"]["code"] == "ABORTED" and failed["body"]["usage"] is None, failed
    assert (await d.view(token, sid))["usage"]["requests"] == 0


async def test_an_abort_during_a_manual_compaction_records_its_usage(daemon_factory, nursery):
    server, d, token, sid = await _answered_session(daemon_factory, nursery)
    before = (await d.view(token, sid))["usage"]
    server.push(_stalled())
    answered: list = []

    async def compact() -> None:
        answered.append(await d.post(f"/sessions/{sid}/compact", token))

    nursery.start_soon(compact)
    await _summary_begun(server)
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200 and r.json()["aborted"] is True, r.text

    async def done() -> bool:
        return bool(answered)

    await wait_until(done, what="the compaction's answer")
    assert (answered[0].status_code, error_of(answered[0])) == (409, "ABORTED"), answered[0].text
    events = await d.events(token, sid)
    assert "context.compacted" not in [e["kind"] for e in events]
    (failed,) = [e for e in events if e["kind"] == "context.compaction_failed"]
    assert failed["body"]["code"] == "COMPACTION_CUT_OFF" and failed["body"]["usage"] == CUT, failed
    assert failed["body"]["provider"] == "claude" and failed["body"]["model"] == "claude-test"
    usage = (await d.view(token, sid))["usage"]
    assert usage["requests"] == before["requests"] + 1 and usage["inputTokens"] == before["inputTokens"] + 321, usage


async def test_a_stop_during_a_manual_compaction_records_its_usage(daemon_factory, nursery):
    server, d, token, sid = await _answered_session(daemon_factory, nursery)
    server.push(_stalled())
    answered: list = []

    async def compact() -> None:
        answered.append(await d.post(f"/sessions/{sid}/compact", token))

    nursery.start_soon(compact)
    await _summary_begun(server)
    d.stop.set()

    async def done() -> bool:
        return bool(answered)

    await wait_until(done, timeout=4, what="the compaction's answer")
    r = answered[0]
    assert r.status_code == 503 and error_of(r) == "SESSION_UNAVAILABLE", r.text
    assert "summary was not recorded" in r.json()["error"]["message"], r.text
    with trio.fail_after(LIMIT):
        await d.done.wait()
    await d.client.aclose()

    d2 = await daemon_factory(config=_config(server.url), root=d.root)
    events = await d2.events(token, sid)
    kinds = [e["kind"] for e in events]
    assert "context.compacted" not in kinds, kinds
    (failed,) = [e for e in events if e["kind"] == "context.compaction_failed"]
    assert failed["body"]["code"] == "COMPACTION_CUT_OFF" and failed["body"]["usage"] == CUT, failed
    assert (await d2.view(token, sid))["usage"]["inputTokens"] == 10 + 321


async def test_the_faux_provider_reports_its_input_counts_once_it_began_answering(daemon_factory):
    # The scripted provider plays the same: its input counts from the first chunk, the output's
    # at the end.
    config = {"providers": [{"id": "faux", "protocol": "faux", "script": [
        {"text": "", "chunks": ["one ", "two"], "chunkDelayMs": 600000, "inputTokens": 77}]}],
        "defaultModel": "faux/faux-1"}
    d = await daemon_factory(config=config)
    token, sid = await _session(d)
    async with d.sse(token, params={"session": sid}) as stream:
        await d.submit(token, sid, "r1", "count me")
        await stream.until(lambda m: m.event == "model.delta")
        assert (await d.post(f"/sessions/{sid}/abort", token)).status_code == 200
    (failed,) = [e for e in await d.events(token, sid) if e["kind"] == "model.failed"]
    # (the faux's total input is its input count: its words are of the whole request)
    assert failed["body"]["usage"] == {**CUT, "input_tokens": 77, "total_input_tokens": 77}, failed


async def test_an_abort_during_an_automatic_compaction_records_its_usage(daemon_factory, nursery):
    server = ScriptedServer()
    url = await server.start(nursery)
    server.push(_stalled())
    config = _config(url)
    config["providers"][0]["models"][0]["contextWindow"] = 4000
    config["context"] = {"compaction": {"triggerPercent": 90}}
    d = await daemon_factory(config=config)
    token, sid = await _session(d)
    await d.submit(token, sid, "r1", "word " * 4000)  # past the threshold: compacted before it is sent

    async def asked() -> bool:
        return len(server.requests) == 1

    await wait_until(asked, what="the summarizing request")
    assert "Summarize the conversation so far" in str(server.requests[0].body["messages"][-1])
    with trio.fail_after(LIMIT):
        await trio.testing.wait_all_tasks_blocked(cushion=0.05)
    assert (await d.post(f"/sessions/{sid}/abort", token)).status_code == 200
    events = await d.events(token, sid)
    (failed,) = [e for e in events if e["kind"] == "context.compaction_failed"]
    assert failed["body"]["code"] == "COMPACTION_CUT_OFF" and failed["body"]["trigger"] == "auto", failed
    assert failed["body"]["usage"] == CUT
    assert "model.requested" not in [e["kind"] for e in events]
    assert (await d.view(token, sid))["usage"]["inputTokens"] == 321


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_stop_during_a_model_answer_records_its_usage_and_the_request_is_asked_again(
        tmp_path: Path, nursery, sig: int):
    # A real `lens serve` stopped by a signal while the provider answers: what it had reported is
    # recorded (model.cut_off), the request stays open, and the restarted daemon asks it again.
    server = ScriptedServer()
    url = await server.start(nursery)
    server.push(_stalled(), message_stream(text="hello again", usage={"input_tokens": 400, "output_tokens": 1},
                                           output_tokens=5))
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text(json.dumps(_config(url)))
    with trio.fail_after(4 * LIMIT):
        async with serving(tmp_path, stderr_name="serve-0.err") as (serve, d):
            token, sid = await _session(d)
            async with d.sse(token, params={"session": sid}) as stream:
                await d.submit(token, sid, "r1", "a long answer, please")
                await stream.until(lambda m: m.event == "model.delta")
            assert serve.proc is not None
            serve.proc.send_signal(sig)
            with trio.fail_after(LIMIT):
                assert await serve.proc.wait() == 0, (tmp_path / "serve-0.err").read_text()[-2000:]

        events = [json.loads(line) for line in (await run_lens(tmp_path, "log", "decode", "--data", "data")).stdout.splitlines()]
        model = [e for e in events if e["kind"].startswith("model.")]
        assert [e["kind"] for e in model] == ["model.requested", "model.cut_off"], model
        assert model[1]["body"]["usage"] == CUT and model[1]["agent_id"] == model[0]["agent_id"]

        async with serving(tmp_path, stderr_name="serve-1.err") as (serve, d2):
            await d2.wait_idle(token, sid)  # (woken by the daemon: its task was open)
            model = [e for e in await d2.events(token, sid) if e["kind"].startswith("model.")]
            assert [e["kind"] for e in model] == ["model.requested", "model.cut_off", "model.requested",
                                                 "model.responded"], model
            assert [e["body"]["attempt"] for e in model if e["kind"] == "model.requested"] == [1, 2]
            assert len(server.requests) == 2
            view = await d2.view(token, sid)
            assert any(it.get("text") == "hello again" for it in view["items"]), view["items"]
            usage = view["usage"]
            assert (usage["requests"], usage["inputTokens"], usage["outputTokens"]) == (2, 321 + 400, 5), usage
            assert await serve.terminate() == 0
        verify = await run_lens(tmp_path, "log", "verify", "--data", "data")
        assert verify.returncode == 0, verify.stdout + verify.stderr
