"""Small whole images of each type view_image takes (and some that are not whole), for the tests
of images: each decodes in a browser. ``png`` and ``png_of_size`` come from the providers' tests."""

from __future__ import annotations

import base64
import struct
import zlib

from tests.providers.conftest import png_of_size, tiny_png

__all__ = ["ANIMATED_GIF", "GIF", "JPEG", "PNG", "WEBP_ANIMATED", "WEBP_EXTENDED", "WEBP_LOSSLESS", "WEBP_LOSSY",
           "WHOLE", "gif_of_frames", "png_of_size", "png_saying", "png_sized"]

PNG = tiny_png(5)
# 16x16 baseline JFIF
JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAQEAAQABAAD/2wBDAAMCAgICAgMCAgIDAwMDBAYEBAQEBAgGBgUGCQgKCgkICQkKDA8MCgsOCwkJDRENDg8QEBEQCgwSExIQ"
    "Ew8QEBD/2wBDAQMDAwQDBAgEBAgQCwkLEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBD/wAARCAAQABAD"
    "ASIAAhEBAxEB/8QAFgABAQEAAAAAAAAAAAAAAAAABwQF/8QAJBAAAQQBBAICAwAAAAAAAAAAAQIDBAYFBwgSExEiABQJMTL/xAAVAQEBAAAAAAAA"
    "AAAAAAAAAAAABv/EACMRAAECBQMFAAAAAAAAAAAAAAECEQMEBQYhABIxFRZhgeH/2gAMAwEAAhEDEQA/ABSm0mobc8HmExLUlRzzEWPkJWW+ulrs"
    "aUVAseUgslSlH9LKuPryIKuWPZdskzXmm3fX5m2nF4GlVxx/HOpx4ks51+MiU/Iaad7UcUo4tILoS4kqcWkezS0hO/HvuRp0rO6hWnWO1UisZVuF"
    "i4GFeyEpmGepa5S5SWVPuciFKRFLgSrwetnyPIB+Vb4N9mKhQMzo5po9XLdDs9d6ZVix2VEhiL9kuNPxw2gEKcDQ/rs8AuA8VAe0vdl7VOYn+27f"
    "lGAUgmITjbhSmCg3BYlyeWDkMolvw4KOp1KM6iCNvngZHwetf//Z")
GIF = base64.b64decode("R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw==")  # 1x1
_FRAME = GIF[GIF.index(b"\x21\xf9"):-1]  # (its graphic control extension and frame)
ANIMATED_GIF = GIF[:19] + b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00" + _FRAME + _FRAME + b";"
WEBP_LOSSY = base64.b64decode("UklGRiIAAABXRUJQVlA4IBYAAAAwAQCdASoBAAEADsD+JaQAA3AAAAA=") + b"\x00"  # VP8, 1x1
WEBP_LOSSLESS = base64.b64decode("UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA==")  # VP8L, 1x1
WEBP_EXTENDED = base64.b64decode(  # VP8X with alpha, 16x16
    "UklGRqgBAABXRUJQVlA4WAoAAAAQAAAADwAADwAAQUxQSMMAAAABJ6KokSTleucYX+ffKpmImP90cY3gJjDi4Yt3MsjBEVyDKzDosHgVjnhRNcEI"
    "DAJPkqBqsFUZHNa2bUYvTsZ2PLbtd/uvKa4hov9J0f2PkPe6REkkGzolkTTzFG0Ox9PlFiD0CxS+kOGDtxoynjaCfx0pfk52CPuInrOR75lzRugy"
    "gtv4zEiy90UwfSD9NheMITJWLaXWayO8XeOlWRXVnIGk2W6WdYoYMQ+KqixQNPowgt+6a1BSKbUtz+lUFAoBAAAAVlA4IL4AAACQAgCdASoQABAA"
    "AwA0JbACdDBPCIUMfAMdCCz96AD+/XSg/QKbH4r3Q3ycN/bSDK/T/zVo4u6nvclvG/SqxWOuup+XhN9BojvaW+Tv+MvxvX/hr/o/5Qns9LtmX/+q"
    "Kdl/yWznhuasl7nkxvSTI4xf3Y85VSB/lU/8Ofj/b9JrA+ifvIOYZm2x1RP/dhfmsf5diuSfR7+z+r/+HR3zEo/+XM/B+vkYw73Pzx+ROaAB/ZoB"
    "SzEs3rzZe6qsAAAA")
WEBP_ANIMATED = base64.b64decode(  # VP8X with an animation of one lossless frame, 1x1
    "UklGRlIAAABXRUJQVlA4WAoAAAASAAAAAAAAAAAAQU5JTQYAAAD/////AABBTk1GJgAAAAAAAAAAAAAAAAAAAGQAAABWUDhMDQAAAC8AAAAQBxAR"
    "EYiI/gcA")
# name, bytes, MIME type, width, height
WHOLE = [("shot.png", PNG, "image/png", 1, 1), ("photo.jpg", JPEG, "image/jpeg", 16, 16),
         ("dot.gif", GIF, "image/gif", 1, 1), ("anim.gif", ANIMATED_GIF, "image/gif", 1, 1),
         ("lossy.webp", WEBP_LOSSY, "image/webp", 1, 1), ("lossless.webp", WEBP_LOSSLESS, "image/webp", 1, 1),
         ("alpha.webp", WEBP_EXTENDED, "image/webp", 16, 16), ("anim.webp", WEBP_ANIMATED, "image/webp", 1, 1)]


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_saying(text: bytes) -> bytes:
    """A whole 1x1 PNG holding ``text`` in a ``tEXt`` chunk (a canary a test looks for)."""
    return PNG[:33] + _chunk(b"tEXt", b"Comment\0" + text) + PNG[33:]


def png_sized(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` pixels over one IDAT of a few bytes (a
    decoder finds it short; its structure is whole)."""
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(b"\0\0\0\0")) + _chunk(b"IEND", b""))


def gif_of_frames(frames: int) -> bytes:
    """A whole 1x1 GIF of ``frames`` frames (each walked block by block when it is measured)."""
    return GIF[:19] + _FRAME * frames + b";"
