"""Skills as each agent may use them (F-TOOL-6 with F-TOOL-2, F-ACT-5, F-CTX-4): a user's
``/skill:`` command under the tool policy, and the system prompt's skills listing only for agents
that can load skills. A daemon on loopback port 0, the real executor, the ``faux`` provider."""

from __future__ import annotations

import json

import trio

from ..providers.servers import openai_chat as oc
from ..providers.servers.base import ScriptedServer
from .conftest import error_of, question_opened, run_tool, sdks_ready, stop_daemon, wait_until
from .keyleaks import loop_config
from .test_inventory_skills_models_second_pass import CONFIG, TWO, _session
from .test_skills_capabilities_third_pass import REVIEW

SKILL_OFF = {"toolPolicy": {"skill": {"enabled": False}}}
KEY_ENV = "LENS_TEST_SKILLS_POLICY_KEY"


def _kinds(events: list[dict]) -> list[str]:
    return [e["kind"] for e in events]


async def test_a_skill_command_is_refused_as_the_models_call_is_while_the_policy_disables_skill(daemon_factory):
    # The session's policy disables `skill`: a model's call is refused TOOL_DISABLED, and so is
    # the user's `/skill:review` (it loaded the skill before), with nothing recorded; a skill
    # loaded before the policy changed is refused too, as the model's call of it is.
    d = await daemon_factory(config=CONFIG)
    token, _, sid = await _session(d, {"review": REVIEW, "two": TWO})
    await run_tool(d, token, sid, "l0", "skill", {"name": "two"})
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body=SKILL_OFF)
    assert r.status_code == 200, r.text
    before = await d.events(token, sid)
    for rid, name in (("r1", "review"), ("r2", "two"), ("r3", "nosuch")):
        r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": rid, "content": f"/skill:{name} go"})
        assert r.status_code == 422 and error_of(r) == "TOOL_DISABLED", r.text
        assert r.json()["error"]["message"] == (
            "skill is disabled by the tool policy (a /skill: command is held to the tool policy as the model's "
            "skill calls are)"), r.text
    assert await d.events(token, sid) == before  # nothing recorded
    model = await run_tool(d, token, sid, "m1", "skill", {"name": "review"})
    assert model["error_code"] == "TOOL_DISABLED", model
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r4", "content": "/skill:"})
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", r.text  # (bad input first, as before)
    # The policy lifted: the same command loads.
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"toolPolicy": {"skill": None}})
    assert r.status_code == 200, r.text
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r5", "content": "/skill:review go"})
    assert r.status_code == 202, r.text
    await d.wait_idle(token, sid)
    assert [e["body"]["name"] for e in await d.events(token, sid) if e["kind"] == "skill.loaded"] == ["two", "review"]
    # A retry of that input after the policy disabled skill again is its duplicate, as any retry.
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body=SKILL_OFF)
    assert r.status_code == 200, r.text
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r5", "content": "/skill:review go"})
    assert r.status_code == 202 and r.json()["duplicate"] is True, r.text


async def test_a_skill_command_is_held_to_the_configs_restriction_of_the_skill_name(daemon_factory):
    # `paramRestrictions` on `skill`'s `name` hold for the user's command as for the model's call.
    config = {**CONFIG, "tools": {"policy": {"skill": {"paramRestrictions": {"name": {"enum": ["two"]}}}}}}
    d = await daemon_factory(config=config)
    token, _, sid = await _session(d, {"review": REVIEW, "two": TWO})
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "/skill:review go"})
    assert r.status_code == 422 and error_of(r) == "PARAM_NOT_ALLOWED", r.text
    assert r.json()["error"]["message"] == ('skill: name must be one of ["two"] (a /skill: command is held to '
                                            "the tool policy as the model's skill calls are)"), r.text
    assert (await run_tool(d, token, sid, "m1", "skill", {"name": "review"}))["error_code"] == "PARAM_NOT_ALLOWED"
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": "/skill:two go"})
    assert r.status_code == 202, r.text
    await d.wait_idle(token, sid)
    assert [e["body"]["name"] for e in await d.events(token, sid) if e["kind"] == "skill.loaded"] == ["two"]


async def test_a_queued_skill_command_placed_after_the_policy_disabled_skill_loads_nothing_and_says_so(daemon_factory):
    # Accepted while `skill` was allowed, placed after the policy disabled it: the model is told
    # the skill was not loaded and why (an instruction in the log), and a restart replays the same.
    d = await daemon_factory(config=CONFIG)
    token, _, sid = await _session(d, {"review": REVIEW})
    qid = await question_opened(d, token, sid, "r1", '/tool ask_user {"questions": [{"id": "q", "text": "?"}]}')
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": "/skill:review go"})
    assert r.status_code == 202, r.text
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body=SKILL_OFF)
    assert r.status_code == 200, r.text
    r = await d.post(f"/sessions/{sid}/questions/{qid}/answer", token, {"kind": "skip"})
    assert r.status_code in (200, 202), r.text
    view = await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    assert "skill.loaded" not in _kinds(events)
    [note] = [e for e in events if e["kind"] == "instruction.appended"]
    assert note["body"]["source"] == "skill-load-failed:review", note
    assert note["body"]["text"] == ('Skill "review" could not be loaded after all (skill is disabled by the tool '
                                    "policy); its instructions are not in the context."), note
    [placed] = [e for e in events if e["kind"] == "input.placed" and e["body"]["input_request_id"] == "r2"]
    assert events[events.index(placed) - 1] == note  # directly before its input
    await stop_daemon(d)
    d2 = await daemon_factory(config=CONFIG, root=d.root)
    again = await d2.view(token, sid)
    assert again["items"] == view["items"], again


async def test_a_skill_command_whose_read_waited_while_the_policy_disabled_skill_loads_nothing_and_says_so(
        daemon_factory):
    # Placing a queued `/skill:` input checks the policy, then reads the skill, which waits while
    # another session's command holds the workspace. A PATCH disabling `skill` in that wait was
    # not seen: the log held session.configured, then skill.loaded, then input.placed. The policy
    # is checked again under the write lock, where the load is recorded: the note instead.
    d = await daemon_factory(config=CONFIG)
    token, project_id, sid = await _session(d, {"review": REVIEW})
    ws = d.root / "workspaces" / "p"
    other = (await d.session(token, project_id))["id"]
    qid = await question_opened(d, token, sid, "r1", '/tool ask_user {"questions": [{"id": "q", "text": "?"}]}')
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": "/skill:review go"})
    assert r.status_code == 202, r.text
    hold = {"command": "touch started && sleep 600", "timeout_ms": 900000}
    await d.submit(token, other, "o1", f"/tool run_command {json.dumps(hold)}")
    await wait_until(lambda: trio.to_thread.run_sync((ws / "started").exists), what="the command holding the workspace")
    r = await d.post(f"/sessions/{sid}/questions/{qid}/answer", token, {"kind": "skip"})
    assert r.status_code in (200, 202), r.text

    async def first_task_finished() -> bool:
        return "task.finished" in _kinds(await d.events(token, sid))

    await wait_until(first_task_finished, what="the first task's end (the input's placing then waits to read)")
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body=SKILL_OFF)
    assert r.status_code == 200, r.text
    r = await d.post(f"/sessions/{other}/abort", token, {})
    assert r.status_code == 200 and r.json()["aborted"] is True, r.text
    await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    kinds = _kinds(events)
    assert "skill.loaded" not in kinds, kinds
    [note] = [e for e in events if e["kind"] == "instruction.appended"]
    assert note["body"]["source"] == "skill-load-failed:review", note
    assert "skill is disabled by the tool policy" in note["body"]["text"], note
    [placed] = [e for e in events if e["kind"] == "input.placed" and e["body"]["input_request_id"] == "r2"]
    assert events[events.index(placed) - 1] == note  # right before its input
    assert kinds.index("session.configured") < events.index(note)


async def test_the_skills_listing_is_sent_only_to_agents_that_can_load_a_skill(daemon_factory, nursery, monkeypatch):
    # F-CTX-4 with F-ACT-5 and F-TOOL-2: the prompt's skills section told every agent to load
    # skills with the `skill` tool, also a subagent whose `tools` leave it out and a session whose
    # policy disables it (each such call refused). Now those agents get the same prompt less that
    # section; an agent that can load a skill gets the prompt as before, the same text for the main
    # agent and a subagent (one cache prefix wherever the tools are the same).
    monkeypatch.setenv(KEY_ENV, "sk-test-skills-policy-0123456789")
    loop = ScriptedServer()
    d = await daemon_factory(config=loop_config(await loop.start(nursery), KEY_ENV))
    token, _, sid = await _session(d, {"review": REVIEW})
    await sdks_ready()

    async def turn(rid: str, tools: list[str] | None) -> list[dict]:
        """A main agent's turn: one subagent given ``tools`` (None: no subagent); every request's body."""
        before = len(loop.bodies)
        if tools is not None:
            loop.push(oc.chat_stream(calls=[("c" + rid, "subagent", {"prompt": "look", "tools": tools})]),
                      oc.chat_stream(text="sub done"))
        loop.push(oc.chat_stream(text="ok"))
        await d.submit(token, sid, rid, f"input {rid}")
        await d.wait_idle(token, sid)
        return loop.bodies[before:]

    def system(body: dict) -> str:
        first = body["messages"][0]
        assert first["role"] == "system", first
        return first["content"]

    def tool_names(body: dict) -> set[str]:
        return {t["function"]["name"] for t in body.get("tools", [])}

    main, sub, main_after = await turn("r1", ["read_file"])
    full = system(main)
    section = full[full.index("# Skills"):full.index("# Environment")]
    assert section.startswith("# Skills\n") and "- review: Review a change (skills/review/SKILL.md)" in section
    assert "skill" in tool_names(main) and "skill" not in tool_names(sub), tool_names(sub)
    assert system(sub) == full.replace(section, "")  # the same sections, less the listing
    assert system(main_after) == full
    main, sub, _ = await turn("r2", ["read_file", "skill"])  # a subagent that can load one: the same text
    assert system(sub) == system(main) == full
    result = [e["body"] for e in await d.events(token, sid) if e["kind"] == "tool.finished"]
    assert all(r["status"] == "ok" for r in result), result

    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body=SKILL_OFF)
    assert r.status_code == 200, r.text
    [main] = await turn("r3", None)
    assert "skill" not in tool_names(main) and system(main) == full.replace(section, "")
    r = await d.request("PATCH", f"/sessions/{sid}", token, json_body={"toolPolicy": {"skill": None}})
    assert r.status_code == 200, r.text
    [main] = await turn("r4", None)
    assert system(main) == full  # (the prompt of an agent that can load skills is as it was)
