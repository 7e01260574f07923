"""Edge cases of the workspace tools' semantics (SPEC F-EXE-2..5), through the real executor."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.executor_client import ExecutorClient
from tools.files.errors import READ_PAGE_BYTES

from .test_tools import CoreTools, core, fails, sub  # noqa: F401  (core and sub are fixtures)


async def read_all_pages(client: ExecutorClient, path: str) -> bytes:
    """Page through a file by next_offset; every page that is not the last must make progress."""
    out = b""
    offset = 0
    for _ in range(10):
        page = (await client.call("read_file", {"path": path, "offset": offset})).result
        assert page["offset"] == offset
        out += page["content"].encode("utf-8")
        if page["eof"]:
            return out
        assert page["next_offset"] > offset, page
        offset = page["next_offset"]
    raise AssertionError("paging did not end")


@pytest.mark.parametrize("data", [
    b"\x80" * (READ_PAGE_BYTES + 10),             # continuation bytes only
    b"x" + b"\x80" * (READ_PAGE_BYTES + 10),      # one ASCII byte, then continuation bytes
])
async def test_a_long_line_that_is_not_utf8_is_not_utf8_not_an_empty_page(client: ExecutorClient, workspace: Path,
                                                                         sub: str, data: bytes) -> None:
    (workspace / sub / "bad.bin").write_bytes(data)
    err = await fails("NOT_UTF8", client.call("read_file", {"path": f"{sub}/bad.bin"}))
    assert f"{sub}/bad.bin" in str(err)
    await fails("NOT_UTF8", client.call("read_file", {"path": f"{sub}/bad.bin", "offset": 0}))


async def test_an_offset_at_a_stray_continuation_byte_is_not_utf8(client: ExecutorClient, workspace: Path,
                                                                  sub: str) -> None:
    (workspace / sub / "latin1.txt").write_bytes(b"\x80abc\n")
    await fails("NOT_UTF8", client.call("read_file", {"path": f"{sub}/latin1.txt", "offset": 0}))
    (workspace / sub / "stray.txt").write_bytes("é".encode() + b"\x80z\n")  # a lead byte before, too far
    await fails("NOT_UTF8", client.call("read_file", {"path": f"{sub}/stray.txt", "offset": 2}))
    (workspace / sub / "utf8.txt").write_bytes("a😀b\n".encode())
    for inside in (2, 3, 4):  # inside the 4-byte character: the offset is wrong, the file is fine
        await fails("INVALID_ARGUMENT", client.call("read_file", {"path": f"{sub}/utf8.txt", "offset": inside}))
    page = await client.call("read_file", {"path": f"{sub}/utf8.txt", "offset": 5})
    assert page.result["content"] == "b\n"


@pytest.mark.parametrize("char", ["é", "文", "😀"])
@pytest.mark.parametrize("lead", [0, 1, 2, 3])
async def test_a_long_valid_line_is_paged_whole_at_character_boundaries(client: ExecutorClient, workspace: Path,
                                                                        sub: str, char: str, lead: int) -> None:
    text = "x" * lead + char * (READ_PAGE_BYTES // len(char.encode()) + 2) + "\nend\n"
    (workspace / sub / "long.txt").write_text(text)
    assert await read_all_pages(client, f"{sub}/long.txt") == text.encode()


async def test_an_eof_pinned_hunk_longer_than_the_search_budget_still_matches_only_at_the_end(
        client: ExecutorClient, workspace: Path, sub: str) -> None:
    from tools.files.patch import DIRECT_COMPARE_BUDGET
    n = DIRECT_COMPARE_BUDGET + 1  # a hunk of more old lines than the direct comparison allows
    original = b"x\n" * n + b"y\n"
    (workspace / sub / "big.txt").write_bytes(original)
    pinned = "@@\n" + " x\n" * (n - 1) + "-x\n+z\n*** End of File\n"
    await fails("NO_MATCH", client.call("patch_file", {"path": f"{sub}/big.txt", "patch": pinned}))
    assert (workspace / sub / "big.txt").read_bytes() == original
    at_end = "@@\n" + " x\n" * (n - 1) + " x\n-y\n+z\n*** End of File\n"
    out = await client.call("patch_file", {"path": f"{sub}/big.txt", "patch": at_end})
    assert out.result["changed"] and (workspace / sub / "big.txt").read_bytes() == b"x\n" * n + b"z\n"


async def test_core_read_file_tells_the_model_when_a_page_is_not_the_end(core: CoreTools, workspace: Path,
                                                                          sub: str) -> None:
    (workspace / sub / "a.txt").write_text("one\ntwo\nthree")
    _, whole = await core.run("read_file", {"path": f"{sub}/a.txt"})
    assert [p.text for p in whole.content] == ["one\ntwo\nthree"]  # the whole file: its exact text only

    _, first = await core.run("read_file", {"path": f"{sub}/a.txt", "max_lines": 2})
    assert first.structured_content["content"] == "one\ntwo\n" and first.structured_content["eof"] is False
    text = first.content[0].text
    assert text.startswith("one\ntwo\n[partial: lines 1-2, bytes 0-8 of 13;")
    assert "offset 8" in text
    _, rest = await core.run("read_file", {"path": f"{sub}/a.txt", "offset": 8})
    assert [p.text for p in rest.content] == ["three"]
    _, past = await core.run("read_file", {"path": f"{sub}/a.txt", "start_line": 9})
    assert past.structured_content["content"] == "" and past.structured_content["eof"] is True
    assert [p.text for p in past.content] == ["[nothing from line 9 (byte 13) on: the end is at byte 13]"]
    (workspace / sub / "empty.txt").write_bytes(b"")
    _, empty = await core.run("read_file", {"path": f"{sub}/empty.txt"})
    assert [p.text for p in empty.content] == [""]  # an empty file is its (empty) text

    long = "x" * (READ_PAGE_BYTES + 5)  # one line longer than a page: the note goes on a line of its own
    (workspace / sub / "long.txt").write_text(long)
    _, cut = await core.run("read_file", {"path": f"{sub}/long.txt"})
    assert cut.content[0].text == "x" * READ_PAGE_BYTES + (
        f"\n[partial: lines 1-1, bytes 0-{READ_PAGE_BYTES} of {READ_PAGE_BYTES + 5}; "
        f"to continue, call read_file with offset {READ_PAGE_BYTES}]")

    for name in ("c", "a", "b"):
        (workspace / sub / "d" / name).mkdir(parents=True)
    _, listing = await core.run("read_file", {"path": f"{sub}/d", "max_lines": 2})
    assert listing.content[0].text.startswith("a/\nb/\n[partial: entries 1-2, bytes 0-6 of 9;")


HINT = "; it would match at {where} if line endings were ignored: the file's {file}, old_string's in {old}; " \
       "the match is exact, so give old_string the file's line endings"
CRLF, LF = "CRLF (\\r\\n)", "LF (\\n)"


@pytest.mark.parametrize("original,old,hint", [
    # a CRLF file and an old_string written with bare newlines (what a model nearly always writes)
    (b"one\r\ntwo\r\nthree\r\n", "two\nthree", dict(where="line 2", file=f"line there ends in {CRLF}", old=LF)),
    # an LF file and an old_string written with CRLF
    (b"one\ntwo\nthree\n", "one\r\ntwo\r\n", dict(where="line 1", file=f"lines there end in {LF}", old=CRLF)),
    # mixed endings: the lines of each named
    (b"one\r\ntwo\nthree\r\nfour\n", "two\nthree\nfour",
     dict(where="line 2", file=f"line 3 there ends in {CRLF} and line 2 in {LF}", old=LF)),
    (b"a\r\nb\nc\r\nd\ne\r\nf\ng\r\nh\ni\r\nj\nk\r\nl\n", "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\n",
     dict(where="line 1", file=f"lines 1, 3, 5, 7, 9 and 1 more there end in {CRLF} and lines 2, 4, 6, 8, 10 and 1 more in {LF}",
          old=LF)),
    (b"one\ntwo\r\nthree\n", "one\r\ntwo\nthree",  # (each ending of old_string the other one)
     dict(where="line 1", file=f"line 2 there ends in {CRLF} and line 1 in {LF}", old=f"a mix of {CRLF} and {LF}")),
    # more than one place
    (b"x\r\ny\r\nx\r\ny\r\n", "x\ny", dict(where="line 1 (the first of more than one place)",
                                           file=f"line there ends in {CRLF}", old=LF)),
    # genuine misses keep the plain message
    (b"one\r\ntwo\r\nthree\r\n", "one\nthree", None),
    (b"one\r\ntwo\r\nthree\r\n", "two", None),  # (found: not a miss; checked below)
    (b"one\ntwo\n", "one\ntwo \n", None),
    (b"one\r\ntwo\r\n", "one two", None),
], ids=["crlf-file-lf-old", "lf-file-crlf-old", "mixed-file", "mixed-file-many-lines", "mixed-both",
        "more-than-once", "no-match-crlf", "found", "no-match-blank", "no-match-one-line"])
async def test_an_edit_missing_only_because_of_line_endings_says_where_and_which(
        client: ExecutorClient, workspace: Path, sub: str, original: bytes, old: str, hint: dict | None) -> None:
    # The match stays exact (F-EXE-3), so a model's old_string with other line endings than the
    # file's finds nothing; the NO_MATCH says so, by line numbers only, and nothing is written.
    f = workspace / sub / "f.txt"
    f.write_bytes(original)
    call = client.call("edit_file", {"path": f"{sub}/f.txt", "mode": "edit", "edits": [
        {"old_string": old, "new_string": "X"}]})
    if old == "two":
        assert (await call).result["changed"] is True
        return
    err = await fails("NO_MATCH", call)
    assert err.message == f"{sub}/f.txt: edit 0: old_string not found" + (HINT.format(**hint) if hint else "")
    assert f.read_bytes() == original


async def test_the_line_endings_hint_counts_lines_of_the_text_the_edits_before_left(
        client: ExecutorClient, workspace: Path, sub: str) -> None:
    f = workspace / sub / "win.txt"
    f.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    err = await fails("NO_MATCH", client.call("edit_file", {"path": f"{sub}/win.txt", "mode": "edit", "edits": [
        {"old_string": "one", "new_string": "zero\r\none"},
        {"old_string": "three", "new_string": "3"},
        {"old_string": "one\ntwo", "new_string": "1\n2"}]}))
    assert err.message == f"{sub}/win.txt: edit 2: old_string not found" + HINT.format(
        where="line 2 of the text as edits 0-1 left it", file=f"line there ends in {CRLF}", old=LF)
    assert f.read_bytes() == b"one\r\ntwo\r\nthree\r\n"
    # written with the file's endings, as the message says, it is applied
    done = await client.call("edit_file", {"path": f"{sub}/win.txt", "mode": "edit", "edits": [
        {"old_string": "one\r\ntwo", "new_string": "1\r\n2"}]})
    assert done.result == {"path": f"{sub}/win.txt", "changed": True, "units_applied": 1, "bytes_written": 13}
    assert f.read_bytes() == b"1\r\n2\r\nthree\r\n"
