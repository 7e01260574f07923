"""Skills (F-TOOL-6), the time tools (F-TOOL-9) and ``web_fetch`` (F-TOOL-8) driven as a user
drives them: a real daemon on a loopback port, its real executor, the ``faux`` model calling the
tools (``/tool <name> <json>``), and only what the HTTP API shows read back. Pages come from a
loopback HTTP server, reached under the documented ``web`` grants. What the tools' own tests and
the other daemon tests pin is not done again here; these are the edges a user meets together."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import trio

from ..web.conftest import other_server, web_server  # noqa: F401 (fixtures: pages on 127.0.0.2 and 127.0.0.1)
from ..web.server import WebServer
from .conftest import Daemon, DaemonFactory, error_of, finished, run_tool, stop_daemon

MIB = 1024 * 1024
MAX_SKILL = 256 * 1024


async def _setup(d: Daemon) -> tuple[str, str, Path]:
    token = await d.pair("acceptance-client", strong=True)
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    return token, sid, Path(project["workspace"])


def _skill(ws: Path, where: str, text: str | bytes) -> Path:
    d = ws / where
    d.mkdir(parents=True, exist_ok=True)
    f = d / "SKILL.md"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    return d


def _sized(size: int, name: str) -> str:
    head = f"---\nname: {name}\n---\n"
    return head + "x" * (size - len(head))


# --------------------------------------------------------------------------- skills


async def test_the_listing_and_loads_at_the_edges_of_skill_md(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory()
    token, sid, ws = await _setup(d)
    _skill(ws, "skills/plain", "PLAIN-STEPS without front matter\n")
    _skill(ws, "skills/broken", "---\nname: broken\ndescription: \"unclosed\n---\nBODY\n")
    _skill(ws, "skills/empty", "")
    _skill(ws, "skills/at-limit", _sized(MAX_SKILL, "at-limit"))
    _skill(ws, "skills/past-limit", _sized(MAX_SKILL + 1, "past-limit"))
    _skill(ws, "skills/slash", "---\nname: a/b\n---\nSLASH\n")
    _skill(ws, "skills/dots", "---\nname: ..\n---\nDOTS\n")
    _skill(ws, "skills/uni", "---\nname: révision\n---\nUNI\n")
    _skill(ws, "skills/dup", "---\ndescription: first\n---\nDUP-FIRST\n")
    _skill(ws, ".agents/skills/dup", "---\ndescription: second\n---\nDUP-SECOND\n")
    _skill(ws, ".codex/skills/dup", "---\ndescription: third\n---\nDUP-THIRD\n")
    real = _skill(ws, "elsewhere/linked", "LINKED\n")
    (ws / "skills" / "linked").symlink_to(real, target_is_directory=True)

    body = await run_tool(d, token, sid, "r-list", "skill", {})
    assert not body["is_error"], body
    listed = {(s["name"], s["base_dir"]): s for s in body["structured_content"]["skills"]}
    problems = {k: s.get("problem") for k, s in listed.items()}
    assert problems[("plain", "skills/plain")] is None
    assert problems[("at-limit", "skills/at-limit")] is None
    assert problems[("dup", "skills/dup")] is None
    assert "front matter" in problems[("broken", "skills/broken")]
    assert "no instructions" in problems[("empty", "skills/empty")]
    assert f"at most {MAX_SKILL}" in problems[("past-limit", "skills/past-limit")]
    for name, base in (("a/b", "skills/slash"), ("..", "skills/dots"), ("révision", "skills/uni")):
        assert "is not valid" in problems[(name, base)], problems
    assert "taken by the skill in skills/dup/" in problems[("dup", ".agents/skills/dup")]
    assert "taken by the skill in skills/dup/" in problems[("dup", ".codex/skills/dup")]
    assert not any(base.endswith("linked") for _, base in listed), listed  # a symlinked dir is no skill
    assert all(s["loaded"] is False for s in listed.values())

    # loads: the good ones load, the rest answer with a stable code naming the problem
    for i, (name, code) in enumerate((("broken", "SKILL_INVALID"), ("empty", "SKILL_INVALID"),
                                      ("past-limit", "SKILL_INVALID"), ("a/b", "SKILL_INVALID"),
                                      ("..", "SKILL_INVALID"), ("révision", "SKILL_INVALID"),
                                      ("linked", "SKILL_NOT_FOUND"), ("nope", "SKILL_NOT_FOUND"))):
        got = await run_tool(d, token, sid, f"r-bad{i}", "skill", {"name": name})
        assert got["is_error"] and got["error_code"] == code, (name, got)
        assert repr(name) in got["content"][0]["text"], got
    for i, name in enumerate(("plain", "at-limit", "dup")):
        got = await run_tool(d, token, sid, f"r-ok{i}", "skill", {"name": name})
        assert got["structured_content"]["status"] == "loaded", got
    loads = [e["body"] for e in await d.events(token, sid) if e["kind"] == "skill.loaded"]
    assert [(b["name"], b["base_dir"]) for b in loads] == [("plain", "skills/plain"), ("at-limit", "skills/at-limit"),
                                                           ("dup", "skills/dup")]
    assert loads[0]["instructions"].endswith("PLAIN-STEPS without front matter")
    assert loads[1]["instructions"].endswith("x" * 1000) and "name: at-limit" not in loads[1]["instructions"]
    assert "DUP-FIRST" in loads[2]["instructions"]
    # the listing marks loaded only the directories loaded, not a later one whose name is taken
    body = await run_tool(d, token, sid, "r-list2", "skill", {})
    assert sorted(s["base_dir"] for s in body["structured_content"]["skills"] if s["loaded"]) == [
        "skills/at-limit", "skills/dup", "skills/plain"], body["structured_content"]

    # `/skill:` inputs: unknown names, no name, a bad one
    submitted = [e["kind"] for e in await d.events(token, sid)].count("input.submitted")
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "s1", "content": "/skill:unknown some args"})
    assert r.status_code == 422 and error_of(r) == "SKILL_NOT_FOUND"
    assert "'unknown'" in r.json()["error"]["message"] and "plain" in r.json()["error"]["message"], r.text
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "s2", "content": "/skill:"})
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", r.text
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "s3", "content": "/skill:broken go"})
    assert r.status_code == 422 and error_of(r) == "SKILL_INVALID", r.text
    assert [e["kind"] for e in await d.events(token, sid)].count("input.submitted") == submitted  # none of the three


async def test_eleven_resources_give_ten_samples_in_a_stable_order(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory()
    token, sid, ws = await _setup(d)
    base = _skill(ws, "skills/res", "RES\n")
    names = ["b.txt", "a.txt", "z/1.md", "z/0.md", "m/deep/x.txt", "c.txt", "d.txt", "e.txt", "f.txt", "g.txt",
             "h.txt", "i.txt"]
    for n in names:
        (base / n).parent.mkdir(parents=True, exist_ok=True)
        (base / n).write_text(n)
    first = await run_tool(d, token, sid, "r1", "skill", {"name": "res"})
    sc = first["structured_content"]
    assert sc["base_dir"] == "skills/res" and sc["more_resources"] is True
    assert len(sc["resources"]) == 10 and len(set(sc["resources"])) == 10
    assert set(sc["resources"]) <= set(names) and "SKILL.md" not in sc["resources"]
    assert sc["resources"] == ["a.txt", "b.txt", "c.txt", "d.txt", "e.txt", "f.txt", "g.txt", "h.txt", "i.txt",
                               "m/deep/x.txt"], sc["resources"]  # depth-first, in sorted order
    again = await run_tool(d, token, sid, "r2", "skill", {"name": "res"})
    assert again["structured_content"]["status"] == "already_loaded"
    assert again["structured_content"]["resources"] == sc["resources"]  # the same ten, the same order


async def test_a_skills_snapshot_outlives_edits_and_a_restart_and_unload_then_load_takes_the_current_text(
        daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory()
    token, sid, ws = await _setup(d)
    skill_md = _skill(ws, ".codex/skills/snap", "---\ndescription: s\n---\nVERSION-ONE\n") / "SKILL.md"

    def instructions(view: dict[str, Any]) -> list[str]:
        return [it["text"] for it in view["items"] if it.get("role") == "system"]

    await run_tool(d, token, sid, "r1", "skill", {"name": "snap"})
    skill_md.write_text("---\ndescription: s\n---\nVERSION-TWO\n")
    again = await run_tool(d, token, sid, "r2", "skill", {"name": "snap"})
    assert again["structured_content"]["status"] == "already_loaded"
    assert "changed since it was loaded" in again["content"][0]["text"]
    listing = await run_tool(d, token, sid, "r3", "skill", {})
    assert "- snap [loaded, SKILL.md changed since]" in listing["content"][0]["text"]
    [text] = instructions(await d.view(token, sid))
    assert "VERSION-ONE" in text

    await stop_daemon(d)
    d = await daemon_factory(root=d.root)
    again = await run_tool(d, token, sid, "r4", "skill", {"name": "snap"})
    assert again["structured_content"]["status"] == "already_loaded"
    [text] = instructions(await d.view(token, sid))
    assert "VERSION-ONE" in text and "VERSION-TWO" not in text

    assert (await run_tool(d, token, sid, "r5", "skill", {"name": "snap", "unload": True}))[
        "structured_content"]["status"] == "unloaded"
    assert (await run_tool(d, token, sid, "r6", "skill", {"name": "snap"}))["structured_content"]["status"] == "loaded"
    loads = [e["body"]["instructions"] for e in await d.events(token, sid) if e["kind"] == "skill.loaded"]
    assert len(loads) == 2 and "VERSION-ONE" in loads[0] and "VERSION-TWO" in loads[1]
    view = await d.view(token, sid)
    visible = [it["text"] for it in view["items"] if it.get("role") == "system" and it.get("context") == "visible"]
    assert len(visible) == 1 and "VERSION-TWO" in visible[0], view["items"]


# --------------------------------------------------------------------------- time tools


async def test_the_time_tools_as_a_session_sees_them(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory()
    token, sid, _ = await _setup(d)
    body = await run_tool(d, token, sid, "t1", "get_system_time", {})
    sc = body["structured_content"]
    assert set(sc) == {"unix_ms", "utc", "local"} and isinstance(sc["unix_ms"], int)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", sc["utc"]), sc
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", sc["local"]), sc
    utc = datetime.strptime(sc["utc"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    local = datetime.fromisoformat(sc["local"])
    assert utc == local and int(utc.timestamp()) == sc["unix_ms"] // 1000  # one instant, three spellings

    for i, value in enumerate((-1, 2147483648, "5", 1.5, None, True)):
        got = await run_tool(d, token, sid, f"t-bad{i}", "sleep_milliseconds", {"milliseconds": value})
        assert got["is_error"] and got["error_code"] == "INVALID_ARGUMENT", (value, got)
        assert "milliseconds must be" in got["content"][0]["text"] and "2147483647" in got["content"][0]["text"]
    got = await run_tool(d, token, sid, "t-none", "sleep_milliseconds", {})
    assert got["error_code"] == "INVALID_ARGUMENT" and "'milliseconds'" in got["content"][0]["text"], got

    # an abort mid-sleep ends it promptly and is recorded as interrupted
    await d.submit(token, sid, "t-long", '/tool sleep_milliseconds {"milliseconds": 600000}')
    await d.wait_running_call(token, sid)
    started = trio.current_time()
    r = await d.post(f"/sessions/{sid}/abort", token)
    assert r.status_code == 200, r.text
    await d.wait_idle(token, sid)
    assert trio.current_time() - started < 5
    ended = finished(await d.events(token, sid))[-1]
    assert (ended["name"], ended["status"], ended["error_code"]) == ("sleep_milliseconds", "interrupted", "ABORTED")
    calls = [it["call"] for it in (await d.view(token, sid))["items"] if it.get("call", {}).get("callId") == ended["call_id"]]
    assert [c["status"] for c in calls] == ["interrupted"], calls  # the view says so too


# --------------------------------------------------------------------------- web_fetch
# (``other_server``: pages on 127.0.0.2, the one network the daemon below is granted;
# ``web_server``: pages on 127.0.0.1, which no grant below opens)


async def test_web_fetch_redirects_sizes_urls_and_timeouts(daemon_factory: DaemonFactory, other_server: WebServer,
                                                           web_server: WebServer) -> None:
    d = await daemon_factory(config={"web": {"allowedPrivateNetworks": ["127.0.0.2/32"]}})
    token, sid, _ = await _setup(d)
    n = 0

    async def fetch(args: dict[str, Any]) -> dict[str, Any]:
        nonlocal n
        n += 1
        return await run_tool(d, token, sid, f"w{n}", "web_fetch", args)

    # five redirects are followed, a sixth is not requested
    other_server.reply("/docs/end.html", "<p>see <a href='next.html'>next</a></p>")
    for i in range(5):
        other_server.redirect(f"/hop{i}", f"/hop{i + 1}" if i < 4 else "/docs/end.html")
    body = await fetch({"url": other_server.url("/hop0")})
    assert not body["is_error"], body
    assert body["structured_content"]["redirects"] == [other_server.url(f"/hop{i}") for i in range(1, 5)] + [
        other_server.url("/docs/end.html")], body
    assert f"({other_server.url('/docs/next.html')})" in body["content"][0]["text"]  # against the final URL
    other_server.redirect("/six", "/hop0")
    asked = len(other_server.requests)
    body = await fetch({"url": other_server.url("/six")})
    assert body["error_code"] == "TOO_MANY_REDIRECTS", body
    assert [q.path for q in other_server.requests[asked:]] == ["/six", "/hop0", "/hop1", "/hop2", "/hop3", "/hop4"]

    # a relative redirect resolves against the URL that answered; links against the final URL
    other_server.redirect("/a/b/rel", "../c/page.html")
    other_server.reply("/a/c/page.html", "<a href='img.png'>img</a>")
    body = await fetch({"url": other_server.url("/a/b/rel")})
    assert body["structured_content"]["final_url"] == other_server.url("/a/c/page.html"), body
    assert f"({other_server.url('/a/c/img.png')})" in body["content"][0]["text"], body

    # a redirect to an address not granted: refused before anything connects there
    web_server.reply("/secret", "internal", "text/plain")
    other_server.redirect("/out", web_server.url("/secret"))
    body = await fetch({"url": other_server.url("/out")})
    assert body["error_code"] == "ADDRESS_NOT_PUBLIC", body
    assert web_server.requests == []

    # 5 MiB after gzip decompression is returned whole; one byte more is refused, nothing returned
    other_server.gzip("/max.txt", b"a" * (5 * MIB))
    other_server.gzip("/over.txt", b"a" * (5 * MIB + 1))
    body = await fetch({"url": other_server.url("/max.txt")})
    assert not body["is_error"] and body["structured_content"]["bytes"] == 5 * MIB, body["structured_content"]
    body = await fetch({"url": other_server.url("/over.txt")})
    assert body["error_code"] == "RESPONSE_TOO_LARGE" and len(body["content"]) == 1, body

    # credentials in the URL: refused, not echoed, nothing requested
    asked = len(other_server.requests)
    body = await fetch({"url": other_server.url("/docs/end.html").replace("://", "://me:hunter2@")})
    assert body["error_code"] == "URL_CREDENTIALS" and "hunter2" not in body["content"][0]["text"], body
    assert len(other_server.requests) == asked

    # timeouts: above 0, at most 120, a number
    for value in (0, 121, "30", True, [30], -1):  # (null is the default: test_harness_fourth_pass.py)
        body = await fetch({"url": other_server.url("/docs/end.html"), "timeout": value})
        assert body["error_code"] == "INVALID_ARGUMENT", (value, body)
        assert "timeout must be a number of seconds above 0 and at most 120" in body["content"][0]["text"], body
    body = await fetch({"url": other_server.url("/docs/end.html"), "timeout": 120})
    assert not body["is_error"], body
    assert len(other_server.requests) == asked + 1


async def test_a_loaded_skill_whose_skill_md_broke_or_went_stays_loaded_for_the_tool_and_for_skill_inputs(
        daemon_factory: DaemonFactory) -> None:
    # Loaded, then its SKILL.md made unreadable (a repeated key), then deleted. Its snapshot is in
    # the context either way, so a repeat load is `already_loaded` (it was SKILL_INVALID while
    # broken, "cannot be loaded" to the model while its instructions were in its context) and a
    # `/skill:rev args` input is accepted and sends its args (it was refused 422 in both cases,
    # though placing it loads nothing).
    d = await daemon_factory()
    token, sid, ws = await _setup(d)
    md = _skill(ws, "skills/rev", "---\nname: rev\n---\nREV-STEPS\n") / "SKILL.md"
    await run_tool(d, token, sid, "r1", "skill", {"name": "rev"})
    md.write_text("---\nname: rev\nname: twice\n---\nREV-STEPS-2\n")
    again = await run_tool(d, token, sid, "r2", "skill", {"name": "rev"})
    assert not again["is_error"] and again["structured_content"]["status"] == "already_loaded", again
    text = again["content"][0]["text"]
    assert text.startswith('Skill "rev" is already loaded') and "nothing was appended" in text, text
    assert "the key 'name' appears twice" in text, text
    listing = (await run_tool(d, token, sid, "r3", "skill", {}))["content"][0]["text"]
    assert "- rev [loaded; cannot be loaded again: SKILL.md front matter: line 3: the key 'name' appears twice]" \
        in listing, listing
    await d.submit(token, sid, "s1", "/skill:rev while broken")
    await d.wait_idle(token, sid)
    md.unlink()
    await d.submit(token, sid, "s2", "/skill:rev while gone")
    view = await d.wait_idle(token, sid)
    events = await d.events(token, sid)
    assert [e["kind"] for e in events].count("skill.loaded") == 1
    assert "instruction.appended" not in [e["kind"] for e in events]
    assert [it["text"] for it in view["items"] if it["role"] == "user"][-2:] == ["while broken", "while gone"]
    [snapshot] = [it["text"] for it in view["items"] if it.get("role") == "system"]
    assert "REV-STEPS" in snapshot and "REV-STEPS-2" not in snapshot
    # unloaded, it is what the workspace holds again: nothing to load
    await run_tool(d, token, sid, "r4", "skill", {"name": "rev", "unload": True})
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "s3", "content": "/skill:rev now"})
    assert r.status_code == 422 and error_of(r) == "SKILL_NOT_FOUND", r.text


def _dup_listing(body: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], str]:
    """The ``dup`` entries of a listing by base dir, and its text."""
    assert not body["is_error"], body
    return ({s["base_dir"]: s for s in body["structured_content"]["skills"] if s["name"] == "dup"},
            body["content"][0]["text"])


async def _dup_loaded(d: Daemon, first_text: str, loaded_from: str) -> tuple[str, str, Path]:
    """A session whose workspace holds ``dup`` in ``skills/`` (``first_text``) and a good one in
    ``.agents/skills/``, and whose agent has loaded ``dup`` (from ``loaded_from``): its token, id
    and ``skills/dup/SKILL.md``."""
    token, sid, ws = await _setup(d)
    first = _skill(ws, "skills/dup", first_text) / "SKILL.md"
    _skill(ws, ".agents/skills/dup", "---\ndescription: second\n---\nDUP-SECOND\n")
    got = await run_tool(d, token, sid, "r1", "skill", {"name": "dup"})
    assert got["structured_content"]["base_dir"] == loaded_from, got
    return token, sid, first


async def test_the_listing_marks_loaded_the_directory_loaded_when_it_breaks_beside_a_good_one(
        daemon_factory: DaemonFactory) -> None:
    # skills/dup is loaded, then breaks while .agents/skills/dup is good: the listing guessed "the
    # loadable one" was loaded, marking .agents/skills/dup loaded "SKILL.md changed since" (a file
    # never loaded) and skills/dup not; a repeat load said that other SKILL.md changed since.
    d = await daemon_factory()
    token, sid, first = await _dup_loaded(d, "---\ndescription: first\n---\nDUP-FIRST\n", "skills/dup")
    first.write_text("---\ndescription: first\ndescription: again\n---\nDUP-FIRST-2\n")

    listed, text = _dup_listing(await run_tool(d, token, sid, "r2", "skill", {}))
    assert {b: s["loaded"] for b, s in listed.items()} == {"skills/dup": True, ".agents/skills/dup": False}, listed
    assert "appears twice" in listed["skills/dup"]["problem"]
    assert "- dup [loaded; cannot be loaded again: SKILL.md front matter: line 3: the key 'description' " \
           "appears twice] (skills/dup/)" in text, text
    assert "- dup [not loaded]: second (.agents/skills/dup/)" in text, text
    assert "changed since" not in text, text

    again = await run_tool(d, token, sid, "r3", "skill", {"name": "dup"})
    assert not again["is_error"] and again["structured_content"]["status"] == "already_loaded", again
    said = again["content"][0]["text"]
    assert said.startswith('Skill "dup" is already loaded') and "nothing was appended" in said, said
    assert "(skills/dup/) cannot be loaded now" in said and "appears twice" in said, said
    assert "changed since" not in said, said
    assert "once unloaded, loading 'dup' takes the skill in .agents/skills/dup/" in said, said

    # its directory gone, the loaded skill marks no listed directory loaded
    first.unlink()
    first.parent.rmdir()
    listed, text = _dup_listing(await run_tool(d, token, sid, "r4", "skill", {}))
    assert {b: s["loaded"] for b, s in listed.items()} == {".agents/skills/dup": False}, listed
    assert "- dup [not loaded]: second (.agents/skills/dup/)" in text, text
    assert "- dup [loaded; no longer in the workspace] (skills/dup/)" in text, text
    events = await d.events(token, sid)
    assert [e["body"]["base_dir"] for e in events if e["kind"] == "skill.loaded"] == ["skills/dup"]


async def test_the_listing_marks_loaded_the_later_directory_loaded_after_the_first_is_mended(
        daemon_factory: DaemonFactory) -> None:
    # skills/dup is broken, so a load of dup loads .agents/skills/dup; once skills/dup is mended
    # the listing guessed "the loadable one" was loaded, marking skills/dup loaded and the one
    # loaded as taken; a repeat load said skills/dup's SKILL.md changed since it was loaded.
    d = await daemon_factory()
    token, sid, first = await _dup_loaded(d, "---\ndescription: first\ndescription: again\n---\nDUP-FIRST\n",
                                          ".agents/skills/dup")
    first.write_text("---\ndescription: first\n---\nDUP-FIRST\n")

    listed, text = _dup_listing(await run_tool(d, token, sid, "r2", "skill", {}))
    assert {b: s["loaded"] for b, s in listed.items()} == {"skills/dup": False, ".agents/skills/dup": True}, listed
    assert "- dup [not loaded]: first (skills/dup/)" in text, text
    assert "- dup [loaded; cannot be loaded again: the name 'dup' is taken by the skill in skills/dup/] " \
           "(.agents/skills/dup/)" in text, text
    assert "changed since" not in text, text

    again = await run_tool(d, token, sid, "r3", "skill", {"name": "dup"})
    assert not again["is_error"] and again["structured_content"]["status"] == "already_loaded", again
    said = again["content"][0]["text"]
    assert said.startswith('Skill "dup" is already loaded') and "nothing was appended" in said, said
    assert "(.agents/skills/dup/) cannot be loaded now" in said, said
    assert "changed since" not in said, said
    assert "once unloaded, loading 'dup' takes the skill in skills/dup/" in said, said
    events = await d.events(token, sid)
    assert [e["body"]["base_dir"] for e in events if e["kind"] == "skill.loaded"] == [".agents/skills/dup"]
