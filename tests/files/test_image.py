"""view_image (F-EXE-6): magic bytes decide, the image must be whole and of at most 8000 pixels a
side, the 5 MiB edge, path rules as read_file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.files import LIMITS, Workspace
from tools.files.image import MAX_IMAGE_SIDE, Measured, measure

from .helpers import fails
from .sample_images import (ANIMATED_GIF, GIF, JPEG, PNG, WEBP_ANIMATED, WEBP_LOSSLESS, WHOLE, gif_of_frames,
                            png_of_size, png_sized)

MAX = LIMITS["MAX_IMAGE_BYTES"]


@pytest.mark.parametrize("name,data,mime", [(n, d, m) for n, d, m, _, _ in WHOLE] + [
    ("photo.txt", JPEG, "image/jpeg"),      # the extension is irrelevant
    ("anim.jpg", GIF, "image/gif"),
    ("截图.png", WEBP_LOSSLESS, "image/webp"),
    ("max.png", png_sized(MAX_IMAGE_SIDE, MAX_IMAGE_SIDE), "image/png"),
])
def test_magic_bytes_decide(ws: Workspace, root: Path, name: str, data: bytes, mime: str) -> None:
    (root / name).write_bytes(data)
    assert ws.view_image(name) == (data, mime)


@pytest.mark.parametrize("data,found", [
    (GIF, Measured("image/gif", 1, 1, 1)),
    (gif_of_frames(1), Measured("image/gif", 1, 1, 1)),   # the edge: one frame is a still GIF
    (gif_of_frames(2), Measured("image/gif", 1, 1, 2)),   # two: animated
    (ANIMATED_GIF, Measured("image/gif", 1, 1, 2)),       # (with its looping extension)
    (gif_of_frames(300), Measured("image/gif", 1, 1, 300)),
    (PNG, Measured("image/png", 1, 1, 1)),
    (JPEG, Measured("image/jpeg", 16, 16, 1)),
    (WEBP_ANIMATED, Measured("image/webp", 1, 1, 1)),      # (a WebP's frames are not counted)
])
def test_the_walk_counts_a_gifs_frames(data: bytes, found: Measured) -> None:
    # A service that takes only still GIFs is told apart by this count (runtime.providers.compile).
    assert measure(data) == found


@pytest.mark.parametrize("data", [b"", b"hello", b"\x89PNG\r\n", b"RIFF\x00\x00\x00\x00WAVEfmt ",
                                  b"GIF88a", b"<svg xmlns='http://www.w3.org/2000/svg'/>", b"BM\x00\x00"])
def test_not_an_image(ws: Workspace, root: Path, data: bytes) -> None:
    (root / "x.png").write_bytes(data)
    fails("NOT_AN_IMAGE", ws.view_image, "x.png")


@pytest.mark.parametrize("data,said", [
    # magic bytes alone, or an image cut short: a provider refuses it, with every later request
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "the PNG image has no IHDR header"),
    (PNG[:-12], "the PNG image is truncated (no IEND chunk)"),
    (PNG[:-20], "the PNG image is truncated (inside its 'IDAT' chunk)"),
    (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "the JPEG image is truncated (before its scan)"),
    (JPEG[:-2], "the JPEG image is truncated (no end-of-image marker after its scan)"),
    (JPEG[:len(JPEG) // 2], "the JPEG image is truncated (before its scan)"),
    (b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "the GIF image holds no frame"),
    (GIF[:-1], "the GIF image is truncated (no trailer)"),
    (WEBP_LOSSLESS[:-1], "the WEBP image is truncated (33 bytes of the 34 its RIFF header declares)"),
    (b"RIFF\x24\x00\x00\x00WEBPVP8 ", "the WEBP image is truncated (16 bytes of the 44 its RIFF header declares)"),
    (png_sized(0, 5), "the PNG image has no pixels (0x5)"),
])
def test_an_image_that_is_not_whole_is_not_an_image(ws: Workspace, root: Path, data: bytes, said: str) -> None:
    (root / "x.png").write_bytes(data)
    assert fails("NOT_AN_IMAGE", ws.view_image, "x.png").message == f"x.png: {said}"


@pytest.mark.parametrize("width,height", [(MAX_IMAGE_SIDE + 1, 1), (1, MAX_IMAGE_SIDE + 1), (1_000_000, 1_000_000)])
def test_an_image_of_enormous_declared_size_is_too_large(ws: Workspace, root: Path, width: int, height: int) -> None:
    (root / "huge.png").write_bytes(png_sized(width, height))
    err = fails("TOO_LARGE", ws.view_image, "huge.png")
    assert err.message == (f"huge.png: the PNG image is {width}x{height} pixels; "
                           f"each side may be at most {MAX_IMAGE_SIDE}")


@pytest.mark.parametrize("extra", [0, 1])
def test_size_edge(ws: Workspace, root: Path, extra: int) -> None:
    data = png_of_size(MAX + extra)
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
    (root / "x.png").mkdir()
    fails("NOT_A_FILE", ws.view_image, "x.png")
    fails("PATH_OUTSIDE_WORKSPACE", ws.view_image, "../x.png")
    fails("INVALID_ARGUMENT", ws.view_image, "x\x00.png")
    (root / "d" / "i.gif").write_bytes(GIF)
    (root / "link.gif").symlink_to("d/i.gif")
    assert ws.view_image("link.gif")[1] == "image/gif"
