"""SPEC §3 F-CTX-1 … F-CTX-4 as a client author tests them over HTTP: the edges earlier tests
left out (see "Context as a stranger tests it over HTTP" in docs/decisions.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runtime.prompt import MAX_PROJECT_FILE_CHARS

from ..providers.servers import openai_chat as oc
from ..providers.servers.base import ScriptedServer
from .keyleaks import loop_config


def _system_text(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    assert first["role"] in ("system", "developer"), first
    content = first["content"]
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


async def test_an_agents_md_not_utf8_or_not_openable_is_named_in_the_prompt_and_a_long_one_cut_at_its_limit(
        daemon_factory, nursery, tmp_path, monkeypatch):
    # F-CTX-4 project context: a file that is there but cannot be used left the section out
    # silently, so neither the model nor the user learnt why its instructions were not followed.
    # Each case is a new project (the assembled prompt is kept per project for a moment).
    home = tmp_path / "home"
    (home / ".agents").mkdir(parents=True)
    home_md = home / ".agents" / "AGENTS.md"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("LENS_TEST_CTX_KEY", "sk-test-ctx-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    d = await daemon_factory(config=loop_config(url, "LENS_TEST_CTX_KEY"))
    token = await d.pair("c", strong=True)

    async def prompt(name: str, workspace_md: bytes | None) -> str:
        project = await d.project(token, name)
        if workspace_md is not None:
            (Path(project["workspace"]) / "AGENTS.md").write_bytes(workspace_md)
        sid = (await d.session(token, project["id"]))["id"]
        loop.push(oc.chat_stream(text="ok"))
        await d.submit(token, sid, "r1", "hello")
        view = await d.wait_idle(token, sid)
        assert view["status"] == "idle" and view["items"][-1]["text"] == "ok", view
        return _system_text(loop.bodies[-1])

    home_md.write_bytes(b"HOME \xff\xfe rules\n")
    text = await prompt("home-not-utf8", b"WS-RULE: run make.\n")
    assert ("## ~/.agents/AGENTS.md\n[left out: it is not UTF-8 text (byte 5); fix the file for its "
            "instructions to apply]\n\n## <workspace>/AGENTS.md\nWS-RULE: run make.") in text, text
    home_md.unlink()
    os.symlink(home_md.name, home_md)  # a link to itself: it cannot be opened
    text = await prompt("home-loop", None)
    assert "## ~/.agents/AGENTS.md\n[left out: it cannot be opened (Too many levels of symbolic links)" in text, text
    home_md.unlink()
    text = await prompt("workspace-not-utf8", b"WS-RULE ok\n\x80 then bad\n")
    assert ("## <workspace>/AGENTS.md\n[left out: it is not UTF-8 text (byte 11); fix the file for its "
            "instructions to apply]") in text and "~/.agents" not in text and "WS-RULE" not in text, text
    text = await prompt("missing", None)
    assert "# Project context" not in text and "left out" not in text  # (no file: no section, no note)

    # The limit of a file in the prompt is 65,536 characters: at it, all of it; one past, cut there
    # with a note that gives the file's length.
    body = "é" * (MAX_PROJECT_FILE_CHARS - 1) + "Z"
    text = await prompt("at-limit", body.encode())
    assert body in text and "truncated" not in text
    text = await prompt("past-limit", (body + "Y").encode())
    assert (body + "\n[… truncated: the file has 65537 characters; read it for the rest]") in text
    assert body + "Y" not in text
