"""The in-memory output of a background job (runtime.jobs.OutputRing): the latest bytes kept,
absolute offsets, UTF-8 characters never split, the tail recorded in job.finished."""

from __future__ import annotations

from projections.session_state import JobRecord
from runtime.jobs import OutputRing, report_text


def test_the_ring_keeps_the_latest_bytes_at_their_absolute_offsets():
    ring = OutputRing(10)
    ring.write(b"0123456")
    ring.write(b"789abc")
    assert (ring.start, ring.total, bytes(ring.buf)) == (3, 13, b"3456789abc")
    assert ring.read(0, 4, final=False) == ("3456", 3, 7)  # before what is kept: from the oldest byte
    assert ring.read(7, 100, final=False) == ("789abc", 7, 13)
    assert ring.read(13, 100, final=False) == ("", 13, 13)
    assert ring.read(99, 100, final=True) == ("", 13, 13)
    ring.write(b"x" * 25)  # one write larger than the ring
    assert (ring.start, ring.total, bytes(ring.buf)) == (28, 38, b"x" * 10)


def test_reads_never_split_a_character():
    ring = OutputRing(100)
    ring.write("aé€😀".encode())  # 1 + 2 + 3 + 4 bytes
    assert ring.read(0, 2, final=True) == ("a", 0, 1)  # é would be cut: the page ends before it
    assert ring.read(6, 1, final=True) == ("😀", 6, 10)  # a limit below one character: that character
    assert ring.read(1, 2, final=True) == ("é", 1, 3)
    assert ring.read(2, 10, final=True) == ("€😀", 3, 10)  # an offset inside é moves to the next character
    assert ring.read(3, 6, final=True) == ("€", 3, 6)
    # a character still arriving (the job runs) is not shown half; once final, the rest is shown as is
    ring.write("z€".encode()[:2])
    assert ring.read(6, 100, final=False) == ("😀z", 6, 11)
    assert ring.read(6, 100, final=True) == ("😀z\ufffd", 6, 12)


def test_the_tail_starts_at_a_character():
    ring = OutputRing(100)
    ring.write(("é" * 10).encode())
    assert ring.tail(5) == "éé"  # 5 bytes end in 2½ characters: the half one is left out
    assert ring.tail(1000) == "é" * 10


def test_the_report_names_the_job_its_end_and_its_last_output():
    rec = JobRecord("job_1", "make " + "x" * 300)
    text = report_text(rec, "exited", 2, "", "error: it broke\n")
    assert text.splitlines()[0] == "[background job job_1 exited with code 2]"
    assert text.splitlines()[1] == "command: make " + "x" * 195 + "…"
    assert text.endswith("last output (up to 4096 bytes):\nerror: it broke\n")
    assert report_text(rec, "lost", None, "Lens restarted", "").splitlines()[::2] == [
        "[background job job_1 was lost (Lens restarted)]", "(no output)"]


def test_streams_joined_keep_each_streams_characters_whole():
    from tools.command_output import StreamJoin, incomplete_tail

    out = bytearray()
    join = StreamJoin(out.extend)
    join.write("stdout", "a€".encode()[:3])  # "a" and two bytes of €
    assert bytes(out) == b"a"
    join.write("stderr", b"ERR")
    join.write("stdout", "€".encode()[2:] + "😀".encode()[:1])
    join.write("stderr", "😀".encode()[:3])
    join.write("stdout", "😀".encode()[1:])
    assert bytes(out).decode() == "aERR€😀"
    join.write("stderr", "😀".encode()[3:])
    assert bytes(out).decode() == "aERR€😀😀"
    # bytes that are not UTF-8 pass as they come; only a cut-short lead sequence is held
    out.clear()
    join.write("stdout", b"\x80\x80\x80\x80")
    join.write("stdout", b"x\xff")
    assert bytes(out) == b"\x80\x80\x80\x80x\xff"
    join.write("stdout", b"\xe2\x82")
    join.write("stdout", b"y")  # not the continuation it waited for: passed on with it
    join.write("stderr", b"\xf0\x9f")
    assert bytes(out) == b"\x80\x80\x80\x80x\xff\xe2\x82y"
    join.flush()  # a character the command never finished is written at the end
    assert bytes(out).endswith(b"\xf0\x9f")
    assert [incomplete_tail(b) for b in (b"", b"a", b"\xc3", b"\xc3\xa9", b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80",
                                         b"\x80\x80\x80\x80", b"a\xe2")] == [0, 1, 0, 2, 0, 4, 4, 1]


def test_pages_of_output_that_is_not_utf8_add_up_to_the_whole():
    # Stray continuation bytes are no character's middle: a page that starts at them shows them
    # (as U+FFFD), as a read of the whole output does, rather than moving past them.
    data = b"ab\x80\x80\x80cd\xbf\xbfe" + "é".encode()
    ring = OutputRing(100)
    ring.write(data)
    whole = ring.read(0, 100, final=True)
    assert whole == (data.decode("utf-8", "replace"), 0, len(data))
    for limit in range(1, len(data) + 1):
        pages, offset = [], 0
        while True:
            text, begin, nxt = ring.read(offset, limit, final=True)
            if not text:
                break
            assert begin == offset, (limit, offset)
            pages.append(text)
            offset = nxt
        assert "".join(pages) == whole[0], limit
    # an offset inside a real character still moves to the next one
    assert ring.read(len(data) - 1, 10, final=True) == ("", len(data), len(data))
    assert ring.tail(4) == "\ufffde" + "é"  # the tail starts at a stray byte: it is shown too


def test_run_commands_output_keeps_each_streams_lines_whole():
    """A line longer than a read of the executor (64 KiB), or written in pieces, came in several
    chunks; a stderr line arriving between them was put inside it in ``run_command``'s result.
    With ``whole_lines`` each stream's lines are written whole, the other stream's between them."""
    from tools.command_output import StreamJoin

    long_line = b"a" * 100_000 + b"\n"
    out = bytearray()
    join = StreamJoin(out.extend, whole_lines=True)
    join.write("stdout", b"first\n" + long_line[:65536])  # (a read ends inside the long line)
    join.write("stderr", b"warning: something\n")
    join.write("stdout", long_line[65536:] + b"last, unfinished")
    join.write("stderr", b"partial err")
    assert bytes(out) == b"first\n" + b"warning: something\n" + long_line
    join.flush()  # what no newline ended is written at the end, each stream's whole
    assert bytes(out) == b"first\nwarning: something\n" + long_line + b"last, unfinishedpartial err"
    # a line in many small chunks (a character cut between them too) comes out once, whole
    out.clear()
    join = StreamJoin(out.extend, whole_lines=True)
    word = "é😀".encode()
    for i in range(len(word)):
        join.write("stdout", word[i:i + 1])
        join.write("stderr", b"e%d\n" % i)
    join.write("stdout", b"\n")
    assert bytes(out).decode() == "".join(f"e{i}\n" for i in range(len(word))) + "é😀\n"
    # without it (a job's live output) bytes go on as they come: the stderr line inside the line
    out.clear()
    join = StreamJoin(out.extend)
    join.write("stdout", long_line[:65536])
    join.write("stderr", b"warning\n")
    join.write("stdout", long_line[65536:])
    assert bytes(out) == long_line[:65536] + b"warning\n" + long_line[65536:]


def test_a_join_has_begun_only_once_a_chunk_brought_bytes():
    # ``began`` tells a refused start that nothing of the command ran (it may be sent again):
    # an empty chunk is no output, and does not change which stream is flushed last either.
    from tools.command_output import StreamJoin

    for whole_lines in (False, True):
        out = bytearray()
        join = StreamJoin(out.extend, whole_lines=whole_lines)
        join.write("stdout", b"")
        join.write("stderr", b"")
        assert not join.began and out == b""
        join.write("stdout", b"a\xc3")  # (half a character: held)
        assert join.began
        join.write("stderr", b"b\xe2")
        join.write("stdout", b"")
        join.flush()  # (the stream that brought the last bytes is flushed last)
        assert bytes(out) == (b"a\xc3b\xe2" if whole_lines else b"ab\xc3\xe2"), whole_lines
