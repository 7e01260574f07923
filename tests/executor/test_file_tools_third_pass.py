"""A third pass over the file tools (F-EXE-2..6, F-EXE-9) as a client sees them: every call crosses
the real ``lens executor serve`` over gRPC.

``test_file_tools_acceptance.py``, ``test_file_tools_second_pass.py`` and the rest of
tests/executor and tests/files are not repeated; these are the edges they left: a PNG whose
critical chunk fails its CRC (a decoder refuses it; an ancillary chunk's is only a warning) or
that has no ``IDAT``, a WebP whose chunks run past its RIFF size, an
anchor line that differs from the file's only in whitespace, ``read_file`` at the byte between a
``\\r`` and its ``\\n`` and at the page's byte cap (exactly, one past, a line cut between ``\\r``
and ``\\n``), a patch written with the other line endings than the file's, and names of 255 and
256 bytes in characters of two bytes.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from runtime.executor_client import ExecutorClient
from tools.files.errors import READ_PAGE_BYTES

from tests.files.sample_images import PNG, WEBP_ANIMATED, WEBP_EXTENDED, WEBP_LOSSLESS, WEBP_LOSSY

from .test_tools import fails, sub  # noqa: F401  (sub is a fixture)


def chunk(kind: bytes, data: bytes, crc: int | None = None) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) if crc is None else crc)


def png_with(bad: bytes | None, extra: bytes = b"") -> bytes:
    """A whole 1x1 PNG (with ``extra`` chunks after IHDR) whose chunk ``bad`` carries a wrong CRC."""
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    parts = [(b"IHDR", ihdr), (b"IDAT", zlib.compress(b"\x00\xff\x00\x00"), ), (b"IEND", b"")]
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr, 0 if bad == b"IHDR" else None) + extra
    for kind, data in parts[1:]:
        out += chunk(kind, data, 0 if bad == kind else None)
    return out


# ---------------------------------------------------------------------------- F-EXE-6 view_image


@pytest.mark.parametrize("bad", [b"IHDR", b"IDAT", b"IEND"])
async def test_a_png_whose_critical_chunk_fails_its_crc_is_not_an_image(client: ExecutorClient, workspace: Path,
                                                                        sub: str, bad: bytes) -> None:
    # A decoder (libpng, and the services' behind it) stops at a critical chunk whose CRC-32 is
    # wrong; such a PNG was taken, stored, and sent with every later request of the session.
    (workspace / sub / "img.png").write_bytes(png_with(bad))
    err = await fails("NOT_AN_IMAGE", client.call("view_image", {"path": f"{sub}/img.png"}))
    assert str(err) == f"{sub}/img.png: the PNG image is corrupt (its {bad.decode()!r} chunk fails its CRC-32 check)"


async def test_a_png_whose_ancillary_chunk_fails_its_crc_is_taken_as_decoders_take_it(client: ExecutorClient,
                                                                                      workspace: Path, sub: str) -> None:
    # (an ancillary chunk's bad CRC is a decoder's warning: the chunk is skipped, the image shown)
    data = png_with(None, extra=chunk(b"tEXt", b"Comment\x00hi", 0))
    (workspace / sub / "img.png").write_bytes(data)
    out = await client.call("view_image", {"path": f"{sub}/img.png"})
    assert (out.data, out.mime) == (data, "image/png")
    (workspace / sub / "whole.png").write_bytes(png_with(None))
    assert (await client.call("view_image", {"path": f"{sub}/whole.png"})).mime == "image/png"


def webp_sized(riff: int | None = None, first_chunk: int | None = None) -> bytes:
    """The 1x1 lossy WebP with its RIFF size or its first chunk's size said otherwise."""
    data = bytearray(WEBP_LOSSY)
    if riff is not None:
        data[4:8] = struct.pack("<I", riff)
    if first_chunk is not None:
        data[16:20] = struct.pack("<I", first_chunk)
    return bytes(data)


@pytest.mark.parametrize("name, data, said", [
    # a decoder finds no pixel data to decode: "no IDAT"
    ("no_idat.png", b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
     + chunk(b"IEND", b""), "the PNG image has no image data (no IDAT chunk before IEND)"),
    # the RIFF header says the file ends inside the first chunk's header, or the chunk runs past it
    ("short_riff.webp", webp_sized(riff=10),
     "the WEBP image is truncated (its chunks run past the 18 bytes its RIFF header declares)"),
    ("long_chunk.webp", webp_sized(first_chunk=9999),
     "the WEBP image is truncated (its chunks run past the 42 bytes its RIFF header declares)"),
], ids=["png-no-idat", "webp-short-riff", "webp-long-chunk"])
async def test_an_image_without_its_data_is_not_an_image(client: ExecutorClient, workspace: Path, sub: str,
                                                         name: str, data: bytes, said: str) -> None:
    # Each walked to its end as whole before: the chunk lengths were never held to the RIFF size,
    # and a PNG's chunks were read to IEND whether pixel data came on the way or not.
    (workspace / sub / name).write_bytes(data)
    err = await fails("NOT_AN_IMAGE", client.call("view_image", {"path": f"{sub}/{name}"}))
    assert str(err) == f"{sub}/{name}: {said}"


async def test_the_whole_webp_samples_are_still_images(client: ExecutorClient, workspace: Path, sub: str) -> None:
    for name, data in [("lossy.webp", WEBP_LOSSY), ("lossless.webp", WEBP_LOSSLESS),
                       ("extended.webp", WEBP_EXTENDED), ("animated.webp", WEBP_ANIMATED)]:
        (workspace / sub / name).write_bytes(data)
        out = await client.call("view_image", {"path": f"{sub}/{name}"})
        assert (out.data, out.mime) == (data, "image/webp"), name


def riff(body: bytes) -> bytes:
    """A WebP file of ``body`` (``WEBP`` and its chunks) under a RIFF header declaring its size."""
    return b"RIFF" + struct.pack("<I", len(body)) + body


VP8L_BODY = WEBP_LOSSLESS[8:]  # (b"WEBP", then its one VP8L chunk of odd size and the pad byte)


@pytest.mark.parametrize("data", [
    riff(VP8L_BODY + b"\0\0\0\0"),  # four bytes after the image chunk, inside the RIFF size
    riff(VP8L_BODY + b"\0"),  # one
    riff(VP8L_BODY[:-1]),  # the pad byte after the last (odd-sized) chunk left out
], ids=["4-trailing", "1-trailing", "no-pad-byte"])
async def test_a_webp_with_a_leftover_shorter_than_a_chunk_header_is_an_image(client: ExecutorClient,
                                                                               workspace: Path, sub: str,
                                                                               data: bytes) -> None:
    # libwebp stops at the image chunk: fewer than 8 bytes after it, inside the RIFF size, are no
    # chunk cut short. They were refused as "truncated"; a missing last pad byte was let through.
    (workspace / sub / "img.webp").write_bytes(data)
    out = await client.call("view_image", {"path": f"{sub}/img.webp"})
    assert (out.data, out.mime) == (data, "image/webp")


async def test_an_image_is_known_by_its_bytes_whatever_its_name_says(client: ExecutorClient, workspace: Path,
                                                                     sub: str) -> None:
    (workspace / sub / "really_a_png.gif").write_bytes(PNG)
    out = await client.call("view_image", {"path": f"{sub}/really_a_png.gif"})
    assert (out.data, out.mime) == (PNG, "image/png")


# ---------------------------------------------------------------------------- F-EXE-4 patch_file


async def test_an_anchor_that_differs_from_a_line_only_in_whitespace_says_which(client: ExecutorClient,
                                                                              workspace: Path, sub: str) -> None:
    # A context or '-' line that differs only in whitespace was named; an anchor with a trailing
    # blank (as a model writes it) got only "the anchor line is not in the file".
    f = workspace / sub / "f.py"
    f.write_bytes(b"import os\n\ndef f():\n    x = 1\n")
    err = await fails("NO_MATCH", client.call("patch_file", {"path": f"{sub}/f.py",
                                                             "patch": "@@ def f(): \n-    x = 1\n+    x = 2\n"}))
    assert str(err) == (f"{sub}/f.py: hunk 0: the anchor line is not in the file "
                        "(line 3 of the file differs from it only in whitespace)")
    err = await fails("NO_MATCH", client.call("patch_file", {"path": f"{sub}/f.py",
                                                             "patch": "@@ def g():\n-    x = 1\n+    x = 2\n"}))
    assert str(err) == f"{sub}/f.py: hunk 0: the anchor line is not in the file"
    assert f.read_bytes() == b"import os\n\ndef f():\n    x = 1\n"


@pytest.mark.parametrize("original, patch, result", [
    # a patch written with LF, applied to CRLF text: added lines take the nearby "\r\n"
    (b"one\r\ntwo\r\nthree\r\n", "@@\n one\n-two\n+TWO\n+extra\n three\n", b"one\r\nTWO\r\nextra\r\nthree\r\n"),
    # the same with a byte-order mark, appended at the end by the pin
    (b"\xef\xbb\xbfa\r\nb\r\n", "@@\n b\n+c\n*** End of File\n", b"\xef\xbb\xbfa\r\nb\r\nc\r\n"),
    # a patch written with CRLF, applied to LF text without a final newline: it keeps none
    (b"a\nb", "@@\r\n a\r\n-b\r\n+B\r\n", b"a\nB"),
    # a line added after an unterminated last line of CRLF text: the old last line gets the ending
    (b"a\r\nb", "@@\n a\n b\n+c\n", b"a\r\nb\r\nc"),
    # a blank line of the patch without its leading space is an empty context line
    (b"a\n\nb\nc\n", "@@\n a\n\n-b\n+B\n", b"a\n\nB\nc\n"),
    # every line deleted
    (b"a\nb\n", "@@\n-a\n-b\n", b""),
])
async def test_a_patch_with_other_line_endings_than_the_file_keeps_the_files(client: ExecutorClient, workspace: Path,
                                                                            sub: str, original: bytes, patch: str,
                                                                            result: bytes) -> None:
    f = workspace / sub / "f.txt"
    f.write_bytes(original)
    out = (await client.call("patch_file", {"path": f"{sub}/f.txt", "patch": patch})).result
    assert f.read_bytes() == result
    assert (out["changed"], out["bytes_written"]) == (True, len(result))


# ---------------------------------------------------------------------------- F-EXE-2 read_file


async def test_an_offset_between_a_carriage_return_and_its_newline_reads_from_there(client: ExecutorClient,
                                                                                    workspace: Path, sub: str) -> None:
    # Byte 2 of "a\r\nb\r\n" is a character boundary inside line 1: the page starts there, and
    # its first line is the tail of line 1 (the "\n" alone).
    (workspace / sub / "f.txt").write_bytes(b"a\r\nb\r\n")
    r = (await client.call("read_file", {"path": f"{sub}/f.txt", "offset": 2})).result
    assert (r["content"], r["start_line"], r["lines_returned"], r["next_offset"], r["eof"]) == ("\nb\r\n", 1, 2, 6, True)
    r = (await client.call("read_file", {"path": f"{sub}/f.txt", "offset": 2, "max_lines": 1})).result
    assert (r["content"], r["start_line"], r["lines_returned"], r["next_offset"], r["eof"]) == ("\n", 1, 1, 3, False)


async def test_a_file_of_exactly_the_page_cap_is_one_page_and_one_byte_more_is_two(client: ExecutorClient,
                                                                                   workspace: Path, sub: str) -> None:
    (workspace / sub / "exact.txt").write_bytes(b"x" * (READ_PAGE_BYTES - 1) + b"\n")
    r = (await client.call("read_file", {"path": f"{sub}/exact.txt"})).result
    assert (len(r["content"]), r["next_offset"], r["eof"], r["size"]) == (READ_PAGE_BYTES, READ_PAGE_BYTES, True,
                                                                          READ_PAGE_BYTES)
    (workspace / sub / "past.txt").write_bytes(b"x" * READ_PAGE_BYTES + b"\n")
    r = (await client.call("read_file", {"path": f"{sub}/past.txt"})).result
    assert (len(r["content"]), r["next_offset"], r["eof"]) == (READ_PAGE_BYTES, READ_PAGE_BYTES, False)
    r = (await client.call("read_file", {"path": f"{sub}/past.txt", "offset": r["next_offset"]})).result
    assert (r["content"], r["start_line"], r["eof"]) == ("\n", 1, True)
    # a whole line before a longer one: the page ends after the whole line
    (workspace / sub / "two.txt").write_bytes(b"a\n" + b"y" * READ_PAGE_BYTES + b"\n")
    r = (await client.call("read_file", {"path": f"{sub}/two.txt"})).result
    assert (r["content"], r["lines_returned"], r["next_offset"], r["eof"]) == ("a\n", 1, 2, False)


async def test_a_line_longer_than_the_page_cut_between_its_cr_and_lf_loses_no_byte(client: ExecutorClient,
                                                                                   workspace: Path, sub: str) -> None:
    data = b"x" * (READ_PAGE_BYTES - 1) + b"\r\nz"
    (workspace / sub / "f.txt").write_bytes(data)
    first = (await client.call("read_file", {"path": f"{sub}/f.txt"})).result
    assert (first["content"][-2:], first["next_offset"], first["eof"]) == ("x\r", READ_PAGE_BYTES, False)
    second = (await client.call("read_file", {"path": f"{sub}/f.txt", "offset": first["next_offset"]})).result
    assert (second["content"], second["start_line"], second["eof"]) == ("\nz", 1, True)
    assert (first["content"] + second["content"]).encode() == data


# ---------------------------------------------------------------------------- F-EXE-9 names


async def test_names_of_255_bytes_in_two_byte_characters_work_and_256_are_refused_by_every_tool(
        client: ExecutorClient, workspace: Path, sub: str) -> None:
    name = "é" * 127 + "a"  # 255 bytes, 128 characters
    assert len(name.encode()) == 255
    out = (await client.call("edit_file", {"path": f"{sub}/{name}", "mode": "create", "content": "x"})).result
    assert out["changed"] and (workspace / sub / name).read_bytes() == b"x"
    assert (await client.call("read_file", {"path": f"{sub}/{name}"})).result["content"] == "x"
    (await client.call("patch_file", {"path": f"{sub}/{name}", "patch": "@@\n-x\n+y\n"}))
    assert (workspace / sub / name).read_bytes() == b"y"
    long = "é" * 128  # 256 bytes, 128 characters
    calls = [("read_file", {}), ("view_image", {}), ("patch_file", {"patch": "@@\n+a\n"}),
             ("edit_file", {"mode": "create", "content": "x"}), ("edit_file", {"mode": "rewrite", "content": "x"})]
    for tool, args in calls:
        for path in (f"{sub}/{long}", f"{sub}/{long}/below.txt"):
            err = await fails("INVALID_ARGUMENT", client.call(tool, {"path": path, **args}))
            assert str(err).endswith(": a file name is longer than 255 bytes"), (tool, str(err))
    assert sorted(p.name for p in (workspace / sub).iterdir()) == [name]
