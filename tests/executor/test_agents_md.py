"""<workspace>/AGENTS.md reaches the system prompt through the project's executor (F-CTX-4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from events.secrets import Secrets
from runtime.daemon import read_home_agents_md, read_workspace_agents_md
from runtime.prompt import READ_LIMIT_BYTES, Cut, ReadText, Unusable, build_system_prompts

from .conftest import running_pool


async def full_prompt(read_text: ReadText, ws: Path, home: Path, secrets: Secrets | None = None) -> str:
    """The prompt an agent that can load a skill is sent (the full form, one string)."""
    (prompt,) = (await build_system_prompts(read_text, workspace=str(ws), home=str(home),
                                            secrets=secrets)).for_agent(True)
    return prompt


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
        assert got == Cut((huge * 5000)[:READ_LIMIT_BYTES])
        (ws / "AGENTS.md").write_text(text)
        ex = await pool.get("p")
        assert ex.process is not None  # it really went through the spawned executor

        async def read_text(path: str) -> str | None:
            if path == str(ws / "AGENTS.md"):
                return await read_workspace_agents_md(pool, "p")
            return None

        prompt = await full_prompt(read_text, ws, tmp_path / "home")
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

        prompt = await full_prompt(read_text, ws, tmp_path / "home")
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
        prompt = await full_prompt(read_text, ws, tmp_path / "home")
        assert "## <workspace>/AGENTS.md\nWS-RULE one\nWS-RULE two\n\n# Environment" in prompt, repr(prompt)
        assert "~/.agents/AGENTS.md" not in prompt, repr(prompt)  # (a mark alone: an empty file)
        assert "\ufeff" not in prompt and "\r" not in prompt, repr(prompt)

        (ws / "AGENTS.md").write_bytes(b"\xef\xbb\xbf \r\n\r\n")
        home_md.write_bytes(b"\xef\xbb\xbfHOME-RULE one\r\nHOME-RULE two\r\n")
        prompt = await full_prompt(read_text, ws, tmp_path / "home")
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
                    assert got == Cut(data[:READ_LIMIT_BYTES].decode()), (name, at)
                else:  # (was: the user's, "\xff" in the last 3 bytes taken for a cut character and dropped)
                    assert got == Unusable(f"it is not UTF-8 text (byte {at})"), (name, at, got)
        # a character the limit cuts in two is left out whole, and the file still reads
        data = line * 2_621 + b"y" * 42 + "€".encode() + b"\xff"
        (ws / "AGENTS.md").write_bytes(data)
        home.write_bytes(data)
        for got in (await read_workspace_agents_md(pool, "p"), read_home_agents_md(str(home))):
            assert got == Cut(data[:READ_LIMIT_BYTES - 2].decode())


async def test_each_reader_stops_at_the_limit_and_says_whether_the_file_goes_on(tmp_path: Path) -> None:
    """A file is cut (``Cut``) when bytes exist past READ_LIMIT_BYTES, never guessed from the length
    of what was read: files of 262,141 and 262,143 bytes read whole were "at least" their size (and
    a key's start at their end was left out as if cut), the workspace's reader read whole pages past
    the limit (399,904 bytes of an 810 KiB file; "at least 270003" for one of 270,004 bytes)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    home = tmp_path / "home" / ".agents" / "AGENTS.md"
    home.parent.mkdir(parents=True)
    line = b"y" * 99 + b"\n"
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        async def read_text(path: str) -> str | Cut | Unusable | None:
            if path == str(ws / "AGENTS.md"):
                return await read_workspace_agents_md(pool, "p")
            return read_home_agents_md(path)

        async def both(data: bytes) -> list[object]:
            (ws / "AGENTS.md").write_bytes(data)
            home.write_bytes(data)
            return [await read_workspace_agents_md(pool, "p"), read_home_agents_md(str(home))]

        for size in (262_141, 262_143, READ_LIMIT_BYTES):  # read whole, up to the limit itself
            data = (line * 2_700)[:size - 1] + b"z"
            assert await both(data) == [data.decode()] * 2, size
            prompt = await full_prompt(read_text, ws, tmp_path / "home")
            assert prompt.count(f"[… truncated: the file has {size} characters;") == 2, (size, prompt[-300:])
        for size in (READ_LIMIT_BYTES + 1, 270_004, 810 * 1024):  # one past it and more: its first 256 KiB
            data = (line * 8_300)[:size]
            assert await both(data) == [Cut(data[:READ_LIMIT_BYTES].decode())] * 2, size
            prompt = await full_prompt(read_text, ws, tmp_path / "home")
            assert prompt.count(f"[… truncated: the file has at least {READ_LIMIT_BYTES} characters;") == 2, size

        # A key's first character ends a file read whole (65,536 characters, 262,141 bytes): kept,
        # as the file ends there; it was dropped as a cut file's possible start of a key.
        secrets = Secrets({"sk-live-" + "k" * 56: "LENS_K"})
        data = "😀".encode() * 65_535 + b"s"
        assert await both(data) == [data.decode()] * 2
        prompt = await full_prompt(read_text, ws, tmp_path / "home", secrets=secrets)
        assert prompt.count("😀s\n\n") == 2, prompt[-100:]

        # A character the limit cuts in two is left out: 2,000 lines end at byte 262,143, then a
        # "€" starts there (its last two bytes past the limit: it was kept, 262,146 bytes).
        data = (b"y" * 130 + b"\n") * 1_999 + b"y" * 273 + b"\n" + "€abc\n".encode() + b"\xff\n"
        assert len(data) == 262_143 + 9 and data[262_143:262_146] == "€".encode()
        assert await both(data) == [Cut(data[:262_143].decode())] * 2

        # A NUL byte early is text as read_file takes it, and a byte not UTF-8 past the limit is
        # not read (the workspace's was refused as "not UTF-8 text (byte 270008)").
        data = b"a\0b\n" + line * 2_700 + b"\xff\n"
        assert await both(data) == [Cut(data[:READ_LIMIT_BYTES].decode())] * 2


async def test_read_head_takes_a_limit_of_1_to_max_text_bytes_and_judges_no_text(tmp_path: Path) -> None:
    """The executor's ``read_head`` (the Core's AGENTS.md read): the bytes as they are, whether the
    file goes on, and a clear error for a limit out of range or no regular file."""
    from runtime.executor_client import ExecutorToolError
    from tools.files.errors import MAX_TEXT_BYTES

    ws = tmp_path / "ws"
    (ws / "dir").mkdir(parents=True)
    (ws / "f").write_bytes(b"\0\xff" + b"z" * (MAX_TEXT_BYTES - 1))
    async with running_pool(tmp_path / "executors", {"p": ws}) as pool:
        ex = await pool.get("p")
        for limit, data in ((1, b"\0"), (MAX_TEXT_BYTES, b"\0\xff" + b"z" * (MAX_TEXT_BYTES - 2))):
            out = await ex.client.call("read_head", {"path": "f", "limit": limit})
            assert (out.data, out.result) == (data, {"more": True}), limit
        with pytest.raises(ExecutorToolError) as err:
            await ex.client.call("read_head", {"path": "f", "limit": MAX_TEXT_BYTES + 1})
        assert (err.value.code, err.value.message) == ("INVALID_ARGUMENT", f"limit must be from 1 to {MAX_TEXT_BYTES}")
        (ws / "f").write_bytes(b"abc")
        out = await ex.client.call("read_head", {"path": "f", "limit": 3})
        assert (out.data, out.result) == (b"abc", {"more": False})
        for path, args, code in (("f", {"limit": 0}, "INVALID_ARGUMENT"), ("dir", {"limit": 1}, "NOT_A_FILE"),
                                 ("gone", {"limit": 1}, "NOT_FOUND"), ("f", {}, "INVALID_ARGUMENT")):
            with pytest.raises(ExecutorToolError) as err:
                await ex.client.call("read_head", {"path": path, **args})
            assert err.value.code == code, (path, args, err.value.message)
