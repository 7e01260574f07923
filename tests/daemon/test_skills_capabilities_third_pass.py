"""A third black-box pass over workspace skills and ``capability_search`` (F-TOOL-3, F-TOOL-4,
F-TOOL-6): a daemon on loopback port 0, the real executor, the ``faux`` provider calling the tools."""

from __future__ import annotations

from .conftest import error_of, run_tool
from .test_inventory_skills_models_second_pass import CONFIG, TWO, _session

REVIEW = "---\nname: review\ndescription: Review a change\n---\nREVIEW-STEPS\n"


async def test_a_skill_name_differing_by_blanks_full_width_or_invisible_characters_names_the_listed_one(daemon_factory):
    # `skill {"name": " review"}` (or full-width letters, a zero-width space inside) answered "no
    # skill named ' review'; available: review", leaving the reader to spot what differs; an unload
    # by such a name said only "not loaded". Names stay exact: nothing is loaded or unloaded by them.
    d = await daemon_factory(config=CONFIG)
    token, _, sid = await _session(d, {"review": REVIEW, "two": TWO})
    for i, name in enumerate((" review", "review ", "review\n", "\uff52\uff45\uff56\uff49\uff45\uff57", "revie\u200bw")):
        result = await run_tool(d, token, sid, f"l{i}", "skill", {"name": name})
        text = result["content"][0]["text"]
        assert result["error_code"] == "SKILL_NOT_FOUND", result
        assert text == (f"SKILL_NOT_FOUND: no skill named {name!r} (skill names are matched exactly, character "
                        "for character: listed as 'review'); available: review, two"), text
    for i, name in enumerate(("re\u0301view", "r\u0435view")):  # (another letter, a Cyrillic look-alike: no hint)
        result = await run_tool(d, token, sid, f"o{i}", "skill", {"name": name})
        assert result["content"][0]["text"] == f"SKILL_NOT_FOUND: no skill named {name!r}; available: review, two"
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "/skill:\uff52eview go"})
    assert r.status_code == 422 and error_of(r) == "SKILL_NOT_FOUND", r.text
    assert "matched exactly, character for character: listed as 'review'" in r.json()["error"]["message"], r.text
    assert not [e for e in await d.events(token, sid) if e["kind"] == "skill.loaded"]

    await run_tool(d, token, sid, "load", "skill", {"name": "review"})
    result = await run_tool(d, token, sid, "u1", "skill", {"name": "review ", "unload": True})
    assert result["structured_content"]["status"] == "not_loaded", result
    assert result["content"][0]["text"] == ("Skill \"review \" is not loaded (skill names are matched exactly, "
                                            "character for character: loaded as 'review'); nothing to unload.")
    assert not [e for e in await d.events(token, sid) if e["kind"] == "skill.unloaded"]


async def test_front_matter_with_carriage_return_line_ends_is_read_as_yaml_reads_it(daemon_factory):
    # YAML ends a line at "\r\n", "\r" or "\n". A SKILL.md saved with lone "\r" line ends (classic
    # Mac) had its front matter taken for instructions: the skill was named by its directory and
    # the model was sent "---\rname: …" as the skill's text.
    d = await daemon_factory(config=CONFIG)
    token, _, sid = await _session(d, {"mac": "---\rname: classic\rdescription: Old line ends\r---\rMAC-BODY\rsecond\r"})
    listing = await run_tool(d, token, sid, "l1", "skill", {})
    [skill] = listing["structured_content"]["skills"]
    assert (skill["name"], skill["description"], skill["base_dir"]) == ("classic", "Old line ends", "skills/mac"), skill
    assert "problem" not in skill
    result = await run_tool(d, token, sid, "l2", "skill", {"name": "classic"})
    assert result["structured_content"]["status"] == "loaded", result
    [loaded] = [e["body"] for e in await d.events(token, sid) if e["kind"] == "skill.loaded"]
    assert loaded["instructions"].endswith("\n\nMAC-BODY\rsecond"), loaded["instructions"]  # (its own line ends kept)
    assert "name:" not in loaded["instructions"]


DEFERRED = {**CONFIG, "tools": {"deferred": ["get_system_time", "sleep_milliseconds"]}}


async def test_a_capability_search_says_how_many_more_match_past_its_limit(daemon_factory):
    # "milliseconds time" matches both deferred tools at one score. With `limit: 1` the answer
    # showed one and said nothing of the other, so a model took the search as exhausted.
    d = await daemon_factory(config=DEFERRED)
    token, _, sid = await _session(d, {})
    query = "milliseconds time"
    result = await run_tool(d, token, sid, "c1", "capability_search", {"query": query, "limit": 1, "load": False})
    assert result["structured_content"]["more"] == 1, result
    assert result["content"][0]["text"].endswith(
        "Not loaded (load: false). 1 more match past the limit of 1; a limit of 2 shows it."), result
    result = await run_tool(d, token, sid, "c2", "capability_search", {"query": query, "limit": 2, "load": False})
    assert result["structured_content"]["more"] == 0, result  # (the limit at the number of matches: no note)
    assert result["content"][0]["text"].endswith("Not loaded (load: false).")
    result = await run_tool(d, token, sid, "c3", "capability_search", {"query": query, "limit": 1})
    assert result["structured_content"]["loaded"] == ["get_system_time"], result
    assert result["structured_content"]["more"] == 1, result
    assert result["content"][0]["text"].endswith(
        "Loaded get_system_time: callable from your next request. 1 more match past the limit of 1, not loaded: "
        "the same search again loads it."), result
    result = await run_tool(d, token, sid, "c4", "capability_search", {"query": query, "limit": 1})
    assert result["structured_content"]["loaded"] == ["sleep_milliseconds"], result
    assert result["structured_content"]["more"] == 0, result  # (the one past the limit is loaded already)
    assert result["content"][0]["text"].endswith("Loaded sleep_milliseconds: callable from your next request.")
    inv = (await d.get("/tools/inventory", token, params={"session": sid})).json()
    assert (inv["loaded"], inv["searchable"]) == (["get_system_time", "sleep_milliseconds"], []), inv


async def test_a_match_past_the_limit_scoring_lower_is_not_promised_to_the_same_search_again(daemon_factory):
    # "sleep milliseconds time" scores sleep_milliseconds above get_system_time. With `limit: 1`
    # the answer said "the same search again loads the next ones", and every repeat said the same
    # while get_system_time was never loaded: the loaded one still ranks first.
    d = await daemon_factory(config=DEFERRED)
    token, _, sid = await _session(d, {})
    args = {"query": "sleep milliseconds time", "limit": 1}
    for i, loaded in enumerate((["sleep_milliseconds"], [])):
        result = await run_tool(d, token, sid, f"c{i}", "capability_search", args)
        assert result["structured_content"]["loaded"] == loaded and result["structured_content"]["more"] == 1, result
        text = result["content"][0]["text"]
        assert text.endswith("1 more match past the limit of 1, not loaded, scoring lower than the ones shown (the "
                             "same search again shows the same): a limit of 2 loads it."), text
    result = await run_tool(d, token, sid, "c9", "capability_search", {**args, "limit": 2})
    assert result["structured_content"]["loaded"] == ["get_system_time"], result
    assert result["structured_content"]["more"] == 0, result


async def test_skill_and_capability_loads_belong_to_the_agent_that_made_them_and_a_fork_keeps_them(daemon_factory):
    d = await daemon_factory(config=DEFERRED)
    token, _, sid = await _session(d, {"review": REVIEW})
    # A subagent's skill and capability loads are its own: recorded under its id, shown by the
    # inventory for that agent, and the main agent's listing and inventory still say not loaded.
    body = await run_tool(d, token, sid, "s1", "subagent", {"prompt": '/tool skill {"name": "review"}'}, agent="main")
    assert body["status"] == "ok", body
    body = await run_tool(d, token, sid, "s2", "subagent", {"prompt": '/tool capability_search {"query": "time", "limit": 1}'},
                          agent="main")
    assert body["status"] == "ok", body
    events = await d.events(token, sid)
    [skill_load] = [e for e in events if e["kind"] == "skill.loaded"]
    [capability_load] = [e for e in events if e["kind"] == "capability.loaded"]
    assert skill_load["agent_id"].startswith("sub_") and capability_load["agent_id"].startswith("sub_")
    r = await d.get("/tools/inventory", token, params={"session": sid, "agent": capability_load["agent_id"]})
    assert r.status_code == 200 and r.json()["loaded"] == ["get_system_time"], r.text
    r = await d.get("/tools/inventory", token, params={"session": sid})
    assert r.json()["loaded"] == [] and r.json()["searchable"] == ["get_system_time", "sleep_milliseconds"], r.text
    listing = await run_tool(d, token, sid, "l1", "skill", {})
    assert [(s["name"], s["loaded"]) for s in listing["structured_content"]["skills"]] == [("review", False)]
    # The main agent's load appends its own copy; a fork made after it has it loaded and appends nothing.
    result = await run_tool(d, token, sid, "l2", "skill", {"name": "review"})
    assert result["structured_content"]["status"] == "loaded", result
    await run_tool(d, token, sid, "c1", "capability_search", {"query": "time", "limit": 1})
    last = (await d.events(token, sid))[-1]["seq"]
    r = await d.post(f"/sessions/{sid}/fork", token, {"seq": last})
    assert r.status_code == 201, r.text
    fork = r.json()["id"]
    result = await run_tool(d, token, fork, "f1", "skill", {"name": "review"})
    assert result["structured_content"]["status"] == "already_loaded", result
    assert not [e for e in await d.events(token, fork) if e["kind"] == "skill.loaded"]
    r = await d.get("/tools/inventory", token, params={"session": fork})
    assert r.json()["loaded"] == ["get_system_time"] and r.json()["searchable"] == ["sleep_milliseconds"], r.text
    result = await run_tool(d, token, fork, "f2", "get_system_time", {})
    assert result["status"] == "ok", result


async def test_a_skill_asked_for_by_its_path_names_the_skill_there(daemon_factory):
    # The system prompt lists each skill with its SKILL.md path; a model that passed the path (or
    # the directory with a slash) was told only "no skill named 'skills/review'; available: …".
    d = await daemon_factory(config=CONFIG)
    token, _, sid = await _session(d, {"review": REVIEW, "dir": "---\nname: other\n---\nBODY\n"})
    for i, (name, base_dir, held) in enumerate((("skills/review", "skills/review", "review"),
                                                 ("skills/review/SKILL.md", "skills/review", "review"),
                                                 ("./skills/review/", "skills/review", "review"),
                                                 ("review/", "skills/review", "review"),
                                                 ("skills/dir/SKILL.md", "skills/dir", "other"))):
        result = await run_tool(d, token, sid, f"p{i}", "skill", {"name": name})
        assert result["error_code"] == "SKILL_NOT_FOUND", result
        assert result["content"][0]["text"] == (
            f"SKILL_NOT_FOUND: no skill named {name!r} ({base_dir}/ holds the skill named {held!r}: a skill is "
            "loaded by its name, not its path); available: other, review"), result
    result = await run_tool(d, token, sid, "p9", "skill", {"name": "../review"})  # (no skill's path)
    assert result["content"][0]["text"] == "SKILL_NOT_FOUND: no skill named '../review'; available: other, review"
    assert not [e for e in await d.events(token, sid) if e["kind"] == "skill.loaded"]


async def test_a_tool_a_fixed_native_list_leaves_out_and_no_program_can_call_is_not_sent_to_a_program(daemon_factory):
    # With `localPtc.nativeCapabilities: []` a native call of `skill` answered TOOL_NOT_NATIVE "call
    # it from a program", where a program's call of it is refused (PTC_TOOL_NOT_ALLOWED): the
    # advice cost the model a program run for nothing. The code stays; the message says so.
    d = await daemon_factory(config={**CONFIG, "localPtc": {"nativeCapabilities": []}})
    token, _, sid = await _session(d, {"review": REVIEW})
    for i, (name, args) in enumerate((("skill", {"name": "review"}), ("ask_user", {"questions": []}))):
        result = await run_tool(d, token, sid, f"n{i}", name, args)
        assert result["error_code"] == "TOOL_NOT_NATIVE", result
        text = result["content"][0]["text"]
        assert text.startswith(f"TOOL_NOT_NATIVE: {name} is left out of your tools by localPtc.nativeCapabilities, and a "
                               f"program cannot call it ("), text
        assert "call it from a program" not in text, text
    result = await run_tool(d, token, sid, "n9", "get_system_time", {})  # (one a program can call: sent there)
    assert result["error_code"] == "TOOL_NOT_NATIVE" and "call it from a program" in result["content"][0]["text"]
    assert not [e for e in await d.events(token, sid) if e["kind"] == "skill.loaded"]


async def test_a_front_matter_name_past_the_limit_is_shown_cut_in_the_hint_naming_its_directory(daemon_factory):
    # A `name:` of 20,000 characters was printed whole by the hint naming the skill in its
    # directory (by the directory's name, or its path): a SKILL_NOT_FOUND of 20,314 characters.
    d = await daemon_factory(config=CONFIG)
    long = "a" * 20_000
    token, _, sid = await _session(d, {"long": f"---\nname: {long}\n---\nBODY\n"})
    for i, (name, words) in enumerate((("long", ", its front matter's name (it cannot be loaded: "),
                                        ("skills/long", ": a skill is loaded by its name, not its path; it cannot be "
                                                        "loaded: "))):
        result = await run_tool(d, token, sid, f"n{i}", "skill", {"name": name})
        text = result["content"][0]["text"]
        assert result["error_code"] == "SKILL_NOT_FOUND", result
        assert text.startswith(f"SKILL_NOT_FOUND: no skill named {name!r} (skills/long/ holds the skill named "
                               f"{'a' * 64!r}…{words}the skill name {'a' * 80!r} is not valid"), text[:400]
        assert len(text) < 500, len(text)
