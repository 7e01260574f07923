"""Images at request time (F-EXE-6): loaded from the artifact store, verified, base64 in memory."""

from __future__ import annotations

import base64
import hashlib
import os
import sys
from types import FrameType

import msgspec
import pytest

from events import types as t
from runtime.config import ModelConfig
from runtime.providers.base import ProviderError

from tests.files.sample_images import gif_of_frames
from tests.image_walks import image_work_on_this_thread

from .conftest import PROTOCOLS, Ctx, Deltas, image_part, png_of_size, tiny_png
from .scripts import reply


def images_in(protocol: str, body: dict) -> list[str]:
    """The base64 payloads of every image in a request body."""
    out = []

    def walk(o):
        if isinstance(o, dict):
            if o.get("type") == "input_image":
                out.append(o["image_url"].split(",", 1)[1])
            elif o.get("type") == "image_url":
                out.append(o["image_url"]["url"].split(",", 1)[1])
            elif o.get("type") == "image":
                out.append(o["source"]["data"])
            else:
                for v in o.values():
                    walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    walk(body)
    return out


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_image_round_trip_then_a_flipped_byte_is_caught_before_sending(protocol, server, make, artifacts):
    provider = make(protocol, load_image=artifacts.load)
    user_img = image_part(artifacts.store, 1)
    tool_img = image_part(artifacts.store, 2)
    ctx = (Ctx().user("what is this?", user_img)
           .response("", ("v1", "view_image", {"path": "b.png"}))
           .result("v1", "the image", tool_img))
    server.push(reply(protocol, text="two pictures"))
    before = msgspec.json.encode(ctx.items)
    result = await provider.stream(ctx.request(), Deltas())
    assert result.text == "two pictures" and result.diagnostics["images"] == 2
    sent = images_in(protocol, server.bodies[0])
    assert [base64.b64decode(s) for s in sent] == [tiny_png(1), tiny_png(2)]
    assert msgspec.json.encode(ctx.items) == before  # the context still holds only artifact ids
    if protocol == "openai-chat":  # tool images follow the tool message in a user message
        msgs = server.bodies[0]["messages"]
        assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "user"]
        assert msgs[4]["content"][0]["text"] == "Images returned by tool call v1:"
    if protocol == "anthropic":
        result_block = server.bodies[0]["messages"][2]["content"][0]
        assert [b["type"] for b in result_block["content"]] == ["text", "image"]

    # Flip one byte of the stored artifact: the request is refused before anything is sent.
    path = artifacts.store.root / tool_img.artifact_id
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ProviderError) as info:
        await provider.stream(ctx.request(), Deltas())
    assert info.value.code == "ARTIFACT_CORRUPT"
    assert len(server.requests) == 1


async def test_a_loader_that_returns_wrong_bytes_is_caught_too(server, make, artifacts):
    part = image_part(artifacts.store)

    async def lying_loader(artifact_id: str) -> bytes:
        return tiny_png(9)

    provider = make("anthropic", load_image=lying_loader)
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("see", part).request(), Deltas())
    assert info.value.code == "ARTIFACT_CORRUPT" and server.requests == []


async def test_missing_artifact_and_models_without_images(server, make, artifacts):
    missing = t.ImagePart("0" * 64, "image/png")
    provider = make("openai-chat", load_image=artifacts.load)
    with pytest.raises(ProviderError) as info:
        await provider.stream(Ctx().user("see", missing).request(), Deltas())
    assert info.value.code == "ARTIFACT_NOT_FOUND" and server.requests == []
    # A model configured without image input gets a placeholder instead of the bytes.
    text_only = make("openai-chat", load_image=artifacts.load, models={"m1": ModelConfig(id="m1", images=False)})
    server.push(reply("openai-chat", text="ok"))
    await text_only.stream(Ctx().user("see", missing).request(), Deltas())
    content = server.bodies[0]["messages"][1]["content"]
    assert images_in("openai-chat", server.bodies[0]) == []
    assert "omitted" in content[1]["text"]


async def test_a_loader_that_fails_reads_as_a_missing_artifact_and_a_defect_as_itself(server, make, artifacts):
    # The store's failures (its typed ArtifactError, an OSError of the disk) say the image cannot
    # be loaded; anything else out of the loader is a defect, not a missing artifact.
    part = image_part(artifacts.store)

    async def failing_disk(artifact_id: str) -> bytes:
        raise OSError(5, "Input/output error")

    with pytest.raises(ProviderError) as info:
        await make("openai-chat", load_image=failing_disk).stream(Ctx().user("see", part).request(), Deltas())
    assert info.value.code == "ARTIFACT_NOT_FOUND" and "Input/output error" in info.value.message
    assert server.requests == []

    async def defect(artifact_id: str) -> bytes:
        raise TypeError("a bug in the loader")

    with pytest.raises(TypeError, match="a bug in the loader"):
        await make("openai-chat", load_image=defect).stream(Ctx().user("see", part).request(), Deltas())
    assert server.requests == []


async def test_an_image_sent_with_every_request_is_hashed_once(server, make, artifacts):
    # An image of a long session is loaded again for every model request: the store's get hashed
    # it, then the compile step hashed it again, at every request. Now the store judges the file
    # once (its verdict holds while the file is unchanged) and the compile step trusts the
    # store's loader; a file damaged since is still refused before anything is sent.
    provider = make("anthropic", load_image=artifacts.load)
    data = png_of_size(3 * 1024 * 1024)
    part = t.ImagePart(artifacts.store.put(data), "image/png")
    ctx = Ctx().user("what is this?", part)
    compile_hashes = 0

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal compile_hashes
        if event == "c_call" and arg is hashlib.sha256:  # (this thread: get runs in a worker thread)
            compile_hashes += 1

    for _ in range(3):
        server.push(reply("anthropic", text="a picture"))
        sys.setprofile(profile)
        try:
            result = await provider.stream(ctx.request(), Deltas())
        finally:
            sys.setprofile(None)
        assert result.text == "a picture" and result.diagnostics["images"] == 1
    assert [base64.b64decode(s) for b in server.bodies for s in images_in("anthropic", b)] == [data] * 3
    assert (artifacts.store.verifications, compile_hashes) == (1, 0)

    path = artifacts.store.root / part.artifact_id
    st = path.stat()
    with open(path, "r+b") as f:  # (one byte changed in place, its mtime put back)
        f.seek(1000)
        f.write(bytes([data[1000] ^ 1]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(ProviderError) as info:
        await provider.stream(ctx.request(), Deltas())
    assert info.value.code == "ARTIFACT_CORRUPT" and len(server.requests) == 3
    assert artifacts.store.verifications == 2


@pytest.mark.parametrize("loader", ["store", "other"])
async def test_an_image_is_measured_and_encoded_off_the_event_loop_and_measured_once(server, make, artifacts, loader):
    # Before a request is sent each image is measured (its structure walked: a GIF of many frames
    # block by block, tens of milliseconds) and base64-encoded. Both ran on the event loop, for
    # every image of every request, holding every session of the daemon meanwhile. They now run
    # in a worker thread, and the store's loader keeps what it found per id (an id is the SHA-256
    # of the bytes the store checked): an image a long session sends with every request is
    # walked once.
    data = gif_of_frames(2000)
    part = t.ImagePart(artifacts.store.put(data), "image/gif")

    async def other_loader(artifact_id: str) -> bytes:  # (a loader that is not the store's)
        return (artifacts.store.root / artifact_id).read_bytes()

    # (Anthropic's protocol: the OpenAI ones take no animated GIF, and name it instead of sending it)
    provider = make("anthropic", load_image=artifacts.load if loader == "store" else other_loader)
    ctx = Ctx().user("what is this?", part)
    for _ in range(3):
        server.push(reply("anthropic", text="a picture"))
        with image_work_on_this_thread(data) as on_loop:
            result = await provider.stream(ctx.request(), Deltas())
        assert on_loop == []
        assert result.text == "a picture" and result.diagnostics["images"] == 1
    sent = [s for b in server.bodies for s in images_in("anthropic", b)]
    assert [base64.b64decode(s) for s in sent] == [data] * 3
    if loader == "store":
        assert (artifacts.load.measurements, artifacts.store.verifications) == (1, 1)


async def test_the_store_s_loader_keeps_what_it_found_for_its_last_ids(artifacts):
    # What was found for an id is kept for the last MEASURED_IDS ids (a bound on a long-lived
    # daemon's memory); an image that is not whole is kept as such, and is not sent either time.
    loader = artifacts.load
    loader.MEASURED_IDS = 2
    whole = [artifacts.store.put(tiny_png(shade)) for shade in (1, 2)]
    broken = artifacts.store.put(tiny_png(3)[:-12])  # (no IEND)
    found = [await loader.image(i) for i in (*whole, broken, broken)]
    assert [type(f).__name__ for f in found] == ["Image", "Image", "Withheld", "Withheld"]
    assert found[3].why == "the image is truncated (no IEND chunk)" == found[2].why
    assert loader.measurements == 3  # (the second look at the broken one was kept)
    await loader.image(whole[1])
    assert loader.measurements == 3  # (still kept: the last two ids)
    await loader.image(whole[0])
    assert loader.measurements == 4  # (the oldest was let go)
