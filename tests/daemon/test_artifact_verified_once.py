"""``GET /artifacts/{id}`` checks an artifact's file against its id once per file on disk
(docs/decisions.md, "An artifact checked against its id once per file"): a range, a HEAD and the
whole of a damaged file are refused alike (``ARTIFACT_CORRUPT``); a file checked once is not
read whole again by a HEAD, a range or the whole (read once, no longer twice); a file changed on
disk after its check is checked again; a file swapped in while an answer is sent is not what is
sent. A real daemon on loopback, read over HTTP; what its process read is measured from
``/proc/self/io`` (it runs in this process)."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest
import trio

from tests.daemon.conftest import API, Daemon, DaemonFactory, auth, error_of
from tests.providers.conftest import tiny_png
from tests.providers.servers import openai_chat as oc
from tests.providers.servers.base import ScriptedServer
from tests.daemon.test_artifacts_at_scale import MIB, bytes_read, store_large
from tools.artifacts import HEAD_BYTES, ArtifactStore

pytestmark = pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/self/io (Linux)")

# What a process reads besides the file while an answer is made (the head, SQLite, the client):
# far below any artifact here.
SLACK = 512 * 1024


def descriptors_on(path: Path) -> int:
    """How many of this process's descriptors are open on ``path`` (or on the file that was
    there, since removed or replaced)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target in (str(path), f"{path} (deleted)")
    return count


async def all_closed(path: Path) -> bool:
    """Whether every descriptor on ``path`` closes within a bound (an answer's descriptor is
    closed by the daemon's task once the client has gone, which the client does not wait for)."""
    with trio.move_on_after(5):
        while descriptors_on(path):
            await trio.sleep(0.01)
    return descriptors_on(path) == 0


def damage(path: Path, offset: int, *, keep_mtime: bool = False) -> None:
    """One byte of ``path`` changed in place (its size kept); with ``keep_mtime``, its
    modification time put back as it was (which the kernel answers with a new ``ctime``)."""
    st = path.stat()
    fd = os.open(path, os.O_RDWR)
    try:
        old = os.pread(fd, 1, offset)
        os.pwrite(fd, bytes([old[0] ^ 0xFF]), offset)
    finally:
        os.close(fd)
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert path.stat().st_mtime_ns == st.st_mtime_ns


async def refused(daemon: Daemon, token: str, url: str) -> None:
    """A range (past the head and within it), the one-byte probe, a HEAD with and without a
    range, and the whole: each 500 ``ARTIFACT_CORRUPT``, saying why."""
    for method, headers in [("GET", {"Range": f"bytes={HEAD_BYTES + 10}-{HEAD_BYTES + 19}"}),
                            ("GET", {"Range": "bytes=0-0"}), ("GET", {"Range": "bytes=-10"}),
                            ("HEAD", {"Range": "bytes=0-9"}), ("HEAD", {}), ("GET", {})]:
        r = await daemon.request(method, url, token, headers=headers)
        assert r.status_code == 500, (method, headers, r.status_code)
        if method == "GET":
            assert error_of(r) == "ARTIFACT_CORRUPT" and "no longer match its SHA-256" in r.text, (headers, r.text)


async def test_a_range_of_a_damaged_artifact_is_refused(daemon: Daemon, reader: str) -> None:
    """A file whose bytes do not match its id: a range of it, even the one-byte probe, was cut
    from the file unchecked (206); now every answer is 500 ``ARTIFACT_CORRUPT``, as the whole
    was. The damage is remembered: asked again, it is not read whole again."""
    data = bytes(range(256)) * 256  # 64 KiB, past the head
    aid = hashlib.sha256(data).hexdigest()
    root = daemon.data_dir / "artifacts"
    root.mkdir(parents=True, exist_ok=True)
    (root / aid).write_bytes(data[:-1] + b"!")
    await refused(daemon, reader, f"/artifacts/{aid}")
    # a 304 sends no byte: the client's copy, by its strong ETag, is still the artifact's
    r = await daemon.get(f"/artifacts/{aid}", reader, headers={"If-None-Match": f'"{aid}"'})
    assert r.status_code == 304, r.status_code


async def test_a_verified_artifact_is_not_read_whole_again(daemon: Daemon, reader: str) -> None:
    """A 16 MiB artifact: its first whole answer reads it at most twice (checked, then sent);
    then a HEAD, a HEAD of a range and a range read about nothing of it (a HEAD read all of it),
    and the whole is read once (it was read twice: hashed, then sent, on every answer)."""
    size = 16 * MIB
    aid, _, block = store_large(daemon, size)
    url = f"/artifacts/{aid}"
    await daemon.get("/health")  # (the client's connection made before the count starts)
    before = bytes_read()
    r = await daemon.get(url, reader)
    assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == aid
    assert bytes_read() - before < 2 * size + SLACK, bytes_read() - before
    for method, headers, status in [("HEAD", {}, 200), ("HEAD", {"Range": "bytes=-10"}, 206),
                                    ("GET", {"Range": f"bytes={9 * MIB}-{9 * MIB + 99}"}, 206)]:
        before = bytes_read()
        r = await daemon.request(method, url, reader, headers=headers)
        read = bytes_read() - before
        assert r.status_code == status, (method, headers, r.status_code)
        assert read < SLACK, (method, headers, read)
    assert r.content == block[9 * MIB % MIB:9 * MIB % MIB + 100]
    before = bytes_read()
    r = await daemon.get(url, reader)
    assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == aid
    assert bytes_read() - before < size + SLACK, bytes_read() - before


async def test_an_artifact_changed_after_it_was_verified_is_verified_again(daemon: Daemon, reader: str) -> None:
    """A file checked and served, then damaged in place (one byte past the head, its size kept,
    its mtime put back): every answer, a range first, is 500 ``ARTIFACT_CORRUPT`` (a range was
    served from it). Mended in place, it is served again; damaged by a rename of another file
    onto its name (a new inode), refused again; written again by a put, served."""
    size = 2 * MIB
    aid, path, block = store_large(daemon, size)
    url = f"/artifacts/{aid}"
    assert (await daemon.request("HEAD", url, reader)).status_code == 200
    r = await daemon.get(url, reader, headers={"Range": f"bytes={MIB}-{MIB + 9}"})
    assert r.status_code == 206 and r.content == block[:10]
    damage(path, MIB + 3, keep_mtime=True)
    await refused(daemon, reader, url)
    damage(path, MIB + 3)  # (the same byte changed back: the bytes are the id's again)
    r = await daemon.get(url, reader, headers={"Range": f"bytes={MIB}-{MIB + 9}"})
    assert r.status_code == 206 and r.content == block[:10], r.status_code
    assert (await daemon.request("HEAD", url, reader)).status_code == 200
    swapped = path.with_name("swapped")
    swapped.write_bytes(block + block[:-1] + b"\0")
    swapped.replace(path)
    await refused(daemon, reader, url)
    assert ArtifactStore(path.parent).put(block * 2) == aid  # (a damaged copy is written again)
    r = await daemon.get(url, reader)
    assert r.status_code == 200 and r.content == block * 2


async def test_a_file_swapped_in_while_an_answer_is_sent_is_not_what_is_sent(daemon: Daemon, reader: str) -> None:
    """The file checked is the file sent: another of the same size renamed onto the artifact's
    name after the answer's first piece reached the client does not reach it (each piece opened
    the name again, so the rest of the answer came from the other file); the next answer judges
    the new file and refuses it. The answer's descriptor is closed when its body ends, and when
    the client leaves in the middle."""
    size = 16 * MIB
    aid, path, block = store_large(daemon, size)
    other = path.with_name("other")
    other.write_bytes(bytes(size))
    h, got = hashlib.sha256(), 0
    async with daemon.client.stream("GET", f"{API}/artifacts/{aid}", headers=auth(reader)) as r:
        assert r.status_code == 200 and r.headers["content-length"] == str(size), r.headers
        async for piece in r.aiter_raw():
            if not got:
                other.replace(path)
            h.update(piece)
            got += len(piece)
    assert got == size and h.hexdigest() == aid
    assert await all_closed(path)  # (the answer's descriptor, on the file replaced, is let go)
    r = await daemon.get(f"/artifacts/{aid}", reader, headers={"Range": "bytes=0-9"})
    assert r.status_code == 500 and error_of(r) == "ARTIFACT_CORRUPT", r.text
    # a client that leaves after the first piece: the body's descriptor is closed all the same
    aid, path, _ = store_large(daemon, size)
    async with daemon.client.stream("GET", f"{API}/artifacts/{aid}", headers=auth(reader)) as r:
        async for _ in r.aiter_raw():
            assert descriptors_on(path) == 1
            break
    assert await all_closed(path)


async def test_an_image_judged_when_loaded_for_the_model_is_not_read_whole_again_by_the_route(
        daemon_factory: DaemonFactory, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's one store judges an artifact once whichever path reads it first: an image a
    tool stored is loaded for each model request that follows (``get``, which kept no verdict:
    the route's first answer read the image whole again), and the route's answers then trust
    the verdict that load reached."""
    monkeypatch.setenv("LENS_TEST_IMAGE_KEY", "sk-test-image-0123456789")
    loop = ScriptedServer()
    url = await loop.start(nursery)
    d = await daemon_factory(config={
        "providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{url}/v1",
                       "apiKeyEnv": "LENS_TEST_IMAGE_KEY", "maxRetries": 0, "models": [{"id": "m", "images": True}]}],
        "defaultModel": "loop/m"})
    token = await d.pair("image-client", strong=True)
    project = await d.project(token)
    image = tiny_png(7) + os.urandom(4 * MIB)  # (a PNG's bytes, 4 MiB: under view_image's 5 MiB)
    Path(project["workspace"], "shot.png").write_bytes(image)
    aid = hashlib.sha256(image).hexdigest()
    sid = (await d.session(token, project["id"]))["id"]
    loop.push(oc.chat_stream(calls=[("call_0", "view_image", {"path": "shot.png"})]),
              oc.chat_stream(text="a shot"), oc.chat_stream(text="the same shot"))
    await d.submit(token, sid, "r1", "look at the shot")
    await d.wait_idle(token, sid)
    await d.submit(token, sid, "r2", "and again?")
    await d.wait_idle(token, sid)
    sent = [part["image_url"]["url"] for body in loop.bodies for m in body["messages"]
            if isinstance(m.get("content"), list) for part in m["content"] if part.get("type") == "image_url"]
    assert [base64.b64decode(u.split(",", 1)[1]) for u in sent] == [image, image]  # (the two requests after it)
    await d.get("/health")  # (the client's connection made before the count starts)
    before = bytes_read()
    r = await d.request("HEAD", f"/artifacts/{aid}", token)
    assert r.status_code == 200 and r.headers["Content-Length"] == str(len(image))
    assert bytes_read() - before < SLACK, bytes_read() - before
