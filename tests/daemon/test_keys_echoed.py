"""Keys in messages that echo a value (F-MOD-6): an error quoting a client's or a config's value
(a bad field's value, an unknown name, a path) cut to a limit, a start-up error or note of
``lens serve``, a line of the daemon's log, and the ``lens`` CLI's errors.

Every test runs the real ``lens`` script as a process with a canary key in its environment,
under a variable the config names; a leak is :data:`PIECE` characters of it anywhere shown.
Each value is placed so that the message's own cut falls inside the key, leaving a piece that
no scrub of whole keys recognises (or the key whole, where the message does not cut).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import apsw
import httpx2
import pytest
import trio

from events.secrets import marker

from ..providers.servers import openai_responses as orr
from .conftest import LIMIT, ServeProcess, as_daemon, run_tool, served_once, wait_until
from .keyleaks import KEYS, PIECE, SLOW, Recorder, leaks, leaks_everywhere, stream_caught_up, watch, watched

KEY_ENV = "LENS_TEST_ECHO_KEY"
KEY = "sk-proj-E4hT9wK2mQ7rV1xB5nC8zLcanaryEchoD4"  # no 8 characters of it occur by chance
MARK = marker(KEY_ENV)
ENV = {**os.environ, KEY_ENV: KEY}
PROVIDERS = [{"id": "chat", "protocol": "openai-chat", "apiKeyEnv": KEY_ENV, "models": [{"id": "m"}]},
             {"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}]


def no_key(where: str, text: str) -> None:
    assert leaks(where, text, [KEY]) == [], text


async def lens(cwd: Path, *args: str) -> Any:
    """``lens ARGS`` in ``cwd`` with the canary in its environment (stdout and stderr as text)."""
    with trio.fail_after(60):
        proc = await trio.run_process([*_lens_command(), *args], cwd=cwd, capture_stdout=True,
                                      capture_stderr=True, check=False, env=ENV)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def _lens_command() -> list[str]:
    from .conftest import lens_command

    return lens_command()


def write_config(cwd: Path, config: dict[str, Any] | str) -> None:
    (cwd / "config").mkdir(exist_ok=True)
    text = config if isinstance(config, str) else json.dumps(config)
    (cwd / "config" / "lens.jsonc").write_text(text)


# A key pasted into a config value: each message cuts or quotes it, names the field.
DUPLICATE = "x" * 70 + KEY  # a JSONC key quoted to 80 characters: 10 of the canary
START_CASES = {
    "host cut at 100": ({"server": {"host": "x" * 85 + KEY}, "providers": PROVIDERS}, (), "CONFIG_INVALID",
                        "server.host"),
    "base URL": ({"providers": [{**PROVIDERS[0], "baseUrl": "http://exa mple.com/" + KEY}]}, (), "CONFIG_INVALID",
                 "baseUrl"),
    "JSONC that does not parse": (json.dumps({"providers": PROVIDERS})[:-1] + f', "{DUPLICATE}": 1, "{DUPLICATE}": 2}}',
                                  (), "CONFIG_INVALID", "duplicate key"),
    "model flag": ({"providers": PROVIDERS}, ("--model", "chat/" + KEY), "MODEL_UNKNOWN", "provider 'chat'"),
    # (it was a start-up note, quoted by the running daemon's test below)
    "default model": ({"providers": PROVIDERS, "defaultModel": "faux/" + KEY}, (), "CONFIG_INVALID",
                      "defaultModel 'faux/"),
}


@pytest.mark.parametrize("case", list(START_CASES))
async def test_lens_serve_refusing_a_value_that_holds_a_key_does_not_show_it(tmp_path: Path, case: str) -> None:
    config, flags, code, field = START_CASES[case]
    write_config(tmp_path, config)
    rc, out, err = await lens(tmp_path, "serve", "--port", "0", "--data", "data", *flags)
    assert rc == 2 and "Traceback" not in err, err
    assert f"lens: {code}: " in err and field in err, err  # the field and the problem are named
    assert MARK in err, err  # (a JSONC that does not parse: the variable read from its text)
    no_key("stderr", err)
    no_key("stdout", out)


async def test_lens_cli_errors_quoting_a_key_do_not_show_it(tmp_path: Path) -> None:
    write_config(tmp_path, {"providers": PROVIDERS})
    rc, out, err = await lens(tmp_path, "pair", "approve", "--client", KEY)
    assert rc == 2 and "lens: CLIENT_NOT_FOUND: no pairing request from client" in err and MARK in err, err
    no_key("lens pair approve", out + err)
    rc, out, err = await lens(tmp_path, "log", "decode", "--data", "data", "--from", "1" + KEY)
    assert rc == 2 and "USAGE_ERROR: argument --from:" in err and MARK in err, err
    no_key("lens log decode --from", out + err)


async def wait_for_line(path: Path, words: str) -> str:
    async def written() -> str | None:
        text = path.read_text(errors="replace")
        return text if words in text else None

    return await wait_until(written, LIMIT, f"{words!r} in {path.name}")


async def test_a_running_daemon_quoting_a_key_in_an_error_a_log_line_or_a_note_does_not_show_it(
        tmp_path: Path) -> None:
    cwd = tmp_path
    # A config whose default model cannot serve and names the key (a note on stdout: the
    # provider is disabled), whose read_file may reach `src` only, and a pair file whose client
    # id holds the key past the 80 characters quoted.
    off = {"id": "off" + KEY, "protocol": "openai-chat", "enabled": False}
    write_config(cwd, {"providers": [*PROVIDERS, off], "defaultModel": f"off{KEY}/m",
                       "tools": {"policy": {"read_file": {"workspaceAllowlist": ["src"]}}}})
    pair_file = cwd / "config" / "pair.json"
    pair_file.write_text(json.dumps({"version": 1, "clients": [{"clientId": "x" * 70 + KEY}]}))
    # A link in the workspace to a directory named with the key: the refusal quotes where it
    # leads, cut to 200 characters, 15 of them the key's.
    ws = cwd / "workspaces" / "p"
    (ws / "src").mkdir(parents=True)
    (ws / ("y" * 185 + KEY)).mkdir()
    (ws / "src" / "link").symlink_to(Path("..") / ("y" * 185 + KEY))
    recorder = Recorder()
    sse = bytearray()
    serve = ServeProcess(cwd, env=ENV)
    async with served_once(serve) as url:
        err_log = await wait_for_line(cwd / serve.stderr_name, "clients[0].clientId")
        pair_file.unlink()  # (no pair file: no clients, and pairing works again)
        async with httpx2.AsyncClient(base_url=url, timeout=LIMIT,
                                      limits=httpx2.Limits(max_keepalive_connections=0),
                                      event_hooks={"response": [recorder.on_response]}) as client:
            d = as_daemon(cwd, url, client)
            token = await d.pair("c1", strong=True, via="cli")
            async with trio.open_nursery() as inner:
                inner.start_soon(watch, d, token, sse)
                project = await d.project(token, "p")
                r = await d.post("/sessions", token, {"projectId": project["id"], "model": "faux/faux-1"})
                assert r.status_code == 201, r.text
                sid = r.json()["id"]
                # A refused call: its message quotes where the path leads.
                body = await run_tool(d, token, sid, "r1", "read_file", {"path": "src/link"})
                assert body["error_code"] == "PATH_NOT_ALLOWED", body
                text = body["content"][0]["text"]
                # (the key is replaced before the cut; a marker the cut would split is left out
                # whole, so the quote ends with the path's own characters)
                assert "read_file: path 'src/link' leads to 'yyy" in text and "[redacted" not in text, text
                assert "y', outside the workspace allowlist" in text, text
                no_key("the refusal", text)
                # A refused field: msgspec's reason quotes its value to 80 characters.
                r = await d.post(f"/sessions/{sid}/inputs", token,
                                 {"requestId": "r2", "content": "hi", "whenBusy": "x" * 70 + KEY})
                assert r.status_code in (400, 422), r.text
                message = r.json()["error"]["message"]
                assert "whenBusy" in message and MARK in message, message
                view = await d.view(token, sid)
                shown = json.dumps(view)
                assert "leads to 'yyy" in shown, view  # (the refused call, as a view shows it)
                no_key("the view", shown)
                await stream_caught_up(d, sse)
                inner.cancel_scope.cancel()
    stdout = "\n".join(serve.lines)
    assert "the default model cannot serve (PROVIDER_DISABLED" in stdout and MARK in stdout, stdout
    err_log = (cwd / serve.stderr_name).read_text(errors="replace")
    assert "clients[0].clientId 'xxx" in err_log and MARK in err_log, err_log
    found = leaks("stdout", stdout, [KEY]) + leaks("stderr", err_log, [KEY])
    for where, data in recorder.seen:
        found += leaks(where, data, [KEY])
    found += leaks("SSE stream", bytes(sse), [KEY])
    for path in sorted((cwd / "data").rglob("*")):
        if path.is_file():
            found += leaks(str(path.relative_to(cwd)), path.read_bytes(), [KEY])
    assert b"leads to 'yyy" in bytes(sse)  # (the refused call, its quote cut before the marker)
    assert found == [], "\n".join(found)

    # `lens log …` quoting a stored value in an error: a row whose text is not UTF-8 is quoted
    # to 40 bytes, 19 of them the key's; a --kind is quoted whole.
    conn = apsw.Connection(str(cwd / "data" / "events.db"))
    damaged = b"\xff" + b"y" * 20 + KEY.encode()
    conn.execute("UPDATE events SET task_id = CAST(? AS TEXT) WHERE seq = (SELECT MAX(seq) FROM events)", (damaged,))
    conn.close()
    rc, out, err = await lens(cwd, "log", "verify", "--data", "data")
    assert rc == 1 and "holds text that is not valid UTF-8" in out and MARK in out, (out, err)
    no_key("lens log verify", out + err)
    rc, out, err = await lens(cwd, "log", "decode", "--data", "data", "--kind", KEY, "--kind", "tool.finished")
    assert rc == 0 and f"lens: note: '{MARK}' is not an event kind" in err, err
    no_key("lens log decode --kind", out + err)
    rc, out, err = await lens(cwd, "log", "decode", "--data", "data")
    assert rc == 1 and "EVENT_CORRUPT" in err and "not valid UTF-8" in err and MARK in err, err
    no_key("lens log decode", out + err)
    assert len(KEY) > PIECE


async def test_a_provider_error_quoting_another_providers_key_across_its_cut_is_recorded_without_it(
        tmp_path: Path) -> None:
    # The provider's error text is cut to 2,000 characters after its own key was redacted; the
    # key of another provider stands across the cut, 10 characters inside it.
    other = KEYS["ANTHROPIC_API_KEY"]
    async with watched(tmp_path, "error-client") as w:
        d, token = w.d, w.token
        r = await d.post("/sessions", token, {"projectId": w.project["id"], "model": "chat/m"})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        w.server.push(orr.error(400, "x" * 1990 + other + " was refused"))
        await d.submit(token, sid, "r1", "hello")
        await d.wait_idle(token, sid, timeout=SLOW)
        (failed,) = [e["body"] for e in await d.events(token, sid) if e["kind"] == "model.failed"]
        assert failed["code"] == "BAD_REQUEST" and failed["message"].endswith("x" + marker("ANTHROPIC_API_KEY")), failed
        await d.view(token, sid)
    found, _ = await leaks_everywhere(w)
    assert not found, "\n".join(found)
