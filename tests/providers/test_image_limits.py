"""Images a service would refuse are named in the request, not sent (F-EXE-6, F-MOD-2).

An image stays in the Working Context and goes with every later request of the session, so one the
service refuses (not whole, past 8000 pixels a side, past its limits of bytes or images per
request, or past 2000 pixels a side in a request of more than 20 images on Anthropic) failed each
of them until it was snipped. Such an image is now a text naming it and why; the rest of the
request goes as before. Through the official SDKs against the loopback servers."""

from __future__ import annotations

import base64
import hashlib
import json
import re

import pytest

from events import types as t
from runtime.providers.compile import ANTHROPIC_IMAGES, IMAGE_WITHHELD, OPENAI_IMAGES, Image, prepare

from ..files.sample_images import ANIMATED_GIF, JPEG, gif_of_frames, png_of_size, png_sized, tiny_png
from .conftest import PROTOCOLS, Ctx, Deltas
from .scripts import reply
from .test_images import images_in


def stored(artifacts, data: bytes) -> t.ImagePart:
    return t.ImagePart(artifacts.store.put(data), "image/png")


WITHHELD = re.compile(r"\[image [0-9a-f]{64} not sent: [^\]]*\]")


def withheld_ids(diagnostics: dict) -> list[str]:
    """The artifact ids a result's diagnostics say were not sent."""
    return [w["artifact_id"] for w in diagnostics.get("images_withheld", [])]


def withheld_texts(body: dict) -> list[str]:
    """The texts naming an image not sent, in the order of the request body's strings."""
    out: list[str] = []

    def walk(o):
        if isinstance(o, dict):
            o = list(o.values())
        if isinstance(o, list):
            for v in o:
                walk(v)
        elif isinstance(o, str):
            out.extend(WITHHELD.findall(o))

    walk(body)
    return out


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_image_no_service_takes_is_named_not_sent(protocol, server, make, artifacts):
    # Stored by an earlier build, or by hand: the input route and view_image refuse these now,
    # but one already in a session's log was sent with every request of it.
    provider = make(protocol, load_image=artifacts.load)
    cut = stored(artifacts, tiny_png(1)[:-12])
    magic_only = stored(artifacts, b"\x89PNG\r\n\x1a\n" + b"\x00" * 32)
    wide = stored(artifacts, png_sized(9000, 20))
    jpeg_said_png = stored(artifacts, JPEG)  # (an image part saying image/png over a JPEG's bytes)
    whole = stored(artifacts, tiny_png(2))
    page = t.ImagePart(artifacts.store.put(b"<html>" + b"x" * 1000 + b"</html>"), "text/html")  # (not loaded)
    ctx = (Ctx().user("what are these?", cut, magic_only, jpeg_said_png)
           .response("", ("v1", "view_image", {"path": "w.png"}))
           .result("v1", "the image", wide, page, whole))
    server.push(reply(protocol, text="two pictures"))
    result = await provider.stream(ctx.request(), Deltas())
    body = server.bodies[0]
    assert [base64.b64decode(s) for s in images_in(protocol, body)] == [JPEG, tiny_png(2)]
    assert withheld_texts(body) == [
        IMAGE_WITHHELD.format(id=cut.artifact_id, why="the image is truncated (no IEND chunk)"),
        IMAGE_WITHHELD.format(id=magic_only.artifact_id, why="the image has no IHDR header"),
        IMAGE_WITHHELD.format(id=wide.artifact_id, why="the image is 9000x20 pixels; each side may be at most 8000"),
        IMAGE_WITHHELD.format(id=page.artifact_id, why="it is recorded as 'text/html', "
                                                       "none of image/gif, image/jpeg, image/png, image/webp"),
    ]
    # sent under the type its bytes say, not the part's
    sent = json.dumps(body)
    assert ('"media_type": "image/jpeg"' in sent) if protocol == "anthropic" else ("data:image/jpeg;base64," in sent)
    assert result.diagnostics["images"] == 2
    assert withheld_ids(result.diagnostics) == [cut.artifact_id, magic_only.artifact_id, wide.artifact_id,
                                                page.artifact_id]
    assert result.diagnostics["images_withheld"][0] == {"artifact_id": cut.artifact_id,
                                                        "why": "the image is truncated (no IEND chunk)"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_animated_gif_is_named_not_sent_on_the_openai_protocols(protocol, server, make, artifacts):
    # OpenAI takes GIFs that are not animated only; an animated one in the context failed the
    # request, and every later one of the session. A still GIF goes as before, and Anthropic takes both.
    provider = make(protocol, load_image=artifacts.load)
    still, two, looping = gif_of_frames(1), gif_of_frames(2), ANIMATED_GIF
    parts = {data: t.ImagePart(artifacts.store.put(data), "image/gif") for data in (still, two, looping)}
    ctx = (Ctx().user("what are these?", parts[still], parts[two])
           .response("", ("v1", "view_image", {"path": "a.gif"}))
           .result("v1", "the image", parts[looping]))
    for _ in range(2):  # (the same request again: each still named, from the kept finding)
        server.push(reply(protocol, text="pictures"))
        result = await provider.stream(ctx.request(), Deltas())
    assert len(server.bodies) == 2 and artifacts.load.measurements == 3
    for body in server.bodies:
        sent = [base64.b64decode(s) for s in images_in(protocol, body)]
        if protocol == "anthropic":
            assert sent == [still, two, looping] and withheld_texts(body) == []
            continue
        assert sent == [still]
        assert withheld_texts(body) == [
            IMAGE_WITHHELD.format(id=parts[two].artifact_id,
                                  why="the image is an animated GIF (2 frames); OpenAI takes only still GIFs"),
            IMAGE_WITHHELD.format(id=parts[looping].artifact_id,
                                  why="the image is an animated GIF (2 frames); OpenAI takes only still GIFs"),
        ]
    if protocol == "anthropic":
        assert result.diagnostics["images"] == 3 and "images_withheld" not in result.diagnostics
        return
    assert result.diagnostics["images"] == 1
    assert result.diagnostics["images_withheld"] == [  # (the newest first, as the limits are applied)
        {"artifact_id": parts[looping].artifact_id,
         "why": "the image is an animated GIF (2 frames); OpenAI takes only still GIFs"},
        {"artifact_id": parts[two].artifact_id,
         "why": "the image is an animated GIF (2 frames); OpenAI takes only still GIFs"},
    ]


async def test_an_animated_gif_takes_no_room_of_the_openai_limits():
    # Withheld before the count: 500 still images and an animated one newer than them are all
    # sent but the animated one (compiled without a server).
    blobs: dict[str, bytes] = {}

    def part(data: bytes, mime: str = "image/png") -> t.ImagePart:
        aid = hashlib.sha256(data).hexdigest()
        blobs[aid] = data
        return t.ImagePart(aid, mime)

    async def load(aid: str) -> bytes:
        return blobs[aid]

    tiny = [part(tiny_png(i % 256) + bytes([i // 256])) for i in range(500)]
    animated = part(gif_of_frames(3), "image/gif")
    compiled = await prepare(Ctx().user("see", *tiny, animated).request(), load_image=load, images=True,
                             limits=OPENAI_IMAGES)
    images = [p for e in compiled.entries for p in e.parts if isinstance(p, Image)]
    assert len(images) == 500 and withheld_ids(compiled.diagnostics) == [animated.artifact_id]
    assert compiled.diagnostics["images_withheld"][0]["why"] == (
        "the image is an animated GIF (3 frames); OpenAI takes only still GIFs")
    anthropic = await prepare(Ctx().user("see", tiny[0], animated).request(), load_image=load, images=True,
                              limits=ANTHROPIC_IMAGES)
    assert [p.frames for e in anthropic.entries for p in e.parts if isinstance(p, Image)] == [1, 3]


async def test_anthropic_bytes_of_one_image_at_its_edge(server, make, artifacts):
    # 5 MiB of base64 an image: 3,932,160 bytes before it.
    at, past = png_of_size(ANTHROPIC_IMAGES.each, 1), png_of_size(ANTHROPIC_IMAGES.each + 1, 2)
    assert len(base64.b64encode(at)) == 5 * 1024 * 1024 < len(base64.b64encode(past))
    parts = stored(artifacts, past), stored(artifacts, at)
    for protocol in ("anthropic", "openai-chat"):
        server.push(reply(protocol, text="ok"))
        result = await make(protocol, load_image=artifacts.load).stream(Ctx().user("see", *parts).request(), Deltas())
        sent = [base64.b64decode(s) for s in images_in(protocol, server.bodies[-1])]
        if protocol == "anthropic":
            assert sent == [at]
            assert withheld_texts(server.bodies[-1]) == [IMAGE_WITHHELD.format(
                id=parts[0].artifact_id, why="it is 3932161 bytes; Anthropic takes at most 3932160 bytes an image")]
            assert withheld_ids(result.diagnostics) == [parts[0].artifact_id]
        else:
            assert sent == [past, at] and "images_withheld" not in result.diagnostics


async def test_anthropic_images_of_one_request_at_their_edges(server, make, artifacts):
    provider = make("anthropic", load_image=artifacts.load)
    tiny = [stored(artifacts, tiny_png(i)) for i in range(101)]

    async def sent_of(*parts: t.ImagePart) -> tuple[list[bytes], list[str]]:
        server.push(reply("anthropic", text="ok"))
        await provider.stream(Ctx().user("see", *parts).request(), Deltas())
        return [base64.b64decode(s) for s in images_in("anthropic", server.bodies[-1])], withheld_texts(server.bodies[-1])

    # 100 images a request: exactly 100 go; of 101, the oldest is named
    assert (await sent_of(*tiny[:100]))[0] == [tiny_png(i) for i in range(100)]
    sent, named = await sent_of(*tiny)
    assert sent == [tiny_png(i) for i in range(1, 101)]
    assert named == [IMAGE_WITHHELD.format(id=tiny[0].artifact_id,
                                           why="Anthropic takes at most 100 images a request, and newer images of the context fill them")]

    # 18 MiB of images a request (24 MiB of base64): exactly that goes; one byte more, the oldest is named
    four = [stored(artifacts, png_of_size(ANTHROPIC_IMAGES.each, 10 + i)) for i in range(4)]
    room = ANTHROPIC_IMAGES.total - 4 * ANTHROPIC_IMAGES.each
    fits, spills = stored(artifacts, png_of_size(room, 20)), stored(artifacts, png_of_size(room + 1, 21))
    sent, named = await sent_of(fits, *four)
    assert len(sent) == 5 and named == []
    sent, named = await sent_of(spills, *four)
    assert len(sent) == 4 and named == [IMAGE_WITHHELD.format(
        id=spills.artifact_id, why=f"Anthropic takes at most {ANTHROPIC_IMAGES.total} bytes of images a request, "
                                   f"and with the newer images of the context it would be {ANTHROPIC_IMAGES.total + 1}")]


async def test_anthropic_more_than_20_images_leave_out_the_oldest_wider_than_2000_pixels(server, make, artifacts):
    # More than 20 images in a request: Anthropic refuses the whole request if a side of one is
    # past 2000 pixels. The oldest such images are named until 20 remain; exactly 2000 goes.
    wide, tall, square = (stored(artifacts, png_sized(*size)) for size in ((2001, 10), (10, 2001), (2000, 2000)))
    tiny = [stored(artifacts, tiny_png(i)) for i in range(19)]
    bodies = {}
    for protocol in PROTOCOLS:
        provider = make(protocol, load_image=artifacts.load)
        for name, parts in (("twenty", (wide, tall, *tiny[:17], square)), ("twenty-two", (wide, tall, *tiny, square))):
            server.push(reply(protocol, text="ok"))
            ctx = Ctx().user("see", *parts[:10]).response("seen").user("and these", *parts[10:])
            result = await provider.stream(ctx.request(), Deltas())
            bodies[protocol, name] = (len(images_in(protocol, server.bodies[-1])), withheld_texts(server.bodies[-1]),
                                      withheld_ids(result.diagnostics))
    assert bodies["anthropic", "twenty"] == (20, [], [])
    assert bodies["anthropic", "twenty-two"] == (20, [
        IMAGE_WITHHELD.format(id=wide.artifact_id, why="it is 2001x10 pixels; in a request of more than 20 images "
                                                       "Anthropic takes at most 2000 a side"),
        IMAGE_WITHHELD.format(id=tall.artifact_id, why="it is 10x2001 pixels; in a request of more than 20 images "
                                                       "Anthropic takes at most 2000 a side"),
    ], [wide.artifact_id, tall.artifact_id])
    for protocol in ("openai-chat", "openai-responses"):  # (OpenAI has no such rule: all go)
        assert bodies[protocol, "twenty"] == (20, [], []) and bodies[protocol, "twenty-two"] == (22, [], [])


async def test_openai_images_of_one_request_at_their_edges():
    # 500 images and 50 MB of image bytes a request (compiled without a server: 67 MB of base64).
    blobs: dict[str, bytes] = {}

    def part(data: bytes) -> t.ImagePart:
        aid = hashlib.sha256(data).hexdigest()
        blobs[aid] = data
        return t.ImagePart(aid, "image/png")

    async def load(aid: str) -> bytes:
        return blobs[aid]

    async def kept(*parts: t.ImagePart) -> tuple[int, list[str]]:
        compiled = await prepare(Ctx().user("see", *parts).request(), load_image=load, images=True, limits=OPENAI_IMAGES)
        images = [p for e in compiled.entries for p in e.parts if isinstance(p, Image)]
        return len(images), withheld_ids(compiled.diagnostics)

    tiny = [part(tiny_png(i % 256) + bytes([i // 256])) for i in range(501)]  # (a byte after IEND: each its own)
    assert await kept(*tiny[:500]) == (500, [])
    assert await kept(*tiny) == (500, [tiny[0].artifact_id])
    each = OPENAI_IMAGES.total // 10
    ten = [part(png_of_size(each, i)) for i in range(10)]
    over = part(png_of_size(each + 1, 99))
    assert await kept(*ten) == (10, [])
    assert await kept(over, *ten[1:]) == (9, [over.artifact_id])
    assert await kept(*ten[:9], over) == (9, [ten[0].artifact_id])  # (the newest kept first)
