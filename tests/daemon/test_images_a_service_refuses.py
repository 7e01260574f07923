"""A session whose context holds an image the service would refuse goes on (F-EXE-6, F-CTX-3).

An image stays in the Working Context and goes with every later model request, so one the service
refuses failed each request of the session until it was snipped. Through a real daemon (loopback
port 0) and the Anthropic SDK against the loopback Messages server: an image stored by an earlier
build that is not whole (written into the log here, as such a build wrote it), and a session that
comes to hold more than 20 images, two of them wider than 2000 pixels."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import msgspec

from events.codec import Codec
from events.types import InputSubmitted
from runtime.providers.compile import IMAGE_WITHHELD

from ..files.sample_images import png_sized, tiny_png
from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import ScriptedServer
from ..providers.test_image_limits import withheld_texts
from ..providers.test_images import images_in
from ..rawlog import edit_log, log_rows
from .conftest import stop_daemon
from .test_routes import store_artifact


def _anthropic(url: str) -> dict[str, Any]:
    return {"providers": [{"id": "claude", "protocol": "anthropic", "baseUrl": url, "maxRetries": 0,
                           "models": [{"id": "claude-test", "images": True}]}],
            "defaultModel": "claude/claude-test"}


def image(aid: str) -> dict[str, str]:
    return {"type": "image", "artifactId": aid, "mime": "image/png"}


async def test_an_image_from_an_earlier_build_that_is_not_whole_is_named_and_the_session_goes_on(
        daemon_factory, nursery):
    server = ScriptedServer()
    url = await server.start(nursery)
    d = await daemon_factory(config=_anthropic(url))
    token = await d.pair("images-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    whole = store_artifact(d, tiny_png(1))
    server.push(message_stream(text="a red dot"))
    await d.submit(token, sid, "r1", [{"type": "text", "text": "what is this?"}, image(whole)])
    await d.wait_idle(token, sid)
    assert [base64.b64decode(s) for s in images_in("anthropic", server.bodies[-1])] == [tiny_png(1)]
    await stop_daemon(d)

    # As an earlier build stored it: the same input naming a PNG cut before its IEND chunk.
    cut = store_artifact(d, tiny_png(2)[:-12])
    codec = Codec()
    ((seq, kind, body),) = log_rows(d.data_dir, "SELECT seq, kind, body FROM events WHERE kind = 'input.submitted'")
    submitted = codec.decode(kind, body)
    assert isinstance(submitted, InputSubmitted)
    content = [msgspec.structs.replace(p, artifact_id=cut) if getattr(p, "artifact_id", None) else p
               for p in submitted.content]
    encoded = codec.encode(msgspec.structs.replace(submitted, content=content))
    edit_log(d.data_dir, "UPDATE events SET body = ?, raw_size = ?, dict_id = ? WHERE seq = ?",
             (encoded.body, encoded.raw_size, encoded.dict_id, seq))
    for derived in d.data_dir.glob("projections.db*"):  # (rebuilt from the log as it now is)
        derived.unlink()

    d2 = await daemon_factory(config=_anthropic(url), root=d.root)
    server.push(message_stream(text="I see no image now"))
    await d2.submit(token, sid, "r2", "and now?")
    view = await d2.wait_idle(token, sid)
    assert view["status"] == "idle"
    body = server.bodies[-1]
    assert images_in("anthropic", body) == []
    assert withheld_texts(body) == [IMAGE_WITHHELD.format(id=cut, why="the image is truncated (no IEND chunk)")]
    (first,) = [it for it in view["items"] if it["role"] == "user" and it.get("parts")]
    assert first["parts"][1] == {"type": "image", "artifactId": cut, "mime": "image/png",
                                 "notSent": "the image is truncated (no IEND chunk)"}
    responded = [e for e in await d2.events(token, sid) if e["kind"] == "model.responded"]
    assert responded[-1]["body"]["diagnostics"]["images_withheld"] == [
        {"artifact_id": cut, "why": "the image is truncated (no IEND chunk)"}]
    assert not [e for e in await d2.events(token, sid) if e["kind"] == "model.failed"]


async def test_a_session_of_more_than_20_images_goes_on_without_its_oldest_wide_ones(daemon_factory, nursery):
    # A tall image the user sent and a wide one view_image returned, then 20 small ones: the two
    # oldest past 2000 pixels are named in the request; the view marks both where they are shown
    # (the input's image part, the call's result), and so does a restarted daemon (the fold).
    server = ScriptedServer()
    url = await server.start(nursery)
    d = await daemon_factory(config=_anthropic(url))
    token = await d.pair("images-client", strong=True)
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    Path(project["workspace"], "wide.png").write_bytes(png_sized(2500, 10))
    tall = store_artifact(d, png_sized(10, 2001))
    tiny = [store_artifact(d, tiny_png(i)) for i in range(20)]
    server.push(message_stream(calls=[("toolu_1", "view_image", {"path": "wide.png"})]), message_stream(text="seen"),
                message_stream(text="twenty-two"))
    await d.submit(token, sid, "r1", [{"type": "text", "text": "look at wide.png too"}, image(tall)])
    await d.wait_idle(token, sid)
    assert len(images_in("anthropic", server.bodies[-1])) == 2 and withheld_texts(server.bodies[-1]) == []
    (call,) = [it for it in (await d.view(token, sid))["items"] if it.get("call")]
    wide = call["result"]["structuredContent"]["artifact_id"]
    assert "imagesNotSent" not in call["result"]
    await d.submit(token, sid, "r2", [image(a) for a in tiny])
    await d.wait_idle(token, sid)
    body = server.bodies[-1]
    assert [base64.b64decode(s) for s in images_in("anthropic", body)] == [tiny_png(i) for i in range(20)]
    why_tall = "it is 10x2001 pixels; in a request of more than 20 images Anthropic takes at most 2000 a side"
    why_wide = "it is 2500x10 pixels; in a request of more than 20 images Anthropic takes at most 2000 a side"
    assert withheld_texts(body) == [IMAGE_WITHHELD.format(id=tall, why=why_tall),
                                    IMAGE_WITHHELD.format(id=wide, why=why_wide)]

    async def marks(daemon) -> tuple[list[dict], list[dict], int]:
        view = await daemon.view(token, sid)
        assert view["status"] == "idle" and view["items"][-1]["text"] == "twenty-two"
        first, later = [it for it in view["items"] if it["role"] == "user"]
        (call,) = [it for it in view["items"] if it.get("call")]
        return ([p for p in first["parts"] if p["type"] == "image"], call["result"].get("imagesNotSent", []),
                sum("notSent" in p for p in later["parts"]))

    expected = ([{"type": "image", "artifactId": tall, "mime": "image/png", "notSent": why_tall}],
                [{"artifactId": wide, "why": why_wide}], 0)
    assert await marks(d) == expected
    await stop_daemon(d)
    assert await marks(await daemon_factory(config=_anthropic(url), root=d.root)) == expected
