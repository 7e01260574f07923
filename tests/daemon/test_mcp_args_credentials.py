"""Credentials an MCP server is given under names Lens does not know are keys too: an ``env``
literal whose value has a token's shape (``"GH": "ghp_…"``), and in its ``args`` the value of a
credential's flag (``--token X``, ``--api-key=X``), an ``Authorization`` header, a URL's password
and any token-shaped word. None reaches the daemon's stderr, the event log, SSE or an HTTP answer.
A path or a plain flag's value is shown as it is. Real ``lens serve`` on port 0, the real MCP test
server over stdio, a real SSE stream."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from runtime.config import parse_config
from runtime.credentials import credential_literals, mcp_credentials

from ..mcp.conftest import SERVER
from .conftest import run_lens, run_tool, serving

UNNAMED = "ghp_UnnamedEnvToken0123456789abcdef"
FLAGGED = "a7f3c9e1b5d2-flagged-token-value"
EQUALS = "c0ffee00deadbeef-equals-token"
BEARER = "bearer0value1234567890XYZ"
URL_PASSWORD = "urlPassw0rd-1234567"
SHAPED = "xoxb-1234567890-shapedSlackToken"
SECRETS = [UNNAMED, FLAGGED, EQUALS, BEARER, URL_PASSWORD, SHAPED]
PLAIN_PATH = "/srv/mcp-data/plain-argument"
ARGS = [SERVER, "--token", FLAGGED, f"--api-key={EQUALS}", "--header", f"Authorization: Bearer {BEARER}",
        f"postgres://app:{URL_PASSWORD}@db.internal/app", f"slack={SHAPED}", "--data-dir", PLAIN_PATH,
        "--no-auth", "--verbose"]


def _config(root: Path) -> None:
    config = root / "config" / "lens.jsonc"
    config.parent.mkdir()
    config.write_text(json.dumps({"mcpServers": {"t": {"command": sys.executable, "args": ARGS,
                                                       "env": {"GH": UNNAMED, "DATA_DIR": PLAIN_PATH}}}}))
    config.chmod(0o600)


async def test_mcp_credentials_under_unknown_names_reach_no_output(tmp_path: Path) -> None:
    _config(tmp_path)
    async with serving(tmp_path) as (serve, d):
        strong = await d.pair("owner", strong=True)
        reader = await d.pair("reader")
        sid = (await d.session(strong, (await d.project(strong))["id"]))["id"]
        async with d.sse(reader, params={"session": sid}) as stream:
            argv = await run_tool(d, strong, sid, "r1", "mcp__t__env", {"name": "*argv"})
            env = await run_tool(d, strong, sid, "r2", "mcp__t__env", {"name": "GH"})
            plain = await run_tool(d, strong, sid, "r3", "mcp__t__env", {"name": "DATA_DIR"})
            await stream.until(lambda m: sum(x.event == "tool.finished" for x in stream.messages) == 3)
            frames = "\n".join(m.data for m in stream.messages)
        shown = argv["content"][0]["text"]
        assert PLAIN_PATH in shown and "--no-auth --verbose" in shown, shown  # (the rest as it is)
        assert shown.count("[redacted mcpServers.t.args]") == 5, shown
        assert env["content"][0]["text"] == "[redacted GH]", env
        assert plain["content"][0]["text"] == PLAIN_PATH
        answers = [json.dumps([argv, env]), frames]
        for path in (f"/sessions/{sid}/events", f"/sessions/{sid}", "/tools/inventory"):
            r = await d.get(path, reader)
            assert r.status_code == 200, r.text
            answers.append(r.text)
        decoded = await run_lens(tmp_path, "log", "decode", "--data", "data")
        answers += [decoded.stdout, decoded.stderr]
        assert await serve.terminate() == 0
    answers += serve.lines + [(tmp_path / "serve-0.err").read_text()]
    text = "\n".join(answers)
    assert "[redacted mcpServers.t.args]" in frames, frames
    for value in SECRETS:
        assert value not in text, value


def test_which_arguments_are_credentials() -> None:
    cfg = parse_config(json.dumps({"mcpServers": {"t": {"command": "x", "args": ARGS,
                                                        "env": {"GH": UNNAMED, "DATA_DIR": PLAIN_PATH}}}}), "t")
    assert sorted(value for _, _, value in mcp_credentials(cfg)) == sorted(SECRETS)
    assert credential_literals(cfg) == ["mcpServers['t'].env['GH']", *[f"mcpServers['t'].args[{i}]"
                                                                      for i in (2, 3, 5, 6, 7)]]


@pytest.mark.parametrize("args", [["--port", "8080"], ["--no-auth", "--port", "8080"], ["--token-file", "-"],
                                  ["--name", "sk-"], ["--auth"], ["https://example.com/path?q=1"],
                                  ["task-runner_0123456789abcdef"], ["/srv/npm_packages_directory/x"],
                                  ["--cache=/home/u/hf_models_cache_dir"]])
def test_plain_arguments_are_not(args: list[str]) -> None:
    cfg = parse_config(json.dumps({"mcpServers": {"t": {"command": "x", "args": args}}}), "t")
    assert mcp_credentials(cfg) == []
