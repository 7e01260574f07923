"""``view_image`` (F-EXE-6): recognise an image by its magic bytes; the extension is irrelevant.

Recognised (anything else is NOT_AN_IMAGE, an empty file included)::

    image/png    89 50 4E 47 0D 0A 1A 0A
    image/jpeg   FF D8 FF
    image/gif    "GIF87a" | "GIF89a"
    image/webp   "RIFF" <4-byte size> "WEBP"

At most MAX_IMAGE_BYTES (5 MiB; exactly 5 MiB is fine, one byte more is TOO_LARGE). Path rules
are read_file's: a regular file inside the workspace (symlinks followed only inside it).
"""

from __future__ import annotations

from .errors import FileToolError

MIME_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


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


def image_mime(data: bytes, shown: str) -> str:
    mime = sniff(data)
    if mime is None:
        raise FileToolError("NOT_AN_IMAGE", f"{shown}: not a PNG, JPEG, GIF or WebP image")
    return mime
