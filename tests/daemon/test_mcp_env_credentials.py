"""An MCP server's ``env`` literal named as a credential (``GH_TOKEN``, ``NOTION_API_KEY``…), and
the value of an ``envFrom`` variable so named (``GITHUB_PERSONAL_ACCESS_TOKEN``, as the example
config passes one), is one of the keys the daemon knows: what the server says with it (its stderr, a tool's result)
reaches no answer, no event and no log line with the value, read-only clients above all.
Values of other variables (a path, a mode) are shown as they are. Real daemon, port 0, real
MCP servers over stdio (``tests/mcp/server.py`` and a one-line one that fails at start)."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from runtime.credentials import is_credential_name

from ..mcp.conftest import SERVER
from .conftest import DaemonFactory, run_lens, run_tool, wait_until

TOKEN = "ghp_LiteralMcpToken0123456789abcdef"
PASSED = "ghp_PassedOnMcpToken9876543210fedcba"
PASSED_NAME = "LENS_TEST_MCP_ACCESS_TOKEN"
PLAIN = "/srv/mcp-data/plain-value"


async def test_an_mcp_env_credential_is_scrubbed_from_answers_events_and_logs(
        daemon_factory: DaemonFactory, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(PASSED_NAME, PASSED)  # (the daemon's environment; `lens log decode` inherits it)
    says = ("import os, sys; sys.stderr.write('auth failed for ' + os.environ['GH_TOKEN'] + ' and ' "
            f"+ os.environ['{PASSED_NAME}'] + ' in ' + os.environ['DATA_DIR'] + chr(10)); sys.exit(3)")
    env = {"GH_TOKEN": TOKEN, "DATA_DIR": PLAIN}
    d = await daemon_factory(config={"mcpServers": {
        "failing": {"command": sys.executable, "args": ["-c", says], "env": env, "envFrom": [PASSED_NAME],
                    "maxRestarts": 0},
        "t": {"command": sys.executable, "args": [SERVER], "env": env, "envFrom": [PASSED_NAME]}}})
    strong = await d.pair("owner", strong=True)
    reader = await d.pair("reader")

    async def failed() -> dict | None:
        r = await d.get("/tools/inventory", reader)
        assert r.status_code == 200, r.text
        servers = {s["name"]: s for s in r.json()["mcpServers"]}
        return servers if servers["failing"]["status"] == "failed" and servers["t"]["status"] == "running" else None

    servers = await wait_until(failed, what="the failing server reported")
    tail = servers["failing"]["stderrTail"]
    assert TOKEN not in tail and "[redacted GH_TOKEN]" in tail and PLAIN in tail, tail
    assert PASSED not in tail and f"[redacted {PASSED_NAME}]" in tail, tail

    sid = (await d.session(strong, (await d.project(strong))["id"]))["id"]
    body = await run_tool(d, strong, sid, "r1", "mcp__t__env", {"name": "GH_TOKEN"})
    assert body["content"][0]["text"] == "[redacted GH_TOKEN]", body
    body = await run_tool(d, strong, sid, "r3", "mcp__t__env", {"name": PASSED_NAME})
    assert body["content"][0]["text"] == f"[redacted {PASSED_NAME}]", body
    body = await run_tool(d, strong, sid, "r2", "mcp__t__env", {"name": "DATA_DIR"})
    assert body["content"][0]["text"] == PLAIN, body
    r = await d.get(f"/sessions/{sid}/events", reader)
    assert r.status_code == 200 and TOKEN not in r.text and PASSED not in r.text
    # (`lens log decode` beside the daemon reads the config at its default place, as the daemon does)
    decoded = await run_lens(d.root, "log", "decode", "--data", str(d.data_dir), check=False)
    assert decoded.returncode == 0 and "[redacted GH_TOKEN]" in decoded.stdout, decoded.stderr
    assert TOKEN not in decoded.stdout + decoded.stderr and PASSED not in decoded.stdout + decoded.stderr
    assert TOKEN not in caplog.text and PASSED not in caplog.text


@pytest.mark.parametrize("name", ["GH_TOKEN", "GITHUB_PERSONAL_ACCESS_TOKEN", "NOTION_API_KEY", "APIKEY",
                                  "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "SLACK_BOT_TOKEN", "api-key",
                                  "MY_ACCESSTOKEN", "BASIC_AUTH", "SENTRY_AUTH_TOKEN", "PGPASSWORD",
                                  "CLIENT_CREDENTIALS", "SSH_PASSPHRASE"])
def test_credential_variable_names(name: str) -> None:
    assert is_credential_name(name)


@pytest.mark.parametrize("name", ["PATH", "PWD", "HOME", "DATA_DIR", "LOG_LEVEL", "NODE_ENV", "KEYBOARD_LAYOUT",
                                  "TOKENIZERS_PARALLELISM", "AUTHOR_NAME", "BYPASS_CACHE"])
def test_other_variable_names(name: str) -> None:
    assert not is_credential_name(name)


async def test_an_mcp_servers_credential_is_withheld_from_the_executor(daemon_factory: DaemonFactory,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # `envFrom` hands a variable of the daemon's environment to that MCP server; the executor
    # (and so every command an agent runs) was started with it all the same, as with any other
    # variable not among the configured key variables. A credential's goes where the config says.
    monkeypatch.setenv(PASSED_NAME, PASSED)
    monkeypatch.setenv("LENS_TEST_MCP_PLAIN", PLAIN)
    d = await daemon_factory(config={"mcpServers": {
        "t": {"command": sys.executable, "args": [SERVER], "envFrom": [PASSED_NAME, "LENS_TEST_MCP_PLAIN"]}}})
    token = await d.pair("owner", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", "run_command",
                          {"command": "env; tr '\\0' '\\n' < /proc/$PPID/environ"})
    text = json.dumps(body)
    assert not body["is_error"] and "PATH=" in text, body
    assert PASSED_NAME not in text and PASSED not in text, text  # not even its marker: withheld
    assert f"LENS_TEST_MCP_PLAIN={PLAIN}" in text  # (other variables are passed on as before)
    body = await run_tool(d, token, sid, "r2", "mcp__t__env", {"name": PASSED_NAME})
    assert body["content"][0]["text"] == f"[redacted {PASSED_NAME}]", body  # the server has it


async def test_a_config_others_can_read_with_a_credential_in_it_is_named_at_start(tmp_path) -> None:
    from .conftest import serving

    config = tmp_path / "config" / "lens.jsonc"
    config.parent.mkdir()
    config.write_text(json.dumps({"mcpServers": {"gh": {"command": sys.executable, "args": [SERVER],
                                                        "env": {"GH_TOKEN": TOKEN, "DATA_DIR": PLAIN}}}}))
    config.chmod(0o644)
    async with serving(tmp_path) as (serve, d):
        notes = [line for line in serve.lines if "other users can read" in line]
        assert len(notes) == 1, serve.lines
        assert "mcpServers['gh'].env['GH_TOKEN']" in notes[0] and "chmod 600" in notes[0], notes
        assert TOKEN not in "\n".join(serve.lines) and "DATA_DIR" not in notes[0]
        assert await serve.terminate() == 0
    config.chmod(0o600)  # private: nothing to say
    async with serving(tmp_path, stderr_name="serve-1.err") as (serve, d):
        assert not [line for line in serve.lines if "other users can read" in line], serve.lines
        assert await serve.terminate() == 0
