"""view_image (F-EXE-6): magic bytes decide, the 5 MiB edge, path rules as read_file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.files import LIMITS, Workspace

from .helpers import fails

MAX = LIMITS["MAX_IMAGE_BYTES"]

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00"
GIF87 = b"GIF87a\x01\x00\x01\x00"
GIF89 = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 "


@pytest.mark.parametrize("name,data,mime", [
    ("shot.png", PNG, "image/png"),
    ("photo.txt", JPEG, "image/jpeg"),      # the extension is irrelevant
    ("old", GIF87, "image/gif"),
    ("anim.jpg", GIF89, "image/gif"),
    ("截图.png", WEBP, "image/webp"),
])
def test_magic_bytes_decide(ws: Workspace, root: Path, name: str, data: bytes, mime: str) -> None:
    (root / name).write_bytes(data)
    assert ws.view_image(name) == (data, mime)


@pytest.mark.parametrize("data", [b"", b"hello", b"\x89PNG\r\n", b"RIFF\x00\x00\x00\x00WAVEfmt ",
                                  b"GIF88a", b"<svg xmlns='http://www.w3.org/2000/svg'/>", b"BM\x00\x00"])
def test_not_an_image(ws: Workspace, root: Path, data: bytes) -> None:
    (root / "x.png").write_bytes(data)
    fails("NOT_AN_IMAGE", ws.view_image, "x.png")


@pytest.mark.parametrize("extra", [0, 1])
def test_size_edge(ws: Workspace, root: Path, extra: int) -> None:
    data = PNG + b"\x00" * (MAX - len(PNG) + extra)
    (root / "big.png").write_bytes(data)
    if extra:
        fails("TOO_LARGE", ws.view_image, "big.png")
    else:
        got, mime = ws.view_image("big.png")
        assert len(got) == MAX and mime == "image/png"


def test_path_rules(ws: Workspace, root: Path) -> None:
    fails("NOT_FOUND", ws.view_image, "missing.png")
    (root / "d").mkdir()
    fails("NOT_A_FILE", ws.view_image, "d")
    fails("PATH_OUTSIDE_WORKSPACE", ws.view_image, "../x.png")
    fails("INVALID_ARGUMENT", ws.view_image, "x\x00.png")
    (root / "d" / "i.gif").write_bytes(GIF89)
    (root / "link.gif").symlink_to("d/i.gif")
    assert ws.view_image("link.gif")[1] == "image/gif"
