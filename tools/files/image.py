"""``view_image`` (F-EXE-6): recognise an image by its magic bytes; the extension is irrelevant.

Recognised (anything else is NOT_AN_IMAGE, an empty file included)::

    image/png    89 50 4E 47 0D 0A 1A 0A
    image/jpeg   FF D8 FF
    image/gif    "GIF87a" | "GIF89a"
    image/webp   "RIFF" <4-byte size> "WEBP"

The magic bytes type an artifact (:func:`sniff`); an image sent to a model must also be whole
(:func:`fault`, :func:`measure`): its structure read far enough to know its width and height and
that it ends where its format says (a PNG's chunks up to ``IEND``, an ``IDAT`` on the way and
each critical chunk's CRC-32 checked, a JPEG's segments up to its scan and an ``EOI`` after it, a
GIF's blocks up to its trailer, a WebP's RIFF size within the file and its chunks within that
size), else NOT_AN_IMAGE naming what is wrong. A provider refuses a truncated image or one of no
pixels, and the image is sent again with every later request of the session, so each of them
would fail. The walk also counts a GIF's frames (:class:`Measured`): a GIF of more than one is
animated, which some services refuse.
Each side at most :data:`MAX_IMAGE_SIDE` pixels (the strictest of the three wire protocols:
Anthropic refuses a larger one), else TOO_LARGE naming its size.

At most MAX_IMAGE_BYTES (5 MiB; exactly 5 MiB is fine, one byte more is TOO_LARGE). Path rules
are read_file's: a regular file inside the workspace (symlinks followed only inside it).
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from .errors import FileToolError

MIME_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
MAX_IMAGE_SIDE = 8000  # pixels, width and height each


def sniff(data: bytes) -> str | None:
    """The MIME type for these leading bytes, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp"
    return None


class Measured(NamedTuple):
    """What a walk of a whole image found: its type by its bytes, its size in pixels, and how many
    frames it holds — counted for a GIF (a GIF of more than one is animated); 1 for the other
    types, whose frames are not counted."""

    mime: str
    width: int
    height: int
    frames: int = 1


class Malformed(ValueError):
    """What is wrong with an image's structure (the message completes "the image ...")."""


class Oversized(Malformed):
    """A whole image with a side past :data:`MAX_IMAGE_SIDE` (the message completes "the image ...")."""


def _png(data: bytes) -> tuple[int, int, int]:
    if len(data) < 33 or data[12:16] != b"IHDR" or data[8:12] != b"\x00\x00\x00\x0d":
        raise Malformed("has no IHDR header")
    width, height = struct.unpack(">II", data[16:24])
    at, pixels = 8, False
    while True:  # (its chunks, to IEND: a truncated PNG ends inside one)
        if at + 8 > len(data):
            raise Malformed("is truncated (no IEND chunk)")
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        at += 12 + length
        if at > len(data):
            raise Malformed(f"is truncated (inside its {kind.decode('latin-1')!r} chunk)")
        crc = int.from_bytes(data[at - 4:at], "big")
        if not kind[0] & 0x20 and zlib.crc32(data[at - length - 8:at - 4]) != crc:
            # (a critical chunk, its type's first letter upper case: a decoder stops there, as
            # libpng does; an ancillary chunk's bad CRC is only a warning, the chunk skipped)
            raise Malformed(f"is corrupt (its {kind.decode('latin-1')!r} chunk fails its CRC-32 check)")
        pixels = pixels or kind == b"IDAT"
        if kind == b"IEND":
            if not pixels:
                raise Malformed("has no image data (no IDAT chunk before IEND)")
            return width, height, 1


_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start of frame (not DHT, JPG, DAC)


def _jpeg(data: bytes) -> tuple[int, int, int]:
    at, size = 2, None
    while True:  # (its segments, to the first scan)
        while at < len(data) and data[at] == 0xFF and at + 1 < len(data) and data[at + 1] == 0xFF:
            at += 1  # (fill bytes)
        if at + 4 > len(data):
            raise Malformed("is truncated (before its scan)")
        if data[at] != 0xFF:
            raise Malformed(f"is damaged (no segment marker at byte {at})")
        marker = data[at + 1]
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:
            at += 2
            continue
        length = struct.unpack(">H", data[at + 2:at + 4])[0]
        if marker in _SOF:
            if length < 8 or at + 9 > len(data):
                raise Malformed("is truncated (in its frame header)")
            height, width = struct.unpack(">HH", data[at + 5:at + 9])
            size = (width, height)
        at += 2 + length
        if marker == 0xDA:
            if size is None:
                raise Malformed("has no frame header before its scan")
            if at > len(data) or data.rfind(b"\xff\xd9") < at:
                raise Malformed("is truncated (no end-of-image marker after its scan)")
            return (*size, 1)
        if marker == 0xD9:
            raise Malformed("has no scan")
        if at > len(data):
            raise Malformed("is truncated (before its scan)")


def _gif(data: bytes) -> tuple[int, int, int]:
    if len(data) < 13:
        raise Malformed("is truncated (in its header)")
    width, height, flags = struct.unpack("<HHB", data[6:11])
    at = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    frames = 0

    def sub_blocks(at: int) -> int:
        while True:
            if at >= len(data):
                raise Malformed("is truncated (no trailer)")
            if data[at] == 0:
                return at + 1
            at += 1 + data[at]

    while True:  # (its blocks, to the trailer)
        if at >= len(data):
            raise Malformed("is truncated (no trailer)")
        block = data[at]
        if block == 0x3B:
            if not frames:
                raise Malformed("holds no frame")
            return width, height, frames
        if block == 0x21:
            at = sub_blocks(at + 2)
        elif block == 0x2C:
            if at + 10 > len(data):
                raise Malformed("is truncated (in a frame's descriptor)")
            local = data[at + 9]
            at += 10 + (3 << ((local & 7) + 1) if local & 0x80 else 0)
            at = sub_blocks(at + 1)  # (past the LZW code size)
            frames += 1
        else:
            raise Malformed(f"is damaged (an unknown block 0x{block:02x})")


def _webp(data: bytes) -> tuple[int, int, int]:
    riff = struct.unpack("<I", data[4:8])[0] + 8
    if riff > len(data):
        raise Malformed(f"is truncated ({len(data)} bytes of the {riff} its RIFF header declares)")
    if len(data) < 30:
        raise Malformed("is truncated (in its first chunk)")
    at = 12
    past = f"is truncated (its chunks run past the {riff} bytes its RIFF header declares)"
    while at < riff:  # (its chunks, each within the RIFF size; a decoder reads no further)
        if at + 8 > riff:
            if at == 12:  # (the RIFF size ends inside the first chunk's header)
                raise Malformed(past)
            break  # (fewer bytes than a chunk header after the chunks: libwebp stops at the image chunk)
        size = struct.unpack("<I", data[at + 4:at + 8])[0]
        if at + 8 + size > riff:
            raise Malformed(past)
        at += 8 + size + (size & 1)
    kind = data[12:16]
    if kind == b"VP8X":
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return w, h, 1
    if kind == b"VP8L":
        if data[20] != 0x2F:
            raise Malformed("is damaged (a lossless chunk without its signature)")
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1, 1
    if kind == b"VP8 ":
        if data[23:26] != b"\x9d\x01\x2a":
            raise Malformed("is damaged (a lossy chunk without its start code)")
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF, 1
    raise Malformed(f"is damaged (its first chunk is {kind!r}, not VP8, VP8L or VP8X)")


_READERS = {"image/png": _png, "image/jpeg": _jpeg, "image/gif": _gif, "image/webp": _webp}


def examine(data: bytes) -> Measured:
    """The MIME type, width, height and frames (a GIF's, counted) of a whole image (see the module
    docstring); raises :class:`Malformed` for one that is not a whole PNG, JPEG, GIF or WebP of at
    least one pixel. Its sides are not held to :data:`MAX_IMAGE_SIDE` here."""
    mime = sniff(data)
    if mime is None:
        raise Malformed("is not a PNG, JPEG, GIF or WebP image")
    width, height, frames = _READERS[mime](data)
    if not width or not height:
        raise Malformed(f"has no pixels ({width}x{height})")
    return Measured(mime, width, height, frames)


def measure(data: bytes) -> Measured:
    """What :func:`examine` finds of an image a model can be sent: whole and at most
    :data:`MAX_IMAGE_SIDE` a side; raises :class:`Malformed` (or its :class:`Oversized`) naming
    what is wrong. An animated GIF is whole: whether a service takes one is the service's rule
    (``runtime.providers.compile.ImageLimits``)."""
    found = examine(data)
    if found.width > MAX_IMAGE_SIDE or found.height > MAX_IMAGE_SIDE:
        raise Oversized(f"is {found.width}x{found.height} pixels; each side may be at most {MAX_IMAGE_SIDE}")
    return found


def fault(data: bytes) -> tuple[str, str] | None:
    """Why ``data`` is not an image a model can be sent (``(code, what is wrong)``, the message
    completing "the image …"), or None."""
    try:
        measure(data)
    except Oversized as exc:
        return "TOO_LARGE", str(exc)
    except Malformed as exc:
        return "NOT_AN_IMAGE", str(exc)
    return None


def image_mime(data: bytes, shown: str) -> str:
    """The MIME type of an image a model can be sent; FileToolError NOT_AN_IMAGE or TOO_LARGE."""
    mime = sniff(data)
    if mime is None:
        raise FileToolError("NOT_AN_IMAGE", f"{shown}: not a PNG, JPEG, GIF or WebP image")
    wrong = fault(data)
    if wrong is not None:
        code, what = wrong
        raise FileToolError(code, f"{shown}: the {mime.split('/')[1].upper()} image {what}")
    return mime
