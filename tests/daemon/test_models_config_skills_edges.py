"""Edges of the models route (F-MOD-5/6), the config's providers and workspace skills (F-TOOL-6)
as a client drives them: a daemon on loopback port 0, the real executor."""

from __future__ import annotations

import json

from .conftest import error_of, run_tool
from .test_inventory_skills_models_second_pass import TWO, UPPER, _session

SCRIPTED = {"providers": [
    {"id": "faux", "protocol": "faux", "script": [{"text": "scripted"}]},
    {"id": "demo", "protocol": "faux", "script": [{"text": "demo"}]},
]}


async def test_a_configured_faux_provider_listing_no_models_lists_and_serves_faux_1_as_the_built_in(daemon_factory):
    # A `faux` entry with a script and no models replaced the built-in one: `GET /models` listed
    # no faux model while the effective default was `faux/faux-1`, and `faux/anything` served.
    d = await daemon_factory(config=SCRIPTED)
    token = await d.pair("models-client", strong=True)
    project = await d.project(token)
    listing = (await d.get("/models", token)).json()
    assert listing["default"]["effective"] == "faux/faux-1", listing
    faux = [m for m in listing["models"] if m["provider"] == "faux"]
    assert [(m["id"], m["default"], m["available"]) for m in faux] == [("faux/faux-1", True, True)], listing
    assert not [m for m in listing["models"] if m["provider"] == "demo"], listing  # (another faux id: its own list)
    before = (await d.get("/health")).json()["lastSeq"]
    for model in ("faux/anything", "faux/faux-2"):
        r = await d.post("/sessions", token, {"projectId": project["id"], "model": model})
        assert (r.status_code, error_of(r)) == (422, "MODEL_UNKNOWN"), (model, r.text)
        assert "faux-1" in r.json()["error"]["message"], r.text
    assert (await d.get("/health")).json()["lastSeq"] == before
    r = await d.put("/models/default", token, {"model": "faux/anything"})
    assert (r.status_code, error_of(r)) == (422, "MODEL_UNKNOWN"), r.text
    for model in ("faux/faux-1", "demo/anything"):
        r = await d.post("/sessions", token, {"projectId": project["id"], "model": model})
        assert r.status_code == 201, (model, r.text)
    # A defaultModel it does not list is refused before it is written, as for the built-in faux.
    r = await d.put("/config/files/lens.jsonc", token, {"text": json.dumps({**SCRIPTED, "defaultModel": "faux/other"})})
    assert (r.status_code, error_of(r)) == (400, "CONFIG_INVALID"), r.text
    assert "listed: faux-1" in r.json()["error"]["message"], r.text


async def test_an_unknown_provider_protocol_is_refused_naming_the_provider_and_the_protocols(daemon_factory):
    # It was msgspec's text: "Invalid enum value 'grpc' - at `$.providers[1].protocol`", naming
    # neither the provider nor what a protocol may be.
    d = await daemon_factory(config=SCRIPTED)
    token = await d.pair("config-client", strong=True)
    before = (await d.get("/config/files/lens.jsonc", token)).json()
    for protocol, shown in (("grpc", "'grpc'"), ("OpenAI-Chat", "'OpenAI-Chat'"), (7, "7"), (None, "null")):
        cfg = {"providers": [SCRIPTED["providers"][0], {"id": "remote", "protocol": protocol, "models": [{"id": "m"}]}]}
        r = await d.put("/config/files/lens.jsonc", token, {"text": json.dumps(cfg)})
        assert (r.status_code, error_of(r)) == (400, "CONFIG_INVALID"), r.text
        message = r.json()["error"]["message"]
        assert (f"provider 'remote': providers[1].protocol {shown} is not one this version knows; it takes 'openai-responses', "
                f"'openai-chat', 'anthropic' or 'faux'") in message, message
    for entry, words in (({"id": "remote", "models": [{"id": "m"}]}, "provider 'remote': providers[1].protocol is missing; it takes"),
                         ({"protocol": "grpc"}, "providers[1].protocol 'grpc' is not one this version knows")):
        cfg = {"providers": [SCRIPTED["providers"][0], entry]}
        r = await d.put("/config/files/lens.jsonc", token, {"text": json.dumps(cfg)})
        assert (r.status_code, error_of(r)) == (400, "CONFIG_INVALID") and words in r.json()["error"]["message"], r.text
    assert (await d.get("/config/files/lens.jsonc", token)).json() == before  # nothing was written


async def test_a_model_with_a_blank_around_it_is_told_the_blank_is_the_problem(daemon_factory):
    # `PUT /models/default {"model": " faux/faux-1"}` was "model must be '<provider>/<model>', at
    # most 200 characters": the form and the length were right, and the blank went unnamed.
    d = await daemon_factory(config=SCRIPTED)
    token = await d.pair("models-client", strong=True)
    project = await d.project(token)
    for model, why in ((" faux/faux-1", "it begins with a blank"), ("faux/faux-1\n", "it ends with a blank"),
                       ("\tfaux/faux-1 ", "it begins and ends with a blank"), ("   ", "it is all blank"),
                       ("", "it is empty"), ("faux/" + "m" * 196, "it has 201 characters")):
        for method, path, body in (("PUT", "/models/default", {"model": model}),
                                   ("POST", "/sessions", {"projectId": project["id"], "model": model})):
            r = await d.request(method, path, token, json_body=body)
            assert (r.status_code, error_of(r)) == (422, "MODEL_UNKNOWN"), (model, path, r.text)
            message = r.json()["error"]["message"]
            assert message.startswith("model must be '<provider>/<model>', at most 200 characters") and why in message, \
                (model, message)
    listing = (await d.get("/models", token)).json()
    assert listing["default"]["saved"] is None, listing  # nothing was saved


async def test_unloading_a_skill_loaded_in_another_case_names_the_loaded_one(daemon_factory):
    # A load of `review` when `Review` is listed names the case; an unload of `review` when
    # `Review` is loaded answered only "not loaded; nothing to unload".
    d = await daemon_factory(config=SCRIPTED)
    token, _, sid = await _session(d, {"Up": UPPER, "two": TWO})
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "/skill:Review the diff"})
    assert r.status_code == 202, r.text
    await d.wait_idle(token, sid)
    result = await run_tool(d, token, sid, "u1", "skill", {"name": "review", "unload": True})
    text = result["content"][0]["text"]
    assert result["is_error"] is False and result["structured_content"]["status"] == "not_loaded", result
    assert text == ("Skill \"review\" is not loaded (skill names are case-sensitive: loaded as 'Review'); "
                    "nothing to unload."), text
    # A name loaded in no case gets no hint.
    result = await run_tool(d, token, sid, "u2", "skill", {"name": "two", "unload": True})
    assert result["content"][0]["text"] == "Skill \"two\" is not loaded; nothing to unload.", result
    assert not [e for e in await d.events(token, sid) if e["kind"] == "skill.unloaded"]
    # The exact name unloads.
    result = await run_tool(d, token, sid, "u3", "skill", {"name": "Review", "unload": True})
    assert result["structured_content"]["status"] == "unloaded", result


async def test_a_session_stored_on_another_faux_model_id_is_told_model_unknown_after_the_upgrade(daemon_factory):
    # Before, a `faux` entry listing no models took any id: a session made on `faux/scripted`
    # then is stored on it. Now that entry serves `faux-1` alone (docs/providers.md says so).
    d = await daemon_factory(config={"providers": [{"id": "faux", "protocol": "faux",
                                                    "models": [{"id": "scripted"}, {"id": "faux-1"}]}]})
    token = await d.pair("upgrade-client", strong=True)
    project = await d.project(token)
    r = await d.post("/sessions", token, {"projectId": project["id"], "model": "faux/scripted"})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    d.stop.set()
    await d.done.wait()
    d = await daemon_factory(config=SCRIPTED)
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "hi"})
    assert (r.status_code, error_of(r)) == (422, "MODEL_UNKNOWN"), r.text
    assert "no model 'scripted' (configured: faux-1)" in r.json()["error"]["message"], r.text
