"""<workspace>/AGENTS.md reaches the system prompt through the project's executor (F-CTX-4)."""

from __future__ import annotations

from pathlib import Path

from runtime.daemon import read_home_agents_md, read_workspace_agents_md
from runtime.prompt import READ_LIMIT_BYTES, Unusable, build_system_prompt

from .conftest import running_pool


async def test_workspace_agents_md_is_read_through_the_executor(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "AGENTS.md").write_text("a parent file: never walked up to\n")
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        assert await read_workspace_agents_md(pool, "p") is None  # no file yet
        text = "# Rules of this repo\n" + "Use tabs. ✓\n" * 10_000  # several read pages (2000 lines each)
        (ws / "AGENTS.md").write_text(text)
        assert await read_workspace_agents_md(pool, "p") == text
        huge = "x" * 100 + "\n"
        (ws / "AGENTS.md").write_text(huge * 5000)  # 505,000 bytes: capped, not unbounded
        got = await read_workspace_agents_md(pool, "p")
        assert got is not None and huge * 10 == got[:1010] and 256 * 1024 <= len(got) < 505_000
        (ws / "AGENTS.md").write_text(text)
        ex = await pool.get("p")
        assert ex.process is not None  # it really went through the spawned executor

        async def read_text(path: str) -> str | None:
            if path == str(ws / "AGENTS.md"):
                return await read_workspace_agents_md(pool, "p")
            return None

        (prompt,) = await build_system_prompt(read_text, workspace=str(ws), home=str(tmp_path / "home"))
        assert "Use tabs. ✓" in prompt and "never walked up" not in prompt


async def test_a_workspace_agents_md_that_is_a_directory_is_left_out(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "AGENTS.md").mkdir(parents=True)
    (ws / "AGENTS.md" / "notes.txt").write_text("not instructions\n")
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        # (its listing, "notes.txt", was put into the system prompt as the project's AGENTS.md)
        assert await read_workspace_agents_md(pool, "p") is None

        async def read_text(path: str) -> str | None:
            return await read_workspace_agents_md(pool, "p") if path == str(ws / "AGENTS.md") else None

        (prompt,) = await build_system_prompt(read_text, workspace=str(ws), home=str(tmp_path / "home"))
        assert "notes.txt" not in prompt and "# Project context" not in prompt


async def test_an_agents_md_with_a_byte_order_mark_and_crlf_endings_reads_as_its_text(tmp_path: Path) -> None:
    # The executor reads a file's text exactly (a BOM and CRLF endings kept): the prompt showed
    # the mark as an invisible U+FEFF before the first rule, gave a file of a mark alone a section
    # with nothing in it, and kept "\r\n" among its own "\n".
    ws = tmp_path / "ws"
    ws.mkdir()
    home_md = tmp_path / "home" / ".agents" / "AGENTS.md"
    home_md.parent.mkdir(parents=True)
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        async def read_text(path: str) -> str | Unusable | None:
            if path == str(ws / "AGENTS.md"):
                return await read_workspace_agents_md(pool, "p")
            return read_home_agents_md(path)

        (ws / "AGENTS.md").write_bytes(b"\xef\xbb\xbfWS-RULE one\r\nWS-RULE two\r\n")
        home_md.write_bytes(b"\xef\xbb\xbf")
        (prompt,) = await build_system_prompt(read_text, workspace=str(ws), home=str(tmp_path / "home"))
        assert "## <workspace>/AGENTS.md\nWS-RULE one\nWS-RULE two\n\n# Environment" in prompt, repr(prompt)
        assert "~/.agents/AGENTS.md" not in prompt, repr(prompt)  # (a mark alone: an empty file)
        assert "\ufeff" not in prompt and "\r" not in prompt, repr(prompt)

        (ws / "AGENTS.md").write_bytes(b"\xef\xbb\xbf \r\n\r\n")
        home_md.write_bytes(b"\xef\xbb\xbfHOME-RULE one\r\nHOME-RULE two\r\n")
        (prompt,) = await build_system_prompt(read_text, workspace=str(ws), home=str(tmp_path / "home"))
        assert "## ~/.agents/AGENTS.md\nHOME-RULE one\nHOME-RULE two\n\n# Environment" in prompt, repr(prompt)
        assert "<workspace>/AGENTS.md" not in prompt and "\ufeff" not in prompt and "\r" not in prompt, repr(prompt)


async def test_only_the_first_256_kib_of_an_agents_md_are_judged_utf8_in_either_file(tmp_path: Path) -> None:
    """Both readers stop at READ_LIMIT_BYTES: a byte that is not UTF-8 past it is never read, so the
    file is its first 256 KiB, cut; one at the limit's last byte, even within the last three bytes
    (where a character the cap cut could begin), is in what was read and leaves the file out."""
    ws = tmp_path / "ws"
    ws.mkdir()
    home = tmp_path / "home.md"
    line = b"y" * 99 + b"\n"  # (100-byte lines: the executor's pages of 2000 lines end at 200,000)
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        for at, usable in ((READ_LIMIT_BYTES + 7_856, True), (READ_LIMIT_BYTES, True),
                           (READ_LIMIT_BYTES - 1, False), (READ_LIMIT_BYTES - 3, False)):
            data = (line * 2_700)[:at] + b"\xff tail\n"
            (ws / "AGENTS.md").write_bytes(data)
            home.write_bytes(data)
            for name, got in (("workspace", await read_workspace_agents_md(pool, "p")),
                              ("home", read_home_agents_md(str(home)))):
                if usable:  # (was: the workspace's, read past the limit, "not UTF-8 text (byte 270000)")
                    assert isinstance(got, str) and got.encode() == data[:READ_LIMIT_BYTES], (name, at, got)
                else:  # (was: the user's, "\xff" in the last 3 bytes taken for a cut character and dropped)
                    assert got == Unusable(f"it is not UTF-8 text (byte {at})"), (name, at, got)
        # a character the limit cuts in two is left out whole, and the file still reads
        data = line * 2_621 + b"y" * 42 + "€".encode() + b"\xff"
        (ws / "AGENTS.md").write_bytes(data)
        home.write_bytes(data)
        for got in (await read_workspace_agents_md(pool, "p"), read_home_agents_md(str(home))):
            assert isinstance(got, str) and got.encode() == data[:READ_LIMIT_BYTES - 2], got[-5:]
