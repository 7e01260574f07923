"""The model's tools (SPEC §5–§7) as a model calls them: the faux model sends the arguments as a
JSON text (escaping what JSON escapes), the daemon runs the call, the result is read from the log.
Edges found only this way; what the tools' own suites pin is not redone."""

from __future__ import annotations

import json

from tools.files.errors import MAX_TEXT_BYTES

from .conftest import DaemonFactory, run_tool

MiB = 1 << 20


def big_faux() -> dict:
    """A config whose faux model's context window and whose request bodies hold an input of tens
    of MiB (a `/tool` line carrying 8 MiB of escaped text)."""
    return {"server": {"maxBodyBytes": 64 * MiB},
            "providers": [{"id": "faux", "protocol": "faux",
                           "models": [{"id": "faux-1", "contextWindow": 100_000_000}]}],
            "defaultModel": "faux/faux-1"}


async def test_eight_mib_of_text_that_json_escapes_is_written(daemon_factory: DaemonFactory) -> None:
    # 8 MiB of newlines is 16 MiB of JSON text ("\n" twice over): the registry refused the call as
    # TOOL_ARGUMENTS_TOO_LARGE ("arguments exceed 16777216 bytes") though its input is within the
    # file tools' 8 MiB (one byte past is their own TOO_LARGE, pinned by tests/executor's suites)
    d = await daemon_factory(config=big_faux())
    token = await d.pair("big-client", strong=True)
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    ws = d.root / "workspaces" / "p"
    body = await run_tool(d, token, sid, "r1", "edit_file",
                          {"path": "lines.txt", "mode": "create", "content": "\n" * MAX_TEXT_BYTES})
    assert body["structured_content"] == {"path": "lines.txt", "changed": True, "units_applied": 1,
                                          "bytes_written": MAX_TEXT_BYTES}, body["content"]
    assert (ws / "lines.txt").read_bytes() == b"\n" * MAX_TEXT_BYTES
