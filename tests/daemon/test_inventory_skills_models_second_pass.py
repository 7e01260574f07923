"""A second pass over the provider catalog's models route (F-MOD-5) and workspace skills (F-TOOL-6)
as a client with only the spec drives them: a daemon on loopback port 0, the real executor, skills
written into the project's workspace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .conftest import Daemon, error_of, run_tool

CONFIG = {"providers": [
    {"id": "faux", "protocol": "faux", "script": []},
    {"id": "keyed", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1",
     "apiKeyEnv": "LENS_SECOND_PASS_UNSET_KEY", "models": [{"id": "m:1@x.y", "contextWindow": 1000}]},
    {"id": "off", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:9/v1", "enabled": False,
     "models": [{"id": "m2", "contextWindow": 1000}]},
], "defaultModel": "faux/faux-1"}


async def _session(d: Daemon, skills: dict[str, str]) -> tuple[str, str, str]:
    token = await d.pair("second-pass", strong=True)
    project = await d.project(token)
    ws = Path(project["workspace"])
    for directory, text in skills.items():
        (ws / "skills" / directory).mkdir(parents=True)
        (ws / "skills" / directory / "SKILL.md").write_bytes(text.encode("utf-8"))
    sid = (await d.session(token, project["id"]))["id"]
    return token, project["id"], sid


def _user_texts(view: dict[str, Any]) -> list[str]:
    return [it["text"] for it in view["items"] if it.get("role") == "user"]


async def test_models_route_says_why_a_model_is_not_selectable_and_sessions_are_refused_so(daemon_factory, monkeypatch):
    monkeypatch.delenv("LENS_SECOND_PASS_UNSET_KEY", raising=False)
    d = await daemon_factory(config=CONFIG)
    token, project_id, _ = await _session(d, {})
    r = await d.get("/models", token)
    assert r.status_code == 200, r.text
    by_id = {m["id"]: m for m in r.json()["models"]}
    keyed, off = by_id["keyed/m:1@x.y"], by_id["off/m2"]
    assert (keyed["provider"], keyed["model"]) == ("keyed", "m:1@x.y")  # the id split at the first slash only
    assert (keyed["enabled"], keyed["available"], keyed["reason"]) == (True, False, "PROVIDER_KEY_REQUIRED")
    assert (off["enabled"], off["available"], off["reason"]) == (False, False, "PROVIDER_DISABLED")

    r = await d.post("/sessions", token, {"projectId": project_id, "model": "keyed/m:1@x.y"})
    assert r.status_code == 422 and error_of(r) == "PROVIDER_KEY_REQUIRED", r.text
    assert "LENS_SECOND_PASS_UNSET_KEY" in r.json()["error"]["message"]  # names the variable, never a value
    r = await d.post("/sessions", token, {"projectId": project_id, "model": "off/m2"})
    assert r.status_code == 422 and error_of(r) == "PROVIDER_DISABLED" and "'off'" in r.text, r.text
    r = await d.post("/sessions", token, {"projectId": project_id, "model": "keyed/m:1"})  # (disabled > key > model)
    assert r.status_code == 422 and error_of(r) == "PROVIDER_KEY_REQUIRED", r.text
    # The saved default may not be a disabled provider's model; nothing was saved by the refusal.
    r = await d.put("/models/default", token, {"model": "off/m2"})
    assert r.status_code == 422 and error_of(r) == "PROVIDER_DISABLED", r.text
    r = await d.get("/models", token)
    assert r.json()["default"] == {"effective": "faux/faux-1", "source": "config", "saved": None}


BOM_CRLF = ("\ufeff---\r\nname: crlf\r\ndescription: a skill written on Windows\r\nlicense: MIT\r\n"
            "metadata:\r\n  owner: someone\r\n  tags: [a, b]\r\n---\r\nCRLF-BODY first\r\nsecond line\r\n")
TWO = "---\nname: two\ndescription: d\n---\nTWO-BODY\n"
UPPER = "---\nname: Review\ndescription: reviews\n---\nUPPER-BODY\n"


async def test_bom_crlf_and_unknown_front_matter_keys_load_and_a_second_skill_command_stays_text(daemon_factory):
    d = await daemon_factory(config=CONFIG)
    token, _, sid = await _session(d, {"crlf": BOM_CRLF, "two": TWO})
    listing = await run_tool(d, token, sid, "list", "skill", {})
    by_name = {s["name"]: s for s in listing["structured_content"]["skills"]}
    assert by_name["crlf"]["description"] == "a skill written on Windows" and "problem" not in by_name["crlf"]

    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "/skill:crlf /skill:two go"})
    assert r.status_code == 202, r.text
    view = await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    assert [e["body"]["name"] for e in events if e["kind"] == "skill.loaded"] == ["crlf"]  # one command per input
    [loaded] = [e["body"] for e in events if e["kind"] == "skill.loaded"]
    assert "CRLF-BODY first" in loaded["instructions"] and "\ufeff" not in loaded["instructions"]
    assert "owner" not in loaded["instructions"]  # the front matter is not part of the instructions
    assert _user_texts(view)[-1] == "/skill:two go"  # the rest of the line is the text sent


async def test_a_skill_name_in_another_case_is_refused_naming_the_listed_one(daemon_factory):
    # Skill names are case-sensitive; asking for `review` when only `Review` exists said "no skill
    # named 'review'; available: Review" -- true, but without saying the case is what differs.
    d = await daemon_factory(config=CONFIG)
    token, _, sid = await _session(d, {"Up": UPPER})
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "/skill:review the diff"})
    assert r.status_code == 422 and error_of(r) == "SKILL_NOT_FOUND", r.text
    message = r.json()["error"]["message"]
    assert message.startswith("no skill named 'review'") and "case-sensitive" in message and "'Review'" in message
    result = await run_tool(d, token, sid, "t1", "skill", {"name": "REVIEW"})
    assert result["error_code"] == "SKILL_NOT_FOUND"
    assert "case-sensitive" in result["content"][0]["text"] and "'Review'" in result["content"][0]["text"]
    # The exact name loads.
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": "/skill:Review the diff"})
    assert r.status_code == 202, r.text
    await d.wait_idle(token, sid)
    assert [e["body"]["name"] for e in await d.events(token, sid) if e["kind"] == "skill.loaded"] == ["Review"]


async def test_an_empty_skill_name_is_bad_input_not_a_missing_skill(daemon_factory):
    # `skill {"name": ""}` answered SKILL_NOT_FOUND "no skill named ''", and with `unload` a
    # success "Skill "" is not loaded": an empty name is no name at all.
    d = await daemon_factory(config=CONFIG)
    token, _, sid = await _session(d, {"two": TWO})
    for i, args in enumerate(({"name": ""}, {"name": "   "}, {"name": "", "unload": True})):
        result = await run_tool(d, token, sid, f"t{i}", "skill", args)
        assert result["is_error"] is True and result["error_code"] == "INVALID_ARGUMENT", result
        assert "name must not be empty" in result["content"][0]["text"], result
    assert not [e for e in await d.events(token, sid) if e["kind"] in ("skill.loaded", "skill.unloaded")]


PASTED_KEY = "sk-proj-Q7mZ" + "k3yN0tAName" * 2


async def test_a_key_pasted_where_its_variables_name_belongs_is_refused_without_being_shown(daemon_factory):
    # A provider whose apiKeyEnv held the key itself answered every session on it
    # "provider 'x' needs its key in the environment variable sk-proj-…": the key, shown.
    d = await daemon_factory(config=CONFIG)
    token = await d.pair("second-pass", strong=True)
    before = (await d.get("/config/files/lens.jsonc", token)).json()
    faux = {"id": "faux", "protocol": "faux", "script": []}
    for field, cfg in (
        ("provider 'x': apiKeyEnv", {"providers": [faux, {"id": "x", "protocol": "openai-chat", "apiKeyEnv": PASTED_KEY,
                                                          "models": [{"id": "m"}]}]}),
        ("webSearch.apiKeyEnv", {"providers": [faux], "webSearch": {"apiKeyEnv": f" {PASTED_KEY} "}}),
    ):
        r = await d.put("/config/files/lens.jsonc", token, {"text": json.dumps(cfg)})
        assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
        message = r.json()["error"]["message"]
        assert f"{field} holds what looks like a key itself" in message, message
        assert "Q7mZ" not in r.text and "k3yN0t" not in r.text
    assert (await d.get("/config/files/lens.jsonc", token)).json() == before  # nothing was written
    # A variable's name is still a name, whatever its case.
    ok = {"providers": [faux, {"id": "x", "protocol": "openai-chat", "apiKeyEnv": "SK_PROJ_KEY_OF_MINE_1",
                               "models": [{"id": "m"}]}]}
    r = await d.put("/config/files/lens.jsonc", token, {"text": json.dumps(ok)})
    assert r.status_code == 200, r.text
