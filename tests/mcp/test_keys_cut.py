"""An MCP server's text quoted cut to a limit (a JSON-RPC error's code, the protocol version it
answers) is cut after the daemon's keys are replaced in it (docs/decisions.md, "Caller text
against whole keys, daemon text against pieces")."""

from __future__ import annotations

from pathlib import Path

import trio

from events.secrets import Secrets
from tools.artifacts import ArtifactStore
from tools.mcp import McpServers
from tools.mcp.client import RequestFailed
from tools.registry import builtin_tools

from .conftest import LIMIT, srv, wait_for

KEY = "sk-mcp-text-Q7mZ4kT1vB8nR3wY6pJ0dF5hGc"  # (a canary: any 8 characters of it shown is a leak)
SECRETS = Secrets({KEY: "LENS_TEST_MCP_KEY"})


def leaked(text: str) -> list[str]:
    return [KEY[i:i + 8] for i in range(len(KEY) - 7) if KEY[i:i + 8] in text]


def test_a_json_rpc_error_code_is_cut_after_the_keys() -> None:
    code = "c" * 30 + KEY  # (the cut at 40 falls inside the key)
    exc = RequestFailed(code, "refused", None, SECRETS)
    assert "cccc" in exc.message and leaked(exc.message) == [], exc.message
    # (the marker the cut would split is left out whole, and the code is said to be cut)
    assert exc.message == "refused (JSON-RPC error " + "c" * 30 + "…)", exc.message
    assert leaked(RequestFailed(code, "refused").message) != []  # (without the keys: the check can fail)


async def test_a_protocol_version_refused_at_start_is_cut_after_the_keys(tmp_path: Path) -> None:
    servers = McpServers({"old": srv("--protocol", "v" * 30 + KEY, max_restarts=0)}, builtin_tools(),
                         ArtifactStore(tmp_path / "artifacts"), secrets=SECRETS)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(LIMIT):
            await nursery.start(servers.run)
        def state() -> dict:
            return next(s for s in servers.inventory() if s["name"] == "old")

        await wait_for(lambda: state()["status"] == "failed", "the server's start failed")
        failed = state()
        nursery.cancel_scope.cancel()
    assert "protocol version 'vvvv" in failed["error"], failed
    assert leaked(failed["error"]) == [], failed["error"]


def test_a_key_holding_a_slash_or_a_tilde_as_a_schema_property_name_is_not_shown_in_the_skip_reason(
        tmp_path: Path) -> None:
    # The reason names the schema's place as a JSON pointer, which writes `/` as `~1` and `~` as
    # `~0`: scrubbed after the pointer was built, a key holding either was no longer found there.
    # The schema is scrubbed before it is checked, so the pointer names the key's marker.
    keys = {"AbCd/EfGh+IjKl~MnOp1234": "LENS_TEST_SLASH_KEY", "QrSt~UvWx/YzAb+CdEf5678": "LENS_TEST_TILDE_KEY"}
    servers = McpServers({"k": srv()}, builtin_tools(), ArtifactStore(tmp_path / "artifacts"), secrets=Secrets(keys))
    state = servers.servers["k"]
    tools = [{"name": f"t{i}", "inputSchema": {"type": "object", "properties": {key: 5}}} for i, key in enumerate(keys)]
    servers._register(state, tools)
    assert state.tools == [] and [s["name"] for s in state.skipped] == ["t0", "t1"]
    for skipped, (key, name) in zip(state.skipped, keys.items()):
        escaped = key.replace("~", "~0").replace("/", "~1")
        assert escaped not in skipped["reason"] and key not in skipped["reason"], skipped
        assert skipped["reason"].endswith(f"#/properties/[redacted {name}]: a schema is an object or a boolean, "
                                          "not a number"), skipped
