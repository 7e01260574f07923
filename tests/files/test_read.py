"""read_file (F-EXE-2): result shapes, selection, paging at the caps, UTF-8 rules."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from tools.files import LIMITS, Workspace

from .helpers import fails

PAGE_BYTES = LIMITS["READ_PAGE_BYTES"]
PAGE_LINES = LIMITS["READ_PAGE_LINES"]


def test_file_result_shape(ws: Workspace, root: Path) -> None:
    (root / "a.txt").write_bytes(b"one\ntwo\r\nthree")
    assert ws.read_file("a.txt") == {
        "path": "a.txt", "kind": "file", "content": "one\ntwo\r\nthree", "start_line": 1,
        "lines_returned": 3, "offset": 0, "next_offset": 14, "eof": True, "size": 14,
    }


def test_empty_file(ws: Workspace, root: Path) -> None:
    (root / "e").write_bytes(b"")
    r = ws.read_file("e")
    assert (r["content"], r["lines_returned"], r["next_offset"], r["eof"], r["size"]) == ("", 0, 0, True, 0)


def test_directory_listing_shape(ws: Workspace, root: Path) -> None:
    (root / "b.txt").write_text("x")
    (root / ".hidden").write_text("x")
    (root / "A").mkdir()
    (root / "sub").mkdir()
    (root / "sub" / "inner").write_text("x")
    (root / "zlink").symlink_to("sub")
    r = ws.read_file(".")
    listing = ".hidden\nA/\nb.txt\nsub/\nzlink\n"
    assert r == {"path": ".", "kind": "directory", "content": listing,
                 "entries": [".hidden", "A/", "b.txt", "sub/", "zlink"], "start_line": 1, "lines_returned": 5,
                 "offset": 0, "next_offset": len(listing), "eof": True, "size": len(listing)}
    assert ws.read_file("sub")["entries"] == ["inner"]
    assert ws.read_file("sub/")["entries"] == ["inner"]


def test_a_listing_is_sorted_by_name_before_the_directory_slash(ws: Workspace, root: Path) -> None:
    for name in ("a-b", "a.b", "a0"):
        (root / name).write_text("x")
    (root / "a").mkdir()
    assert ws.read_file(".")["entries"] == ["a/", "a-b", "a.b", "a0"]  # was a-b, a.b, a/, a0


def test_empty_directory(ws: Workspace, root: Path) -> None:
    (root / "d").mkdir()
    r = ws.read_file("d")
    assert (r["kind"], r["content"], r["entries"], r["eof"], r["size"]) == ("directory", "", [], True, 0)


def test_directory_selection_and_paging(ws: Workspace, root: Path) -> None:
    for name in ("a", "b", "c", "d"):
        (root / name).write_text("x")
    (root / "é").mkdir()
    r = ws.read_file(".", start_line=2, max_lines=2)
    assert (r["entries"], r["start_line"], r["offset"], r["next_offset"], r["eof"]) == (["b", "c"], 2, 2, 6, False)
    r2 = ws.read_file(".", offset=r["next_offset"])
    assert (r2["entries"], r2["start_line"], r2["eof"]) == (["d", "é/"], 4, True)
    assert r2["next_offset"] == r2["size"] == len("a\nb\nc\nd\né/\n".encode())


def test_start_line_and_max_lines(ws: Workspace, root: Path) -> None:
    (root / "f").write_text("l1\nl2\nl3\nl4\nl5\n")
    r = ws.read_file("f", start_line=2, max_lines=2)
    assert (r["content"], r["start_line"], r["lines_returned"], r["offset"], r["next_offset"], r["eof"]) == \
        ("l2\nl3\n", 2, 2, 3, 9, False)
    r = ws.read_file("f", start_line=5, max_lines=1)
    assert (r["content"], r["eof"]) == ("l5\n", True)
    r = ws.read_file("f", max_lines=5)
    assert r["eof"] and r["lines_returned"] == 5


def test_start_line_past_the_end_is_an_empty_page(ws: Workspace, root: Path) -> None:
    (root / "f").write_text("a\nb")
    r = ws.read_file("f", start_line=3)
    assert (r["content"], r["lines_returned"], r["offset"], r["eof"]) == ("", 0, 3, True)
    r = ws.read_file("f", start_line=2)
    assert (r["content"], r["lines_returned"], r["offset"]) == ("b", 1, 2)


def test_offset_paging_reassembles_multibyte_text(ws: Workspace, root: Path) -> None:
    text = "".join(f"línea {i} — ✓ 𝄞\n" for i in range(50))
    (root / "u.txt").write_text(text, encoding="utf-8")
    got, off, pages, line = [], 0, 0, 1
    while True:
        r = ws.read_file("u.txt", offset=off, max_lines=7)
        assert r["offset"] == off and r["start_line"] == line
        got.append(r["content"])
        pages += 1
        line += r["lines_returned"]
        off = r["next_offset"]
        if r["eof"]:
            break
    assert "".join(got) == text and pages == 8 and off == len(text.encode())


def test_offset_rules(ws: Workspace, root: Path) -> None:
    (root / "u").write_bytes("aé\nb".encode())  # é is bytes 1..2
    assert ws.read_file("u", offset=1)["content"] == "é\nb"
    fails("INVALID_ARGUMENT", ws.read_file, "u", offset=2)  # inside é
    assert ws.read_file("u", offset=3)["start_line"] == 1  # the "\n" still belongs to line 1
    assert ws.read_file("u", offset=4)["start_line"] == 2
    r = ws.read_file("u", offset=5)
    assert (r["content"], r["eof"], r["lines_returned"]) == ("", True, 0)
    fails("INVALID_ARGUMENT", ws.read_file, "u", offset=6)


@pytest.mark.parametrize("kwargs", [
    {"start_line": 0}, {"start_line": -1}, {"max_lines": 0}, {"offset": -1}, {"start_line": True},
    {"max_lines": "3"}, {"offset": 1.5}, {"start_line": 2, "offset": 0},
])
def test_bad_selection_arguments(ws: Workspace, root: Path, kwargs: dict) -> None:
    (root / "f").write_text("a\nb\n")
    fails("INVALID_ARGUMENT", ws.read_file, "f", **kwargs)


@pytest.mark.parametrize("count,eof", [(PAGE_LINES, True), (PAGE_LINES + 1, False)])
def test_line_cap_edge(ws: Workspace, root: Path, count: int, eof: bool) -> None:
    (root / "f").write_text("x\n" * count)
    r = ws.read_file("f", max_lines=10 * PAGE_LINES)  # clamped to the cap
    assert (r["lines_returned"], r["eof"], r["next_offset"]) == (PAGE_LINES, eof, 2 * PAGE_LINES)


@pytest.mark.parametrize("extra", [0, 1])
def test_byte_cap_edge(ws: Workspace, root: Path, extra: int) -> None:
    line = b"y" * 1023 + b"\n"
    data = line * (PAGE_BYTES // 1024) + b"z" * extra  # 256 lines, exactly the cap (+1 byte)
    (root / "f").write_bytes(data)
    r = ws.read_file("f")
    assert (r["next_offset"], r["lines_returned"], r["eof"]) == (PAGE_BYTES, 256, extra == 0)
    if extra:
        r2 = ws.read_file("f", offset=r["next_offset"])
        assert (r2["content"], r2["start_line"], r2["eof"]) == ("z", 257, True)


def test_byte_cap_ends_after_the_last_whole_line(ws: Workspace, root: Path) -> None:
    data = b"a" * 100 + b"\n" + b"b" * PAGE_BYTES + b"\n"
    (root / "f").write_bytes(data)
    r = ws.read_file("f")
    assert (r["content"], r["next_offset"], r["eof"]) == ("a" * 100 + "\n", 101, False)


def test_overlong_line_is_cut_at_a_character_boundary(ws: Workspace, root: Path) -> None:
    text = "a" + "é" * (PAGE_BYTES // 2 + 10)  # byte PAGE_BYTES is the second byte of an é
    (root / "f").write_text(text, encoding="utf-8")
    r = ws.read_file("f")
    assert r["next_offset"] == PAGE_BYTES - 1 and not r["eof"] and r["lines_returned"] == 1
    r2 = ws.read_file("f", offset=r["next_offset"])
    assert r["content"] + r2["content"] == text and r2["eof"] and r2["start_line"] == 1


def test_not_utf8(ws: Workspace, root: Path) -> None:
    (root / "bin").write_bytes(b"ok\n\xff\xfe\n")
    err = fails("NOT_UTF8", ws.read_file, "bin")
    assert "bin" in err.message
    assert ws.read_file("bin", max_lines=1)["content"] == "ok\n"  # checked on the page's bytes


def test_missing_and_bad_paths(ws: Workspace, root: Path) -> None:
    fails("NOT_FOUND", ws.read_file, "nope.txt")
    fails("NOT_FOUND", ws.read_file, "no/such/dir.txt")
    fails("INVALID_ARGUMENT", ws.read_file, "a\x00b")
    fails("INVALID_ARGUMENT", ws.read_file, "")
    fails("INVALID_ARGUMENT", ws.read_file, 3)
    (root / "f").write_text("x")
    fails("NOT_A_DIRECTORY", ws.read_file, "f/g")


def _bounded(fn, seconds: float = 5.0):
    """Run fn in a daemon thread; fail (instead of hanging the suite) if it blocks."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the call blocked"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def test_fifo_is_refused_without_blocking(ws: Workspace, root: Path) -> None:
    os.mkfifo(root / "pipe")
    fails("NOT_A_FILE", _bounded, lambda: ws.read_file("pipe"))
    fails("NOT_A_FILE", _bounded, lambda: ws.view_image("pipe"))
    fails("NOT_A_FILE", _bounded, lambda: ws.edit_file("pipe", "rewrite", content="x"))
    fails("NOT_A_FILE", _bounded, lambda: ws.patch_file("pipe", "@@\n-a\n+b\n"))
    (root / "to-pipe").symlink_to("pipe")
    fails("NOT_A_FILE", _bounded, lambda: ws.read_file("to-pipe"))
    assert ws.read_file(".")["entries"] == ["pipe", "to-pipe"]


def test_socket_and_device_are_refused(ws: Workspace, root: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(root / "s"))
        fails("NOT_A_FILE", _bounded, lambda: ws.read_file("s"))
    finally:
        sock.close()
    try:
        os.mknod(root / "null", 0o600 | 0o020000, os.makedev(1, 3))  # S_IFCHR, like /dev/null
    except (PermissionError, OSError):
        pytest.skip("cannot create a device node here")
    fails("NOT_A_FILE", _bounded, lambda: ws.read_file("null"))
    fails("NOT_A_FILE", _bounded, lambda: ws.view_image("null"))


def test_directory_names_with_newlines_stay_one_entry(ws: Workspace, root: Path) -> None:
    (root / "a\nb").write_text("x")
    (root / "c").write_text("x")
    assert ws.read_file(".")["entries"] == ["a\\nb", "c"]


def test_limits_are_exported() -> None:
    assert dict(LIMITS) == {"MAX_UNITS": 128, "MAX_TEXT_BYTES": 8 * 1024 * 1024, "MAX_IMAGE_BYTES": 5 * 1024 * 1024,
                            "READ_PAGE_BYTES": 256 * 1024, "READ_PAGE_LINES": 2000, "MAX_SYMLINK_HOPS": 40}


def test_a_page_keeps_to_the_size_the_file_had_when_it_was_opened() -> None:
    # read_file pages over the file's fd with the size fstat gave; a file that grew since (a log
    # being written) gave a page of 2000 lines past that size, with "size": 10 and "eof": true,
    # so a reader stopped though more was there. The page is of the file as it was opened; the
    # next call (a fresh fstat) sees what was appended.
    from tools.files import read

    grown = b"a\n" * 300_000
    res = read.page(read.bytes_reader(grown), 10, shown="log")
    assert res == {"content": "a\n" * 5, "start_line": 1, "lines_returned": 5, "offset": 0, "next_offset": 10,
                   "eof": True, "size": 10}
    res = read.page(read.bytes_reader(grown), 10, shown="log", offset=4)
    assert res["content"] == "a\n" * 3 and res["next_offset"] == 10 and res["eof"] is True
    # one line longer than the page cap, then grown: cut at the cap, not eof
    big = b"b" * (PAGE_BYTES + 10)
    res = read.page(read.bytes_reader(big + b"\nmore\n" * 10), len(big), shown="log")
    assert res["next_offset"] == PAGE_BYTES and res["eof"] is False
    assert read.page(read.bytes_reader(big + b"\n"), len(big), shown="log", offset=PAGE_BYTES)["content"] == "b" * 10
