"""SPEC section 9's defaults of ``lens serve``, each proven on the real command in a working
directory of its own: "Default port 7420, default data dir `.lens/` under the working directory,
config `config/lens.jsonc` (template `config/lens.example.jsonc`), pair file `config/pair.json`;
relative paths resolve against the process cwd", the config's JSONC ("comments and trailing commas
allowed") and F-MOD-5's "CLI `--model` > … > config `defaultModel`".

The other tests of ``lens serve`` as a process pass ``--data`` (and ``--port 0``) and so prove
none of these defaults.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx2
import pytest
import trio

from .conftest import SDK_IMPORT_LIMIT, ServeProcess, as_daemon, run_lens, served_once

REPO = Path(__file__).resolve().parents[2]

# JSONC as a person writes it: both kinds of comment and trailing commas everywhere they may go.
FAUX_CONFIG = """// a local config, by hand
{
  /* a scripted provider with two models */
  "providers": [
    { "id": "demo", "protocol": "faux", "models": [ { "id": "a", }, { "id": "b", }, ], },
  ],
  "defaultModel": "demo/a", // new sessions take this unless --model says otherwise
}
"""


async def _default_model(d, token: str) -> dict:
    r = await d.get("/models", token)
    assert r.status_code == 200, r.text
    return r.json()["default"]


@pytest.mark.parametrize("config", [None, FAUX_CONFIG], ids=["no-config", "jsonc-config"])
async def test_without_data_or_config_flags_serve_uses_dot_lens_and_config_under_its_cwd(tmp_path: Path,
                                                                                         config: str | None):
    if config is not None:
        (tmp_path / "config").mkdir()
        (tmp_path / "config" / "lens.jsonc").write_text(config)
    serve = ServeProcess(tmp_path, default_data=True)
    async with served_once(serve) as url:
        if config is None:
            assert any("using built-in defaults" in line for line in serve.lines), serve.lines
        else:
            assert "lens: default model demo/a (defaultModel of config/lens.jsonc)" in serve.lines, serve.lines
        # the log is `.lens/` under the working directory
        assert (tmp_path / ".lens" / "events.db").is_file()
        async with httpx2.AsyncClient(base_url=url, timeout=10) as client:
            d = as_daemon(tmp_path, url, client)
            # the pair file is config/pair.json under the working directory: what the first
            # request writes there is what `lens pair approve` (run there) reads, and the
            # daemon takes the credential it prints
            token = await d.pair("defaults-client", strong=True, via="cli")
            assert json.loads((tmp_path / "config" / "pair.json").read_text())["clients"][0]["clientId"] \
                == "defaults-client"
            if config is not None:
                assert await _default_model(d, token) == {"effective": "demo/a", "source": "config",
                                                          "saved": None}
            project = await d.project(token, "p")
            sid = (await d.session(token, project["id"]))["id"]
            await d.submit(token, sid, "r1", "hello")
            await d.wait_idle(token, sid)
    assert serve.lines[-1] == "lens: stopped"
    # `lens log` without --data reads the same `.lens/`
    verify = await run_lens(tmp_path, "log", "verify")
    assert verify.returncode == 0, verify.stderr
    kinds = [json.loads(line)["kind"] for line in (await run_lens(tmp_path, "log", "decode")).stdout.splitlines()]
    assert "input.submitted" in kinds and "session.created" in kinds, kinds
    assert not (tmp_path / "data").exists()


async def test_the_model_flag_wins_over_the_configs_default_model(tmp_path: Path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text(FAUX_CONFIG)
    serve = ServeProcess(tmp_path, "--model", "demo/b")
    async with served_once(serve) as url:
        assert "lens: default model demo/b (from --model)" in serve.lines, serve.lines
        async with httpx2.AsyncClient(base_url=url, timeout=10) as client:
            d = as_daemon(tmp_path, url, client)
            token = await d.pair("model-flag", strong=True, via="cli")
            assert await _default_model(d, token) == {"effective": "demo/b", "source": "cli", "saved": None}
            project = await d.project(token, "p")
            sid = (await d.session(token, project["id"]))["id"]
            assert (await d.view(token, sid))["model"] == "demo/b"


async def test_without_port_serve_binds_127_0_0_1_port_7420(tmp_path: Path):
    # Port 7420 held by this test (or by whatever else on this machine holds it already): the
    # command names the address it tried, which is the default one. (Binding the default port for
    # real would race every other daemon on the machine.)
    held = socket.socket()
    try:
        try:
            held.bind(("127.0.0.1", 7420))
            held.listen()
        except OSError:
            pass  # in use already: the command cannot have it either
        out = await run_lens(tmp_path, "serve", "--data", "d", check=False)
    finally:
        held.close()
    assert out.returncode == 2, out.stderr
    assert "lens: LISTEN_FAILED: cannot listen on 127.0.0.1:7420" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "d").exists()


async def test_the_config_template_copied_to_config_lens_jsonc_starts_the_daemon(tmp_path: Path):
    # The template says "Copy to config/lens.jsonc and edit": copied as it is, it is a config
    # `lens serve` takes (every key it shows is one the daemon knows, with a value it accepts).
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text((REPO / "config" / "lens.example.jsonc").read_text())
    async with served_once(ServeProcess(tmp_path)) as url:
        async with httpx2.AsyncClient(base_url=url, timeout=10) as client:
            assert (await client.get("/api/v1/health")).status_code == 200
    err = (tmp_path / "serve-0.err").read_text()
    assert "unknown" not in err.lower() and "ignored" not in err.lower(), err


async def test_the_spec_example_config_is_read_as_written_and_flags_take_its_place(tmp_path: Path):
    # Section 9's example config, key for key (a loopback openai-chat server for its provider,
    # `"apiKeyEnv": null`: "no key needed"), in JSONC: the daemon binds server.host, writes
    # dataDir, and answers with defaultModel; then --host, --port and --data take their places.
    from ..providers.scripts import reply
    from ..providers.servers.base import ScriptedServer

    server = ScriptedServer()
    async with trio.open_nursery() as nursery:
        url = await server.start(nursery)
        (tmp_path / "config").mkdir()
        (tmp_path / "config" / "lens.jsonc").write_text("""{
  "server": { "host": "127.0.0.2", "port": 0 },
  "dataDir": "cfg-data",
  "providers": [
    // protocol: "openai-responses" | "openai-chat" | "anthropic" | "faux"
    { "id": "local", "protocol": "openai-chat", "baseUrl": "%s/v1",
      "apiKeyEnv": null,            // omitted or null: no key needed
      "maxRetries": 0,
      "models": [ { "id": "qwen3", "contextWindow": 131072, "images": false } ] },
  ],
  "defaultModel": "local/qwen3"     // "<provider id>/<model id>"
}
""" % url)
        async with served_once(ServeProcess(tmp_path, default_data=True)) as daemon_url:
            assert daemon_url.startswith("http://127.0.0.2:"), daemon_url
            async with httpx2.AsyncClient(base_url=daemon_url, timeout=10) as client:
                d = as_daemon(tmp_path, daemon_url, client)
                token = await d.pair("example-config", strong=True, via="cli")
                project = await d.project(token, "p")
                sid = (await d.session(token, project["id"]))["id"]
                server.push(reply("openai-chat", text="fine"))
                await d.submit(token, sid, "r1", "hello")
                # (the first turn of this new process to an SDK provider waits for the SDKs'
                # import, and for its project's executor to start: a bound, not a time)
                await d.wait_idle(token, sid, timeout=SDK_IMPORT_LIMIT)
                events = await d.events(token, sid)
                assert [e["body"]["text"] for e in events if e["kind"] == "model.responded"] == ["fine"], events
        assert (tmp_path / "cfg-data" / "events.db").is_file() and not (tmp_path / ".lens").exists()
        assert server.requests[0].headers.get("authorization") == "Bearer lens-no-key", server.requests[0].headers

        async with served_once(ServeProcess(tmp_path, "--host", "127.0.0.3", "--data", "flag-data",
                                            stderr_name="serve-1.err")) as daemon_url:
            assert daemon_url.startswith("http://127.0.0.3:"), daemon_url
            assert (tmp_path / "flag-data" / "events.db").is_file()
        nursery.cancel_scope.cancel()  # (the scripted server)


@pytest.mark.parametrize("port", ["8_0", " 80", "80 ", "\u0668\u0660", "\uff18\uff10", "0x50", "", "80.0"])
async def test_a_port_flag_is_ascii_decimal_digits(tmp_path: Path, port: str):
    # int() took "8_0", " 80" and other scripts' digits: `lens serve --port 8_0` listened on
    # port 80. The port is read as `lens log decode --from` reads a seq: ASCII digits (and a sign,
    # refused by the range check).
    out = await run_lens(tmp_path, "serve", "--port", port, "--data", "d", check=False)
    assert out.returncode == 2, out.stderr
    assert f"lens serve: USAGE_ERROR: argument --port: {port!r} is not a whole number" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("port", ["65535", "+65535", "0065535"])
async def test_a_port_flag_at_the_limit_is_taken_and_one_past_is_refused(tmp_path: Path, port: str):
    # 65535 passes the checks and reaches bind() (held here, so the command names the address it
    # tried); 65536 is refused before anything is made.
    held = socket.socket()
    try:
        try:
            held.bind(("127.0.0.1", 65535))
            held.listen()
        except OSError:
            pass  # in use already: the command cannot have it either
        out = await run_lens(tmp_path, "serve", "--port", port, "--data", "d", check=False)
    finally:
        held.close()
    assert out.returncode == 2, out.stderr
    assert "lens: LISTEN_FAILED: cannot listen on 127.0.0.1:65535" in out.stderr, out.stderr
    out = await run_lens(tmp_path, "serve", "--port", "65536", "--data", "d", check=False)
    assert out.returncode == 2 and "--port must be 0 to 65535, not 65536" in out.stderr, out.stderr
    assert not (tmp_path / "d").exists()
