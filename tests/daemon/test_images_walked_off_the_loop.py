"""An image is walked and encoded in a worker thread, never on the daemon's event loop (F-EXE-6).

Each image is walked to be checked whole (a GIF block by block: tens of milliseconds for one of
many frames) when an input names it, and again, with its base64 encoding, for every model request
of the session that carries it. Both ran on the event loop, holding every session of the daemon
meanwhile. Through a real daemon (loopback port 0, in this thread) and the Anthropic SDK against
the loopback Messages server, with a profiler on this thread only (:mod:`tests.image_walks`)."""

from __future__ import annotations

import base64

from ..files.sample_images import gif_of_frames
from ..image_walks import image_work_on_this_thread
from ..providers.servers.anthropic import message_stream
from ..providers.servers.base import ScriptedServer
from ..providers.test_images import images_in
from .test_images_a_service_refuses import _anthropic
from .test_routes import store_artifact


async def test_an_image_input_is_walked_and_encoded_off_the_event_loop(daemon_factory, nursery):
    server = ScriptedServer()
    url = await server.start(nursery)
    d = await daemon_factory(config=_anthropic(url))
    token = await d.pair("images-client", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    gif = gif_of_frames(2000)
    aid = store_artifact(d, gif)
    server.push(message_stream(text="a dot"), message_stream(text="still a dot"))
    with image_work_on_this_thread(gif) as on_loop:
        await d.submit(token, sid, "r1", [{"type": "text", "text": "what is this?"},
                                          {"type": "image", "artifactId": aid, "mime": "image/gif"}])
        await d.wait_idle(token, sid)
        await d.submit(token, sid, "r2", "and now?")
        view = await d.wait_idle(token, sid)
    assert view["status"] == "idle"
    assert [[base64.b64decode(s) for s in images_in("anthropic", b)] for b in server.bodies] == [[gif], [gif]]
    assert on_loop == []
