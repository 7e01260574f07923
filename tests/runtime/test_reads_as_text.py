"""``tools.artifacts.reads_as_text``: the one judgment of "UTF-8 text" by a window of 8 KiB, for an
artifact served (its head) and a fetched body without a type (docs/decisions.md, "Artifacts at
scale: ranges that seek, a bounded lease set, more types"). Pure, no I/O."""

from __future__ import annotations

from tools.artifacts import HEAD_BYTES, reads_as_text
from tools.web.fetch import _kind


def test_text_is_judged_by_its_first_8_kib() -> None:
    assert HEAD_BYTES == 8192
    e = "é".encode()
    for data, whole, expected in [
        (b"", True, True),
        (b"plain", True, True),
        (b"x" * 8191 + b"\0", True, False),  # (a NUL at the window's last byte)
        (b"x" * 8192 + b"\0", True, True),  # (one past it: not looked at)
        (b"x" * 8191 + e, True, True),  # (a character cut by the window, the artifact going on)
        (b"x" * 100 + e[:1], True, False),  # (cut at the end of all there is)
        (b"x" * 100 + e[:1], False, True),  # (a head, or a body that may end inside a character)
        (b"x" * 100 + b"\xff", False, False),  # (no character begins so: not a cut one)
        (b"caf\xe9", True, False),  # (Latin-1)
        (b"x" * 9000 + b"\xff", True, True),  # (past the window)
    ]:
        assert reads_as_text(data, whole=whole) is expected, (data[-4:], whole)


def test_a_fetched_body_without_a_type_is_judged_the_same_way() -> None:
    assert _kind("", b"a line\n" + "é".encode()[:1]) == "text"  # (cut at the body's end)
    assert _kind("", b"a line\n\xff") == "binary"  # (it passed as a cut character)
    assert _kind("", b"x" * 8191 + b"\0") == "binary"
    assert _kind("", b"x" * 8192 + b"\0") == "text"
