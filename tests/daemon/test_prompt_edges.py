"""F-CTX-4 / F-MOD-4 / F-CTX-5 at their edges through a running daemon and the official SDK
clients against the loopback provider servers (see "Prompt, caching and usage at their edges"
in docs/decisions.md)."""

from __future__ import annotations

from .test_context_acceptance import agents_md_prompts


async def test_an_agents_md_written_with_a_byte_order_mark_or_crlf_endings_reads_as_its_text(
        daemon_factory, nursery, tmp_path, monkeypatch):
    # Editors on Windows write AGENTS.md with a byte-order mark and CRLF line endings. The mark
    # went into the system prompt as an invisible U+FEFF before the first rule, a file of a mark
    # alone got a section of its own with nothing in it, and the lines ended in "\r\n" among the
    # prompt's "\n".
    home_md, prompt = await agents_md_prompts(daemon_factory, nursery, tmp_path, monkeypatch)

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


async def test_a_workspace_agents_md_not_utf8_only_past_the_read_limit_is_shown_cut(
        daemon_factory, nursery, tmp_path, monkeypatch):
    # The workspace's file is read in whole-line pages of the executor's read_file, so its last
    # page reached past the 256 KiB the prompt reads: a byte there that was not UTF-8 left the
    # whole file out ("not UTF-8 text (byte 270000)"), where the same file in ~/.agents was shown.
    home_md, prompt = await agents_md_prompts(daemon_factory, nursery, tmp_path, monkeypatch)
    data = b"WS-RULE first\n" + b"y" * 99 + b"\n" + (b"z" * 99 + b"\n") * 2_699 + b"\xff latin-1\n"
    text = await prompt("bad-past-limit", data)
    assert "## <workspace>/AGENTS.md\nWS-RULE first\n" + "y" * 99 + "\n" in text, text[:2000]
    assert "[… truncated: the file has at least 262144 characters; read it for the rest]" in text, text[-400:]
    assert "left out" not in text, text[-400:]
    # and so for one with a NUL byte early (browse_read, which read the rest, refused it as binary)
    text = await prompt("nul-past-limit", b"a\0b\n" + data)
    assert "## <workspace>/AGENTS.md\na\0b\nWS-RULE first\n" in text, text[:2000]
    assert "[… truncated: the file has at least 262144 characters; read it for the rest]" in text, text[-400:]
    assert "left out" not in text, text[-400:]
