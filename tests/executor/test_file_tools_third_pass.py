"""A third pass over the file tools (F-EXE-2..6, F-EXE-9) as a client sees them: every call crosses
the real ``lens executor serve`` over gRPC.

``test_file_tools_acceptance.py``, ``test_file_tools_second_pass.py`` and the rest of
tests/executor and tests/files are not repeated; these are the edges they left: a PNG whose
critical chunk fails its CRC (a decoder refuses it; an ancillary chunk's is only a warning), an
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

from tests.files.sample_images import PNG

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
