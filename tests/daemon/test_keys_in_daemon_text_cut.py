"""A 4xx answer is scrubbed of whole keys only (docs/decisions.md, "Caller text against whole keys,
daemon text against pieces"), so daemon-held text it quotes cut to a limit (a workspace SKILL.md's
line, a skill's problem) must be scrubbed of whole keys before it is cut: no piece of a key arises."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools.skills import MAX_DESCRIPTION_CHARS

from .conftest import Daemon, DaemonFactory, error_of, run_tool

KEY_ENV = "LENS_TEST_DAEMON_TEXT_KEY"
KEY = "sk-daemon-text-E4hT9wK2mQ7rV1xBz5Lp"  # (a canary: any 8 characters of it shown is a leak)
CONFIG = {"providers": [{"id": "p", "protocol": "faux", "apiKeyEnv": KEY_ENV, "models": [{"id": "m"}]}],
          "defaultModel": "p/m"}


def pieces_of(key: str) -> list[str]:
    return [key[i:i + 8] for i in range(len(key) - 7)]


def leaked(text: str) -> list[str]:
    return [p for p in pieces_of(KEY) if p in text]


async def keyed_session(daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch, client: str,
                        config: dict[str, Any] = CONFIG) -> tuple[Daemon, str, str, Path]:
    """A daemon whose provider's key is :data:`KEY` (from :data:`KEY_ENV`), a strong credential
    for ``client``, a project and a session of it: (the daemon, the credential, the session's id,
    the project's workspace)."""
    monkeypatch.setenv(KEY_ENV, KEY)
    d = await daemon_factory(config=config)
    token = await d.pair(client, strong=True)
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    return d, token, sid, Path(project["workspace"])


async def test_a_skill_md_line_cut_in_a_422_shows_no_piece_of_a_provider_key(
        daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    d, token, sid, ws = await keyed_session(daemon_factory, monkeypatch, "skills")
    # a front matter line the parser refuses, quoted cut to 60 characters
    (ws / "skills" / "bad").mkdir(parents=True)
    (ws / "skills" / "bad" / "SKILL.md").write_text(f"---\nname: bad\ntoken {'x' * 30}{KEY}\n---\nsteps\n")
    # a name that is no skill name, quoted cut to 80 characters (and listed cut to 64)
    (ws / "skills" / "long").mkdir(parents=True)
    (ws / "skills" / "long" / "SKILL.md").write_text(f"---\nname: {'n' * 50}{KEY}!\n---\nsteps\n")
    # a description past its limit, cut (the listing, the system prompt, the events)
    (ws / "skills" / "described").mkdir(parents=True)
    (ws / "skills" / "described" / "SKILL.md").write_text(
        f"---\nname: described\ndescription: {'d' * (MAX_DESCRIPTION_CHARS - 20)}{KEY}\n---\nsteps\n")
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": "/skill:bad hi"})
    assert r.status_code == 422 and error_of(r) == "SKILL_INVALID", r.text
    message = r.json()["error"]["message"]
    assert "got 'token xxx" in message and not leaked(message), message
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r2", "content": "/skill:nope hi"})
    assert r.status_code == 422 and error_of(r) == "SKILL_NOT_FOUND", r.text
    assert not leaked(r.text), r.text
    # the directory's name: the answer names the skill it holds and that skill's problem
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r3", "content": "/skill:long hi"})
    assert r.status_code == 422 and error_of(r) == "SKILL_NOT_FOUND", r.text
    assert "the skill name 'nnnn" in r.text and not leaked(r.text), r.text
    # the `skill` tool's listing (its problems) through a tool call's result
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r4", "content": "/tool skill {}"})
    assert r.status_code in (200, 202), r.text
    await d.wait_idle(token, sid)
    events = json.dumps(await d.events(token, sid))
    assert "cannot be loaded" in events and not leaked(events), [p for p in leaked(events)]
    assert "dddd" in events, events


async def test_a_4xx_to_a_large_body_still_drops_the_pieces_of_a_key_the_body_holds_whole(
        daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # The body of a 4xx is searched for the keys it holds whole (their pieces then go from the
    # answer too); a body of a few MiB is searched as bytes, in a worker thread: the same answer.
    d, token, sid, _ = await keyed_session(daemon_factory, monkeypatch, "large",
                                           config={**CONFIG, "server": {"maxBodyBytes": 16 * 1024 * 1024}})
    big = "y" * (3 * 1024 * 1024)
    r = await d.post(f"/sessions/{sid}/inputs", token, {"requestId": "r1", "content": big, "whenBusy": "x" * 70 + KEY})
    assert r.status_code in (400, 422), r.text[:300]
    message = r.json()["error"]["message"]
    assert "whenBusy" in message and f"[redacted {KEY_ENV}]" in message and not leaked(message), message
    # a key elsewhere in the body: its pieces quoted go too
    r = await d.post(f"/sessions/{sid}/inputs", token,
                     {"requestId": "r2", "content": big + KEY, "whenBusy": "x" * 70 + KEY[:20]})
    assert r.status_code in (400, 422) and not leaked(r.text), r.text[:300]
    # no key in the body: the caller's text is quoted as it was sent
    r = await d.post(f"/sessions/{sid}/inputs", token,
                     {"requestId": "r3", "content": big, "whenBusy": "x" * 70 + KEY[:20]})
    assert r.status_code in (400, 422), r.text[:300]
    assert "x" * 10 + KEY[:10] in r.json()["error"]["message"] and "redacted" not in r.text, r.text


async def test_a_key_the_body_holds_in_another_json_spelling_leaves_no_piece_in_a_4xx(
        daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # `"whenBusy": "xxx…\\u0073k-…"` holds the key whole once decoded; msgspec's reason quotes the
    # value cut to 80 characters, which left a piece of the client's own key.
    d, token, sid, _ = await keyed_session(daemon_factory, monkeypatch, "spelled")
    spelled = "x" * 70 + KEY.replace("s", "\\u0073", 1)
    body = ('{"requestId": "r1", "content": "hi", "whenBusy": "%s"}' % spelled).encode()
    assert json.loads(body)["whenBusy"] == "x" * 70 + KEY
    r = await d.client.post(f"/api/v1/sessions/{sid}/inputs", content=body,
                            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    assert r.status_code in (400, 422), r.text
    message = r.json()["error"]["message"]
    assert "whenBusy" in message and not leaked(message), message


async def test_a_tool_error_quoting_a_calls_arguments_is_no_oracle_for_a_piece_of_a_key(
        daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # Any client that can submit input can have a tool called with its own arguments (`/tool`),
    # and every client reads the `tool.finished` events. Scrubbed of pieces, an error quoting the
    # arguments answered `[redacted …]` to `KEY[:15]` and `[redacted …]X` to `KEY[:14] + "X"`.
    d, token, sid, _ = await keyed_session(daemon_factory, monkeypatch, "tools")
    right, wrong = KEY[:15], KEY[:14] + ("X" if KEY[14] != "X" else "Y")
    shapes = []
    for n, guess in enumerate((right, wrong)):
        body = await run_tool(d, token, sid, f"g{n}", "read_file", {"path": guess})
        assert body["error_code"] == "NOT_FOUND", body
        shapes.append(body["content"][0]["text"].replace(guess, "<guess>"))
    assert shapes[0] == shapes[1] and "<guess>" in shapes[0], shapes
    # a key the arguments hold whole is its marker, and a piece of it quoted cut goes too
    body = await run_tool(d, token, sid, "g2", "read_file", {"path": "x" * 60 + KEY + "y" * 250})
    text = json.dumps(body)
    assert "xxxx[redacted" in text and not leaked(text), text
