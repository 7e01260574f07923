"""The saved default model (F-MOD-5) over HTTP: ``PUT /models/default`` sets or clears it as a
``default_model.set`` event; ``GET /models`` shows it as ``default.source: "saved"``; ``--model``
still wins and ``defaultModel`` yields to it; sessions created without a model take the effective
default at creation; the daemon reads it back at start (from the settings projection, or the log
when the projection cannot say)."""

from __future__ import annotations

import os
from typing import Any

import apsw
import trio

from events.store import Draft, open_store
from events.types import DefaultModelSet
from runtime.daemon import read_saved_default
from runtime.projection_service import ProjectionService

from .conftest import Daemon, error_of, stop_daemon

UNSET_KEY = "LENS_TEST_DEFAULT_MODEL_UNSET_KEY"
CONFIG: dict[str, Any] = {
    "providers": [
        {"id": "faux", "protocol": "faux",
         "models": [{"id": "m1", "contextWindow": 8192}, {"id": "m2", "contextWindow": 8192}]},
        {"id": "other", "protocol": "faux", "models": [{"id": "x1"}]},
        {"id": "off", "protocol": "anthropic", "enabled": False, "models": [{"id": "c2"}]},
        {"id": "keyed", "protocol": "anthropic", "baseUrl": "http://127.0.0.1:9", "apiKeyEnv": UNSET_KEY,
         "models": [{"id": "k1"}]},
    ],
    "defaultModel": "faux/m1",
}


def with_other_disabled() -> dict[str, Any]:
    providers = [dict(p, enabled=False) if p["id"] == "other" else p for p in CONFIG["providers"]]
    return {**CONFIG, "providers": providers}


async def put_default(d: Daemon, token: str, model: Any) -> Any:
    r = await d.put("/models/default", token, {"model": model})
    assert r.status_code == 200, r.text
    return r.json()


async def shown_default(d: Daemon, token: str) -> dict[str, Any]:
    r = await d.get("/models", token)
    assert r.status_code == 200, r.text
    body = r.json()
    flagged = [m["id"] for m in body["models"] if m["default"]]
    assert flagged == ([body["default"]["effective"]] if body["default"]["effective"] in
                       [m["id"] for m in body["models"]] else [])
    return body["default"]


async def last_seq(d: Daemon) -> int:
    return (await d.get("/health")).json()["lastSeq"]


async def default_events(d: Daemon, token: str) -> list[dict[str, Any]]:
    """Every ``default_model.set`` of the log, as the SSE stream replays it from the start."""
    end = await last_seq(d)
    out = []
    async with d.sse(token, last_event_id=0) as stream:
        while end > 0:
            msg = await stream.next_event()
            assert msg is not None
            if msg.event == "default_model.set":
                out.append(msg.json())
            if msg.id == end:
                break
    return out


async def stopped_after_saving_other_x1(daemon_factory: Any) -> tuple[Daemon, str]:
    """A daemon that saved ``other/x1`` as the default model and then stopped, and the token of
    its strong client."""
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("dm-client", strong=True)
    await put_default(d, token, "other/x1")
    await stop_daemon(d)
    return d, token


async def test_set_and_clear_the_saved_default(daemon_factory):
    assert UNSET_KEY not in os.environ
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("dm-client", strong=True)
    project = await d.project(token)
    assert await shown_default(d, token) == {"effective": "faux/m1", "source": "config", "saved": None}
    before = await d.session(token, project["id"])
    assert before["model"] == "faux/m1"  # the effective default at creation

    assert await put_default(d, token, "faux/m2") == {"effective": "faux/m2", "source": "saved", "saved": "faux/m2"}
    assert await shown_default(d, token) == {"effective": "faux/m2", "source": "saved", "saved": "faux/m2"}
    during = await d.session(token, project["id"])
    assert during["model"] == "faux/m2"
    await d.submit(token, during["id"], "r1", "hello")
    await d.wait_idle(token, during["id"])
    requested = [e["body"] for e in await d.events(token, during["id"]) if e["kind"] == "model.requested"]
    assert [(b["provider"], b["model"]) for b in requested] == [("faux", "m2")]

    # Cleared: the chain goes on to the config's defaultModel; sessions keep what they took.
    assert await put_default(d, token, None) == {"effective": "faux/m1", "source": "config", "saved": None}
    assert await shown_default(d, token) == {"effective": "faux/m1", "source": "config", "saved": None}
    after = await d.session(token, project["id"])
    assert after["model"] == "faux/m1"
    assert (await d.view(token, during["id"]))["model"] == "faux/m2"
    assert (await d.view(token, before["id"]))["model"] == "faux/m1"

    events = await default_events(d, token)
    assert [e["body"] for e in events] == [{"model": "faux/m2"}, {"model": None}]
    assert all(e["project_id"] is None and e["session_id"] is None and e["agent_id"] is None for e in events)


async def test_the_same_value_again_records_nothing(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("dm-client", strong=True)
    await put_default(d, token, None)  # nothing saved: clearing changes nothing
    seq = await last_seq(d)
    await put_default(d, token, "faux/m2")
    assert await last_seq(d) == seq + 1
    assert await put_default(d, token, "faux/m2") == {"effective": "faux/m2", "source": "saved", "saved": "faux/m2"}
    assert await last_seq(d) == seq + 1


async def test_a_stream_carries_the_change(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("dm-client", strong=True)
    reader = await d.pair("dm-reader")
    start = await last_seq(d)
    async with d.sse(reader, last_event_id=start) as stream:
        await put_default(d, token, "other/x1")
        msg = await stream.until(lambda m: m.event == "default_model.set")
    assert msg.id == start + 1
    assert msg.json()["kind"] == "default_model.set" and msg.json()["body"] == {"model": "other/x1"}


async def test_cli_model_wins_and_the_saved_default_is_still_recorded(daemon_factory):
    d = await daemon_factory(config=CONFIG, model="faux/m2")
    token = await d.pair("dm-client", strong=True)
    assert await shown_default(d, token) == {"effective": "faux/m2", "source": "cli", "saved": None}
    assert await put_default(d, token, "other/x1") == {"effective": "faux/m2", "source": "cli", "saved": "other/x1"}
    assert await shown_default(d, token) == {"effective": "faux/m2", "source": "cli", "saved": "other/x1"}
    project = await d.project(token)
    assert (await d.session(token, project["id"]))["model"] == "faux/m2"
    assert [e["body"] for e in await default_events(d, token)] == [{"model": "other/x1"}]
    # Without --model, the saved default is in effect (and beats defaultModel).
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    assert await shown_default(d2, token) == {"effective": "other/x1", "source": "saved", "saved": "other/x1"}
    # With it again, --model wins again; what was saved stays saved.
    await stop_daemon(d2)
    d3 = await daemon_factory(config=CONFIG, root=d.root, model="faux/m2")
    assert await shown_default(d3, token) == {"effective": "faux/m2", "source": "cli", "saved": "other/x1"}


async def test_the_saved_default_survives_a_restart(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("dm-client", strong=True)
    await put_default(d, token, "other/x1")
    await put_default(d, token, "faux/m2")
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    assert await shown_default(d2, token) == {"effective": "faux/m2", "source": "saved", "saved": "faux/m2"}
    project = await d2.project(token)
    assert (await d2.session(token, project["id"]))["model"] == "faux/m2"
    # A clear survives it too.
    await put_default(d2, token, None)
    await stop_daemon(d2)
    d3 = await daemon_factory(config=CONFIG, root=d.root)
    assert await shown_default(d3, token) == {"effective": "faux/m1", "source": "config", "saved": None}
    # Without projections.db (rebuilt from the log at start), the same.
    await put_default(d3, token, "other/x1")
    await stop_daemon(d3)
    for name in ("projections.db", "projections.db-wal", "projections.db-shm"):
        (d.data_dir / name).unlink(missing_ok=True)
    d4 = await daemon_factory(config=CONFIG, root=d.root)
    assert await shown_default(d4, token) == {"effective": "other/x1", "source": "saved", "saved": "other/x1"}


async def test_an_event_past_the_projection_and_a_damaged_projection_are_read_from_the_log(daemon_factory):
    d, token = await stopped_after_saving_other_x1(daemon_factory)
    # Written while no daemon ran: the projection has not seen it when the daemon starts.
    async with open_store(d.data_dir) as store:
        await store.append(Draft(DefaultModelSet(model="faux/m2")))
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    assert await shown_default(d2, token) == {"effective": "faux/m2", "source": "saved", "saved": "faux/m2"}
    await stop_daemon(d2)
    # A settings row edited by hand (not a seq): the daemon reads the log instead.
    conn = apsw.Connection(str(d.data_dir / "projections.db"))
    conn.execute("UPDATE settings SET value = 'faux/m1', seq = 'x' WHERE key = 'default_model'")
    conn.close()
    d3 = await daemon_factory(config=CONFIG, root=d.root)
    assert await shown_default(d3, token) == {"effective": "faux/m2", "source": "saved", "saved": "faux/m2"}


async def test_an_event_the_projector_has_not_folded_yet_is_read_from_the_log(daemon_factory):
    # (`lens serve` appends nothing between the projections' first catch-up and this read, so a
    # daemon cannot be made to reach it: the service is run as the daemon runs it, its projector
    # then stopped, so that the event is past the projected position when the model is read.)
    d, token = await stopped_after_saving_other_x1(daemon_factory)
    async with open_store(d.data_dir) as store:
        projections = ProjectionService(d.data_dir, store)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(projections.run)  # (the first catch-up)
                nursery.cancel_scope.cancel()
            await store.append(Draft(DefaultModelSet(model="faux/m2")))
            assert projections.position == store.last_seq - 1
            assert await projections.query("SELECT value FROM settings WHERE key = 'default_model'") == [("other/x1",)]
            assert await read_saved_default(projections, store) == ("faux/m2", store.last_seq)
        finally:
            projections.close()
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    assert await shown_default(d2, token) == {"effective": "faux/m2", "source": "saved", "saved": "faux/m2"}


async def test_bad_input_is_refused_and_records_nothing(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("dm-client", strong=True)
    reader = await d.pair("dm-reader")
    seq = await last_seq(d)
    for body, status, code in [
        ({"model": ""}, 422, "MODEL_UNKNOWN"),
        ({"model": "faux"}, 422, "MODEL_UNKNOWN"),  # no slash
        ({"model": "a/"}, 422, "MODEL_UNKNOWN"),
        ({"model": "faux/"}, 422, "MODEL_UNKNOWN"),
        ({"model": "/m1"}, 422, "MODEL_UNKNOWN"),
        ({"model": " faux/m1"}, 422, "MODEL_UNKNOWN"),
        ({"model": "faux/m1\n"}, 422, "MODEL_UNKNOWN"),
        ({"model": "faux/" + "m" * 10_000}, 422, "MODEL_UNKNOWN"),
        ({"model": "faux/nope"}, 422, "MODEL_UNKNOWN"),  # a provider that lists its models
        ({"model": "nobody/m1"}, 422, "MODEL_UNKNOWN"),
        ({"model": "faux/m1/x"}, 422, "MODEL_UNKNOWN"),
        ({"model": "off/c2"}, 422, "PROVIDER_DISABLED"),
        ({"model": 5}, 422, "VALIDATION_FAILED"),
        ({"model": ["faux/m1"]}, 422, "VALIDATION_FAILED"),
        ({"model": {"id": "faux/m1"}}, 422, "VALIDATION_FAILED"),
        ({"model": True}, 422, "VALIDATION_FAILED"),
        ({}, 422, "VALIDATION_FAILED"),  # the key is required: null clears
        ({"model": "faux/m2", "source": "saved"}, 422, "VALIDATION_FAILED"),
        ({"defaultModel": "faux/m2"}, 422, "VALIDATION_FAILED"),
        ([], 422, "VALIDATION_FAILED"),
        ("faux/m2", 422, "VALIDATION_FAILED"),
    ]:
        r = await d.request("PUT", "/models/default", token, json_body=body)
        assert (r.status_code, error_of(r)) == (status, code), (body, r.text)
    for raw in (b"{", b"", b"\xff", b'{"model": "faux/m2"'):
        r = await d.request("PUT", "/models/default", token, content=raw, headers={"Content-Type": "application/json"})
        assert (r.status_code, error_of(r)) == (400, "INVALID_JSON"), (raw, r.text)
    r = await d.request("PUT", "/models/default", token, content=b"null", headers={"Content-Type": "application/json"})
    assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED"), r.text
    r = await d.request("PUT", "/models/default", reader, json_body={"model": "faux/m2"})
    assert (r.status_code, error_of(r)) == (403, "FORBIDDEN")
    r = await d.request("PUT", "/models/default", None, json_body={"model": "faux/m2"})
    assert (r.status_code, error_of(r)) == (401, "AUTH_REQUIRED")
    r = await d.request("POST", "/models/default", token, json_body={"model": "faux/m2"})
    assert r.status_code == 405
    assert await last_seq(d) == seq
    assert await shown_default(d, token) == {"effective": "faux/m1", "source": "config", "saved": None}


async def test_the_key_is_not_checked_and_a_default_that_cannot_serve_fails_at_submit(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("dm-client", strong=True)
    project = await d.project(token)
    # A provider whose key is not set: saved all the same (the key may be set before the next start).
    assert await put_default(d, token, "keyed/k1") == {"effective": "keyed/k1", "source": "saved", "saved": "keyed/k1"}
    sid = (await d.session(token, project["id"]))["id"]
    assert (await d.view(token, sid))["model"] == "keyed/k1"
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "hi"})
    assert (r.status_code, error_of(r)) == (422, "PROVIDER_KEY_REQUIRED")

    # A saved default whose provider is disabled later: no fallback. New sessions take it and
    # fail at submit with PROVIDER_DISABLED; the daemon starts and says so.
    await put_default(d, token, "other/x1")
    await stop_daemon(d)
    d2 = await daemon_factory(config=with_other_disabled(), root=d.root)
    assert await shown_default(d2, token) == {"effective": "other/x1", "source": "saved", "saved": "other/x1"}
    assert any("saved default model cannot serve (PROVIDER_DISABLED" in line for line in d2.lines)
    sid = (await d2.session(token, project["id"]))["id"]
    assert (await d2.view(token, sid))["model"] == "other/x1"
    r = await d2.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "hi"})
    assert (r.status_code, error_of(r)) == (422, "PROVIDER_DISABLED")
    # ...and it cannot be saved again while disabled; another model can.
    r = await d2.put("/models/default", token, {"model": "other/x1"})
    assert (r.status_code, error_of(r)) == (422, "PROVIDER_DISABLED")
    assert await put_default(d2, token, "faux/m2") == {"effective": "faux/m2", "source": "saved", "saved": "faux/m2"}


async def test_concurrent_changes_leave_the_latest_in_effect(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("dm-client", strong=True)
    choices = ["faux/m1", "faux/m2", "other/x1", None] * 3
    async with trio.open_nursery() as nursery:
        for model in choices:
            nursery.start_soon(put_default, d, token, model)
    events = await default_events(d, token)
    latest = events[-1]["body"]["model"]
    shown = await shown_default(d, token)
    assert shown == ({"effective": latest, "source": "saved", "saved": latest} if latest else {"effective": "faux/m1", "source": "config", "saved": None})
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    assert await shown_default(d2, token) == shown
