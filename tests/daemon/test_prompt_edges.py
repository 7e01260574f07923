"""F-CTX-4 / F-MOD-4 / F-CTX-5 at their edges through a running daemon and the official SDK
clients against the loopback provider servers (see "Prompt, caching and usage at their edges"
in docs/decisions.md)."""

from __future__ import annotations

from pathlib import Path

from ..providers.servers import openai_chat as oc
from ..providers.servers.base import ScriptedServer
from .keyleaks import loop_config
from .test_context_acceptance import _system_text

# Each case is a new project, whose first request spawns its executor: on a loaded machine that
# took longer than the suite's 10 s bound (the wait ends as soon as the session is idle).
FIRST_REQUEST_LIMIT = 60.0


async def test_an_agents_md_written_with_a_byte_order_mark_or_crlf_endings_reads_as_its_text(
        daemon_factory, nursery, tmp_path, monkeypatch):
    # Editors on Windows write AGENTS.md with a byte-order mark and CRLF line endings. The mark
    # went into the system prompt as an invisible U+FEFF before the first rule, a file of a mark
    # alone got a section of its own with nothing in it, and the lines ended in "\r\n" among the
    # prompt's "\n".
    home = tmp_path / "home"
    (home / ".agents").mkdir(parents=True)
    home_md = home / ".agents" / "AGENTS.md"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("LENS_TEST_CTX_KEY", "sk-test-ctx-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    d = await daemon_factory(config=loop_config(url, "LENS_TEST_CTX_KEY"))
    token = await d.pair("c", strong=True)

    async def prompt(name: str, workspace_md: bytes) -> str:
        project = await d.project(token, name)  # (a new project each: its prompt is built afresh)
        (Path(project["workspace"]) / "AGENTS.md").write_bytes(workspace_md)
        sid = (await d.session(token, project["id"]))["id"]
        loop.push(oc.chat_stream(text="ok"))
        await d.submit(token, sid, "r1", "hello")
        view = await d.wait_idle(token, sid, timeout=FIRST_REQUEST_LIMIT)
        assert view["status"] == "idle" and view["items"][-1]["text"] == "ok", view
        return _system_text(loop.bodies[-1])

    home_md.write_bytes(b"\xef\xbb\xbfHOME-RULE one\r\nHOME-RULE two\r\n")
    text = await prompt("bom-home", b"\xef\xbb\xbf")
    assert "## ~/.agents/AGENTS.md\nHOME-RULE one\nHOME-RULE two" in text, repr(text)
    assert "<workspace>/AGENTS.md" not in text, repr(text)  # (a mark alone is an empty file)
    assert "\ufeff" not in text and "\r" not in text, repr(text)

    home_md.write_bytes(b"\xef\xbb\xbf\r\n  \r\n")
    text = await prompt("bom-workspace", b"\xef\xbb\xbfWS-RULE one\r\nWS-RULE two\r\n")
    assert "~/.agents/AGENTS.md" not in text, repr(text)
    assert "## <workspace>/AGENTS.md\nWS-RULE one\nWS-RULE two" in text, repr(text)
    assert "\ufeff" not in text and "\r" not in text, repr(text)
