"""F-API-2..4 and F-MOD-6, a second pass as a client with only SPEC, README and docs/ drives them:
a real daemon on a loopback port, raw HTTP where the exact bytes of a header matter. Only what
`test_auth_config_acceptance.py`, `test_auth.py` and the config-file suites do not hold already.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import Daemon, DaemonFactory, raw_http, run_lens, serving

# --------------------------------------------------------------------------- Authorization as sent


async def test_a_credential_followed_by_a_byte_that_is_no_http_space_is_refused_naming_it(
        daemon: Daemon, strong: str) -> None:
    # HTTP's white space around a value is the space and the tab; Python's str.strip() also drops
    # NBSP (0xA0), NEL (0x85) and the separators 0x1C-0x1F, which a header can carry (as obs-text or
    # a control byte h11 lets through). A credential with one of them is not the credential.
    wrong = []
    for byte in ("\xa0", "\x85", "\x1c", "\x1f"):
        r = await raw_http(daemon.port, "GET", "/api/v1/projects", {"Authorization": f"Bearer {strong}{byte}"})
        error = json.loads(r.body).get("error", {}) if r.status >= 400 else {}
        named = f"U+{ord(byte):04X}"
        if (r.status, error.get("code")) != (401, "AUTH_INVALID") or named not in error.get("message", ""):
            wrong.append((repr(byte), r.status, r.body[:200]))
        elif strong in r.body.decode("latin-1"):
            wrong.append((repr(byte), "the credential was echoed"))
    assert not wrong, wrong
    # the white space HTTP has around a value is still dropped, and a blank token is still none
    for value, status, code in ((f"Bearer {strong} \t ", 200, None), ("Bearer \xa0", 401, "AUTH_INVALID")):
        r = await raw_http(daemon.port, "GET", "/api/v1/projects", {"Authorization": value})
        got = json.loads(r.body)["error"]["code"] if r.status >= 400 else None
        assert (r.status, got) == (status, code), (repr(value), r.status, r.body[:200])



async def test_authorization_a_parser_refuses_or_a_size_limits_is_a_clear_error_never_a_500(
        daemon: Daemon, strong: str) -> None:
    cases = [
        ("a NUL in the credential", f"Bearer {strong[:9]}\x00{strong[9:]}", 400, "INVALID_ARGUMENT"),
        ("a vertical tab after it", f"Bearer {strong}\x0b", 400, "INVALID_ARGUMENT"),
        ("a no-break space for the space", f"Bearer\xa0{strong}", 401, "AUTH_REQUIRED"),
        ("a credential of 15,000 characters", "Bearer " + "a" * 15000, 401, "AUTH_INVALID"),
        ("a head past 16,384 bytes", "Bearer " + "a" * 17000, 431, "HEADERS_TOO_LARGE"),
        ("a quoted credential", f'Bearer "{strong}"', 401, "AUTH_INVALID"),
        ("a second scheme after a comma", f"Bearer {strong}, Basic eDp5", 401, "AUTH_INVALID"),
        ("a non-ASCII token", "Bearer caf\xe9", 401, "AUTH_INVALID"),
    ]
    wrong = []
    for label, value, status, code in cases:
        r = await raw_http(daemon.port, "GET", "/api/v1/projects", {"Authorization": value})
        error = json.loads(r.body).get("error", {}) if r.status >= 400 else {}
        if (r.status, error.get("code")) != (status, code) or strong[:16] in error.get("message", ""):
            wrong.append((label, r.status, r.body[:200]))
    assert not wrong, wrong
    assert (await daemon.get("/projects", strong)).status_code == 200  # (the daemon is still serving)


async def test_a_credential_sent_wrong_never_reaches_the_serving_process_output(tmp_path: Path) -> None:
    # `lens serve` as a process: its stdout and stderr, and `lens log decode`, read whole after
    # requests that carry the credential where the HTTP parser, the head limit, the router or a
    # revocation refuses it (a leak is any 8 characters of it)
    (tmp_path / "config").mkdir()
    async with serving(tmp_path) as (serve, d):
        await d.register("admin")
        token = (await run_lens(tmp_path, "pair", "approve", "--client", "admin", "--strong-trust")
                 ).stdout.splitlines()[-1]
        await d.wait_accepted(token)
        bearer = f"Bearer {token}"
        sent = [
            ("/api/v1/projects", {"Authorization": bearer + "\x00"}, 400),
            ("/api/v1/projects", {"Authorization": bearer + "\xa0"}, 401),
            ("/api/v1/projects", {"Authorization": bearer, "X-Pad": "a" * 17000}, 431),
            ("/api/v1/projects", {"Authorization": "Bearer x" + token}, 401),
            (f"/api/v1/sessions/{token}", {"Authorization": bearer}, 404),
            (f"/api/v1/projects?token={token}", {"Authorization": bearer}, 200),
            (f"/api/v1/{token}", {"Authorization": bearer}, 404),
        ]
        for target, headers, status in sent:
            r = await raw_http(d.port, "GET", target, headers)
            assert r.status == status, (target, r.status, r.body[:200])
        await run_lens(tmp_path, "pair", "revoke", "--client", "admin")
        await d.wait_refused(token)
        assert await serve.terminate() == 0
    decoded = await run_lens(tmp_path, "log", "decode", "--data", "data")
    output = ("\n".join(serve.lines) + (tmp_path / "serve-0.err").read_text(errors="replace")
              + decoded.stdout + decoded.stderr)
    assert "listening on" in output  # (the output was read)
    assert not [token[i:i + 8] for i in range(len(token) - 7) if token[i:i + 8] in output]

# --------------------------------------------------------------------------- keys in a config write's answer

KEY_ENV = "LENS_TEST_SECOND_PASS_KEY"
KEY = "sk-second-pass-Q7w9ZxK2mP4vL8nB3cR6tY1u"  # (a canary: any 8 characters of it shown is a leak)
KEYED = {"providers": [{"id": "p", "protocol": "faux", "apiKeyEnv": KEY_ENV, "models": [{"id": "m"}]}]}


def pieces_of(key: str) -> list[str]:
    return [key[i:i + 8] for i in range(len(key) - 7)]


async def keyed_daemon(daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch) -> Daemon:
    """A daemon whose config (:data:`KEYED`) names a provider whose key is :data:`KEY`."""
    monkeypatch.setenv(KEY_ENV, KEY)
    return await daemon_factory(config=KEYED)


async def test_an_unknown_key_cut_to_80_characters_shows_no_piece_of_a_provider_key(
        daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # A write's answer lists the main config's unknown keys, each cut to 80 characters. Cut before
    # it was scrubbed, a key pasted as (or into) a key name past that cut left its first characters,
    # which no scrub of whole keys recognises (docs/decisions.md, "Keys scrubbed before any text is cut").
    d = await keyed_daemon(daemon_factory, monkeypatch)
    token = await d.pair("admin", strong=True)
    for unknown in ({"a" * 70 + KEY: 1}, {"server": {"prot" + "x" * 60 + KEY: 1}}):
        text = json.dumps({**KEYED, **unknown})
        r = await d.put("/config/files/lens.jsonc", token, {"text": text})
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["unknownKeysTotal"] == 1 and len(answer["unknownKeys"]) == 1, r.text
        assert "[redacted" in answer["unknownKeys"][0], r.text  # (the marker, itself cut)
        assert not [p for p in pieces_of(KEY) if p in r.text], r.text
        assert d.config_path.read_text() == text  # (the file as written: the answer alone is scrubbed)


async def test_an_answer_to_a_callers_text_is_no_oracle_for_a_piece_of_a_provider_key(
        daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # The piece scrub (any 8 characters of a key, stretched as far as the text agrees with it)
    # ran over text the caller sent: `KEY[:15]` came back as the marker and `KEY[:14] + "X"` as
    # the marker and "X", telling the caller how far its guess matched (a key rebuilt one
    # character at a time from its public prefix). Caller text is matched against whole keys only.
    d = await keyed_daemon(daemon_factory, monkeypatch)
    admin = await d.pair("admin", strong=True)
    reader = await d.pair("reader", strong=False)
    right, wrong = KEY[:15], KEY[:14] + ("X" if KEY[14] != "X" else "Y")
    # a config write's unknown keys
    answers = []
    for guess in (right, wrong):
        r = await d.put("/config/files/lens.jsonc", admin, {"text": json.dumps({**KEYED, guess: 1})})
        assert r.status_code == 200, r.text
        answers.append(r.json()["unknownKeys"])
    assert answers == [[right], [wrong]], answers
    # a 404 quoting the caller's id, to a read-only credential
    for guess in (right, wrong):
        r = await d.get(f"/sessions/{guess}", reader)
        assert r.status_code in (400, 404), r.text
        message = r.json()["error"]["message"]
        assert guess in message and "redacted" not in message, message
    # a whole key a caller sends is still its marker, in a 200 and in a 4xx answer
    r = await d.put("/config/files/lens.jsonc", admin, {"text": json.dumps({**KEYED, "k" + KEY: 1})})
    assert r.json()["unknownKeys"] == [f"k[redacted {KEY_ENV}]"], r.text
    r = await d.get(f"/sessions/{KEY}", reader)
    assert r.status_code in (400, 404) and f"[redacted {KEY_ENV}]" in r.json()["error"]["message"], r.text
    assert KEY not in r.text


async def test_a_provider_key_in_a_pairing_name_is_neither_stored_nor_listed(
        daemon_factory: DaemonFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # (F-MOD-6: the pair file is a store, `lens pair list` prints; the name is any caller's text)
    d = await keyed_daemon(daemon_factory, monkeypatch)
    r = await d.post("/pair/requests", body={"clientId": "pasted", "name": "laptop " + KEY})
    assert r.status_code == 202, r.text
    stored = json.loads(d.pair_path.read_text())["clients"]
    assert stored[0]["name"] == f"laptop [redacted {KEY_ENV}]", stored
    # a name at the limit whose marker is longer than the key is cut back to the limit, not refused
    long_name = "n" * (200 - len(KEY)) + KEY
    r = await d.post("/pair/requests", body={"clientId": "long", "name": long_name})
    assert r.status_code == 202, r.text
    record = next(c for c in json.loads(d.pair_path.read_text())["clients"] if c["clientId"] == "long")
    assert len(record["name"]) <= 200 and record["name"].startswith("n" * (200 - len(KEY)) + "[redacted"), record
    # a record that holds one already (written by hand, or before) is listed without it
    data = json.loads(d.pair_path.read_text())
    data["clients"].append({"clientId": "by-hand", "name": "desk " + KEY, "requestedAt": 1})
    d.pair_path.write_text(json.dumps(data))
    listed = (await run_lens(d.root, "pair", "list")).stdout
    assert "by-hand" in listed and f"desk [redacted {KEY_ENV}]" in listed, listed
    assert not [p for p in pieces_of(KEY) if p in listed], listed
    assert d.pair_path.read_text().count(KEY[:8]) == 1  # (the record written by hand alone)
