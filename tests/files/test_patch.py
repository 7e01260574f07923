"""patch_file (F-EXE-4): a golden table of (original bytes, patch text) -> bytes or error code."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.files import LIMITS, Workspace
from tools.files.errors import FileToolError
from tools.files.patch import apply, parse

from .helpers import fails

MAX = LIMITS["MAX_TEXT_BYTES"]
UNITS = LIMITS["MAX_UNITS"]

TWO_FUNCS = b"def a():\n    x = 1\n    return x\n\ndef b():\n    x = 1\n    return x\n"

# (id, original, patch, expected bytes | error code)
GOLDEN: list[tuple[str, bytes, str, bytes | str]] = [
    ("replace", b"a\nb\nc\n", "@@\n a\n-b\n+B\n c\n", b"a\nB\nc\n"),
    ("add-and-delete", b"a\nb\nc\n", "@@\n-a\n+x\n+y\n b\n", b"x\ny\nb\nc\n"),
    ("delete-only", b"a\nb\nc\n", "@@\n a\n-b\n", b"a\nc\n"),
    ("context-only-is-unchanged", b"a\nb\n", "@@\n a\n b\n", b"a\nb\n"),
    ("not-unique-without-anchor", TWO_FUNCS, "@@\n-    x = 1\n+    x = 2\n", "NOT_UNIQUE"),
    ("anchor-disambiguates", TWO_FUNCS, "@@ def b():\n-    x = 1\n+    x = 2\n",
     TWO_FUNCS.replace(b"def b():\n    x = 1", b"def b():\n    x = 2")),
    ("anchor-must-be-unique", TWO_FUNCS, "@@     return x\n-\n+# gap\n", "NOT_UNIQUE"),
    ("anchor-must-exist", TWO_FUNCS, "@@ def c():\n-    x = 1\n+    x = 2\n", "NO_MATCH"),
    ("anchor-is-a-whole-line", TWO_FUNCS, "@@ def b\n-    x = 1\n+    x = 2\n", "NO_MATCH"),
    ("anchor-then-match-after-it", b"x\nanchor\ny\n", "@@ anchor\n-x\n+X\n", "NO_MATCH"),
    ("anchor-line-itself-is-not-the-match", b"x\nanchor\nx\n", "@@ anchor\n-x\n+X\n", b"x\nanchor\nX\n"),
    ("anchor-then-still-not-unique", b"k\nx\nx\n", "@@ k\n-x\n+X\n", "NOT_UNIQUE"),
    ("no-match", b"a\nb\n", "@@\n-c\n+d\n", "NO_MATCH"),
    ("overlapping-candidates-count", b"a\na\na\n", "@@\n a\n-a\n", "NOT_UNIQUE"),
    ("hunks-match-the-original", b"a\nx\nb\n", "@@\n-a\n+b\n@@\n x\n-b\n+c\n", b"b\nx\nc\n"),
    ("hunks-any-order", b"1\n2\n3\n4\n", "@@\n-4\n+four\n@@\n-1\n+one\n", b"one\n2\n3\nfour\n"),
    ("overlap", b"a\nb\nc\n", "@@\n a\n-b\n@@\n b\n-c\n", "OVERLAP"),
    ("same-run-twice-overlaps", b"a\nb\n", "@@\n-a\n+A\n@@\n-a\n+Z\n", "OVERLAP"),
    ("touching-runs-are-fine", b"a\nb\nc\nd\n", "@@\n-a\n-b\n+AB\n@@\n-c\n+C\n", b"AB\nC\nd\n"),
    ("crlf-stays-crlf", b"a\r\nb\r\nc\r\n", "@@\n a\n-b\n+B\n+B2\n c\n", b"a\r\nB\r\nB2\r\nc\r\n"),
    ("crlf-patch-text", b"a\nb\n", "@@\r\n a\r\n-b\r\n+B\r\n", b"a\nB\n"),
    ("added-line-takes-neighbour-ending", b"a\r\nb\nc\r\nd\r\n", "@@\n b\n+new\n c\n", b"a\r\nb\nnew\nc\r\nd\r\n"),
    ("first-added-line-takes-next-ending", b"a\r\nb\r\n", "@@\n+top\n a\n", b"top\r\na\r\nb\r\n"),
    ("added-after-unterminated-uses-dominant", b"a\r\nb\r\nc", "@@\n c\n+d\n", b"a\r\nb\r\nc\r\nd"),
    ("no-final-newline-edit-last", b"a\nb", "@@\n a\n-b\n+B\n", b"a\nB"),
    ("no-final-newline-edit-middle", b"a\nb\nc", "@@\n-a\n+A\n", b"A\nb\nc"),
    ("no-final-newline-append", b"a\nb", "@@\n b\n+c\n", b"a\nb\nc"),
    ("no-final-newline-delete-last", b"a\nb", "@@\n a\n-b\n", b"a\n"),  # the context line keeps its "\n"
    ("no-final-newline-delete-whole-run", b"a\nb", "@@\n-b\n", b"a\n"),
    ("untouched-bytes-exact", b"\tx  \r\nmid\rdle\n\xc3\xa9\n\nend", "@@\n-\xe9\n+e\n",
     b"\tx  \r\nmid\rdle\ne\n\nend"),
    ("empty-file-pure-add", b"", "@@\n+one\n+two\n", b"one\ntwo\n"),
    ("pure-add-needs-empty-file", b"a\n", "@@\n+b\n", "INVALID_PATCH"),
    ("pure-add-must-be-alone", b"", "@@\n+a\n@@\n+b\n", "INVALID_PATCH"),
    ("pure-add-with-other-hunk", b"a\n", "@@\n-a\n+A\n@@\n+b\n", "INVALID_PATCH"),
    ("empty-file-with-context", b"", "@@\n a\n+b\n", "NO_MATCH"),
    ("eof-pin", b"x\ny\nx\n", "@@\n-x\n+END\n*** End of File\n", b"x\ny\nEND\n"),
    ("eof-pin-no-final-newline", b"x\ny\nx", "@@\n x\n+z\n*** End of File\n", b"x\ny\nx\nz"),
    ("eof-pin-not-at-end", b"x\ny\n", "@@\n-x\n+X\n*** End of File\n", "NO_MATCH"),
    ("eof-pin-then-next-hunk", b"a\nb\nc\n", "@@\n-c\n+C\n*** End of File\n@@\n-a\n+A\n", b"A\nb\nC\n"),
    ("eof-pin-with-anchor", b"a\nx\nb\nx\n", "@@ b\n-x\n+X\n*** End of File\n", b"a\nx\nb\nX\n"),
    ("blank-line-in-body-is-context", b"a\n\nb\n", "@@\n a\n\n-b\n+B\n\n\n", b"a\n\nB\n"),
    ("space-line-is-blank-context", b"a\n\nb\n", "@@\n a\n \n-b\n+B\n", b"a\n\nB\n"),
    ("envelope-refused", b"a\n", "*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\n", "INVALID_PATCH"),
    ("file-headers-refused", b"a\n", "--- a/f\n+++ b/f\n@@\n-a\n+b\n", "INVALID_PATCH"),
    ("numbered-header-refused", b"a\n", "@@ -1,1 +1,1 @@\n-a\n+b\n", "INVALID_PATCH"),
    ("bad-body-prefix", b"a\n", "@@\n-a\n*b\n", "INVALID_PATCH"),
    ("no-newline-marker-refused", b"a", "@@\n-a\n+b\n\\ No newline at end of file\n", "INVALID_PATCH"),
    ("header-without-space", b"a\n", "@@x\n-a\n", "INVALID_PATCH"),
    ("empty-hunk", b"a\n", "@@\n@@\n-a\n+b\n", "INVALID_PATCH"),
    ("empty-patch", b"a\n", "", "INVALID_PATCH"),
    ("body-after-eof-pin", b"a\n", "@@\n-a\n*** End of File\n+b\n", "INVALID_PATCH"),
]


@pytest.mark.parametrize("original,patch,expected", [g[1:] for g in GOLDEN], ids=[g[0] for g in GOLDEN])
def test_golden(ws: Workspace, root: Path, original: bytes, patch: str, expected: bytes | str) -> None:
    f = root / "f"
    f.write_bytes(original)
    if isinstance(expected, str):
        fails(expected, ws.patch_file, "f", patch)
        assert f.read_bytes() == original
        return
    out = ws.patch_file("f", patch)
    assert f.read_bytes() == expected
    changed = expected != original
    hunks = sum(1 for ln in patch.replace("\r\n", "\n").split("\n") if ln.startswith("@@"))
    assert out.structured == {"path": "f", "changed": changed, "units_applied": hunks,
                              "bytes_written": len(expected) if changed else 0}
    assert (out.before, out.after) == (original, expected)


def test_file_must_exist_and_be_utf8(ws: Workspace, root: Path) -> None:
    fails("NOT_FOUND", ws.patch_file, "missing", "@@\n+a\n")
    (root / "bin").write_bytes(b"\xff\n")
    fails("NOT_UTF8", ws.patch_file, "bin", "@@\n-a\n+b\n")
    (root / "d").mkdir()
    fails("NOT_A_FILE", ws.patch_file, "d", "@@\n-a\n+b\n")
    fails("INVALID_ARGUMENT", ws.patch_file, "bin", None)
    fails("INVALID_ARGUMENT", ws.patch_file, "bin", "@@\n+\ud800\n")


@pytest.mark.parametrize("count,code", [(UNITS, None), (UNITS + 1, "TOO_MANY_UNITS")])
def test_hunk_count_edge(ws: Workspace, root: Path, count: int, code: str | None) -> None:
    (root / "f").write_text("".join(f"line {i}\n" for i in range(count)))
    patch = "".join(f"@@\n-line {i}\n+LINE {i}\n" for i in range(count))
    if code:
        fails(code, ws.patch_file, "f", patch)
    else:
        assert ws.patch_file("f", patch).structured["units_applied"] == UNITS
        assert (root / "f").read_text() == "".join(f"LINE {i}\n" for i in range(count))


@pytest.mark.parametrize("extra", [0, 1])
def test_patch_text_size_edge(ws: Workspace, root: Path, extra: int) -> None:
    (root / "f").write_text("x\n")
    head = "@@\n-x\n+"
    patch = head + "y" * (MAX - len(head) - 1 + extra) + "\n"
    assert len(patch) == MAX + extra
    if extra:
        fails("TOO_LARGE", ws.patch_file, "f", patch)
    else:
        assert ws.patch_file("f", patch).structured["bytes_written"] == MAX - len(head)


@pytest.mark.parametrize("extra", [0, 1])
def test_original_size_edge(ws: Workspace, root: Path, extra: int) -> None:
    (root / "f").write_bytes(b"a" * (MAX - 2 + extra) + b"\nZ")
    if extra:
        fails("TOO_LARGE", ws.patch_file, "f", "@@\n-Z\n+Y\n")
    else:
        assert ws.patch_file("f", "@@\n-Z\n+Y\n").structured["bytes_written"] == MAX


@pytest.mark.parametrize("extra", [0, 1])
def test_result_size_edge(ws: Workspace, root: Path, extra: int) -> None:
    half = MAX // 2
    (root / "f").write_bytes(b"a" * (half - 1) + b"\nx\n")  # half + 2 bytes
    patch = "@@\n-x\n+" + "y" * (half - 1 + extra) + "\n"  # result: half + (half - 1 + extra) + 1
    if extra:
        fails("TOO_LARGE", ws.patch_file, "f", patch)
        assert (root / "f").stat().st_size == half + 2
    else:
        assert ws.patch_file("f", patch).structured["bytes_written"] == MAX
        assert (root / "f").stat().st_size == MAX


def test_a_hunk_of_repeated_lines_is_found_in_one_pass(ws: Workspace, root: Path) -> None:
    # 1,000 identical lines and a hunk of 300 of them as context: comparing at every place where
    # the hunk's rarest line is is past the direct budget when that line is "x" too (a
    # 2,000,000-line file took minutes), so the linear search runs; it must find exactly what the
    # direct one would. (With "END" or "NOPE" in the hunk, its rarest line decides at once.)
    from tools.files.patch import DIRECT_COMPARE_BUDGET

    assert 1000 * 301 > DIRECT_COMPARE_BUDGET
    (root / "r.txt").write_bytes(b"x\n" * 1000 + b"END\n")
    ws.patch_file("r.txt", "@@\n" + " x\n" * 300 + "-END\n+DONE\n")
    assert (root / "r.txt").read_bytes() == b"x\n" * 1000 + b"DONE\n"
    with pytest.raises(FileToolError) as info:  # 300 x's then one removed x: 700 places
        ws.patch_file("r.txt", "@@\n" + " x\n" * 300 + "-x\n+y\n")
    assert info.value.code == "NOT_UNIQUE" and "matches 700 places" in info.value.message
    with pytest.raises(FileToolError) as info:
        ws.patch_file("r.txt", "@@\n" + " x\n" * 300 + "-NOPE\n+y\n")
    assert info.value.code == "NO_MATCH"
    assert (root / "r.txt").read_bytes() == b"x\n" * 1000 + b"DONE\n"


LINES = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(lines=LINES, start=st.integers(0, 29), size=st.integers(1, 6), anchor=st.booleans(), data=st.data())
def test_a_hunk_is_found_exactly_where_a_plain_search_finds_it(lines: list[str], start: int, size: int,
                                                                anchor: bool, data: st.DataObject) -> None:
    """Where a hunk matches (its candidates start from its rarest line): the same places as
    comparing at every line, so the same result, NO_MATCH or NOT_UNIQUE."""
    start = min(start, len(lines) - 1)
    old = lines[start:start + size]
    if data.draw(st.booleans()):  # sometimes a hunk that may match nowhere
        old = data.draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=6))
    after = 0
    anchor_line = None
    if anchor:
        anchor_line = "A"
        at = data.draw(st.integers(0, len(lines)))
        lines = lines[:at] + ["A"] + lines[at:]
        after = at + 1
    hits = [i for i in range(after, len(lines) - len(old) + 1) if lines[i:i + len(old)] == old]
    original = "".join(x + "\n" for x in lines).encode()
    patch = ("@@ " + anchor_line if anchor_line else "@@") + "\n" + "".join(" " + x + "\n" for x in old[:-1])
    patch += "-" + old[-1] + "\n+Z\n"
    try:
        got = apply(original, parse(patch), "f")
    except FileToolError as exc:
        assert (exc.code, len(hits) > 1) == ("NOT_UNIQUE", True) or (exc.code, hits) == ("NO_MATCH", []), exc.message
        return
    assert len(hits) == 1
    i = hits[0] + len(old) - 1
    assert got == "".join(x + "\n" for x in lines[:i] + ["Z"] + lines[i + 1:]).encode()
