"""``GET /artifacts/{id}`` on large artifacts (docs/decisions.md, "Artifacts at scale: ranges that
seek, a bounded lease set, more types"): a range, and the one-byte probe the dashboard types an
artifact with, read that range and the artifact's first bytes, never the whole file, once the
file has been checked against its id; the whole artifact is checked and sent in pieces; the
edges of a byte range as RFC 9110 reads them. A real daemon on loopback, read over HTTP; what
the daemon's process read is measured from ``/proc/self/io`` (it runs in this process)."""

from __future__ import annotations

import hashlib
import os
import tracemalloc
from pathlib import Path

import httpx2
import pytest

from tests.daemon.conftest import API, Daemon, auth, error_of
from tools.artifacts import HEAD_BYTES

MIB = 1024 * 1024
LARGE = 48 * MIB

pytestmark = pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs /proc/self/io (Linux)")


def bytes_read() -> int:
    """What this process has read so far through read(2), pread(2) and their kin (``rchar``)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def store_large(daemon: Daemon, size: int) -> tuple[str, Path, bytes]:
    """An artifact of ``size`` bytes (a counter's bytes, so every offset's byte is known): its id,
    its path and its first and last KiB."""
    block = b"".join(i.to_bytes(4, "big") for i in range(MIB // 4))  # 1 MiB, no two words alike
    h = hashlib.sha256()
    for _ in range(size // MIB):
        h.update(block)
    aid = h.hexdigest()
    root = daemon.data_dir / "artifacts"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / aid, "wb") as f:
        for _ in range(size // MIB):
            f.write(block)
    return aid, root / aid, block


async def test_a_small_range_of_a_large_artifact_reads_about_that_range(daemon: Daemon, reader: str) -> None:
    """Once the file is checked against its id (its first answer, here a HEAD, reads it whole
    once), a range of 100 bytes of a 48 MiB artifact, and a one-byte probe, read the range and
    the artifact's head (8 KiB), not 48 MiB: they read the whole file into memory (and hashed it)."""
    aid, _, block = store_large(daemon, LARGE)
    url = f"/artifacts/{aid}"
    await daemon.get("/health")  # (the client's connection made before the count starts)
    before = bytes_read()
    assert (await daemon.request("HEAD", url, reader)).status_code == 200
    assert LARGE <= bytes_read() - before < LARGE + 512 * 1024, bytes_read() - before
    for header, begin, end in [(f"bytes={30 * MIB}-{30 * MIB + 99}", 30 * MIB, 30 * MIB + 100),
                               ("bytes=0-0", 0, 1), (f"bytes=-100", LARGE - 100, LARGE)]:
        before = bytes_read()
        r = await daemon.get(url, reader, headers={"Range": header})
        read = bytes_read() - before
        assert r.status_code == 206, (header, r.status_code, r.text[:200])
        assert r.content == (block * 2)[begin % MIB:begin % MIB + end - begin], header
        assert r.headers["content-range"] == f"bytes {begin}-{end - 1}/{LARGE}", r.headers
        assert r.headers["content-type"] == "application/octet-stream", r.headers  # (typed by its head)
        # (the head, the range, and what else the process read meanwhile: far below the file)
        assert read < HEAD_BYTES + (end - begin) + 512 * 1024, (header, read)
    before = bytes_read()
    r = await daemon.get(url, reader, headers={"If-None-Match": f'"{aid}"'})
    assert r.status_code == 304 and bytes_read() - before < 512 * 1024, bytes_read() - before


async def test_a_large_artifact_whole_is_checked_then_sent_in_pieces(daemon: Daemon, reader: str) -> None:
    """The whole artifact comes byte for byte with its length; a HEAD says the same without a
    body; one damaged byte past the head makes the whole answer 500 ``ARTIFACT_CORRUPT`` before
    any byte is sent, and a range of it too (it was cut from the file unchecked)."""
    aid, path, block = store_large(daemon, 8 * MIB)
    r = await daemon.get(f"/artifacts/{aid}", reader)
    assert r.status_code == 200 and r.headers["content-length"] == str(8 * MIB), r.headers
    assert hashlib.sha256(r.content).hexdigest() == aid
    head = await daemon.request("HEAD", f"/artifacts/{aid}", reader)
    assert head.status_code == 200 and head.headers["content-length"] == str(8 * MIB) and head.content == b""
    head = await daemon.request("HEAD", f"/artifacts/{aid}", reader, headers={"Range": "bytes=-10"})
    assert head.status_code == 206 and head.headers["content-length"] == "10", head.headers
    assert head.headers["content-range"] == f"bytes {8 * MIB - 10}-{8 * MIB - 1}/{8 * MIB}", head.headers
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"\xff", 5 * MIB + 3)
    finally:
        os.close(fd)
    r = await daemon.get(f"/artifacts/{aid}", reader)
    assert r.status_code == 500 and error_of(r) == "ARTIFACT_CORRUPT", r.text[:300]
    assert "no longer match its SHA-256" in r.text, r.text
    r = await daemon.get(f"/artifacts/{aid}", reader, headers={"Range": "bytes=0-9"})
    assert r.status_code == 500 and error_of(r) == "ARTIFACT_CORRUPT", r.text[:300]


async def test_a_large_artifact_whole_is_sent_holding_a_piece_at_a_time(daemon: Daemon, reader: str) -> None:
    """The whole of a 48 MiB artifact, read by a client as it streams: what the process allocates
    at its peak (tracemalloc: the daemon runs in this process, its worker threads included) stays
    a few pieces of 256 KiB, where the artifact was read whole into one bytes object."""
    aid, _, _ = store_large(daemon, LARGE)
    h, got = hashlib.sha256(), 0
    tracemalloc.start()
    try:
        async with daemon.client.stream("GET", f"{API}/artifacts/{aid}", headers=auth(reader)) as r:
            assert r.status_code == 200 and r.headers["content-length"] == str(LARGE), r.headers
            async for piece in r.aiter_raw():
                h.update(piece)
                got += len(piece)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == LARGE and h.hexdigest() == aid
    assert peak < 8 * MIB, peak  # (measured: about 1.2 MiB; 100 MiB before)


async def test_an_artifact_cut_short_while_it_is_sent_ends_its_body_short(daemon: Daemon, reader: str,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """The file truncated after the answer's head was sent: the body ends short of its
    ``Content-Length`` (the client sees the length broken, never other bytes), and the daemon
    says where it ended; it goes on serving. One removed meanwhile (a live sweep taking an orphan
    being downloaded) is sent whole: the answer reads the descriptor it checked, which holds the
    file (it ended short before: each piece opened the name again)."""
    aid, path, block = store_large(daemon, LARGE)
    got = b""
    with pytest.raises(httpx2.RemoteProtocolError):
        async with daemon.client.stream("GET", f"{API}/artifacts/{aid}", headers=auth(reader)) as r:
            assert r.status_code == 200 and r.headers["content-length"] == str(LARGE), r.headers
            async for piece in r.aiter_raw():
                if not got:
                    os.truncate(path, 4 * MIB)
                got += piece
    assert 0 < len(got) < LARGE and got == (block * (len(got) // MIB + 1))[:len(got)]
    assert any(f"artifact {aid}: its answer ended at byte" in m for m in caplog.messages), caplog.messages
    r = await daemon.get(f"/artifacts/{aid}", reader)
    assert r.status_code == 500 and error_of(r) == "ARTIFACT_CORRUPT", r.text

    aid, path, _ = store_large(daemon, LARGE)  # (afresh: the same id, a new file)
    h, got_bytes = hashlib.sha256(), 0
    async with daemon.client.stream("GET", f"{API}/artifacts/{aid}", headers=auth(reader)) as r:
        assert r.status_code == 200 and r.headers["content-length"] == str(LARGE), r.headers
        async for piece in r.aiter_raw():
            if not got_bytes:
                path.unlink()
            h.update(piece)
            got_bytes += len(piece)
    assert got_bytes == LARGE and h.hexdigest() == aid
    r = await daemon.get(f"/artifacts/{aid}", reader)
    assert r.status_code == 404 and error_of(r) == "ARTIFACT_NOT_FOUND", r.text


async def test_the_edges_of_a_byte_range(daemon: Daemon, reader: str) -> None:
    """RFC 9110 14.1.2: ``bytes=0-0`` is the first byte, ``bytes=N-1-`` and ``bytes=-1`` the last,
    a suffix longer than the artifact all of it; a first byte at the size, or one past, is 416
    with ``Content-Range: bytes */SIZE``; several ranges get the whole artifact (200: a server
    may ignore a Range, and one body of several parts is not served), as decided before."""
    data = bytes(range(256)) * 64 + b"tail"  # 16,388 bytes: past the head, so read from the file
    size = len(data)
    aid = hashlib.sha256(data).hexdigest()
    (daemon.data_dir / "artifacts").mkdir(parents=True, exist_ok=True)
    (daemon.data_dir / "artifacts" / aid).write_bytes(data)
    url = f"/artifacts/{aid}"
    for header, begin, end in [("bytes=0-0", 0, 1), (f"bytes={size - 1}-", size - 1, size),
                               ("bytes=-1", size - 1, size), (f"bytes={size - 1}-{size - 1}", size - 1, size),
                               (f"bytes={size - 1}-{size + 100}", size - 1, size), ("bytes=-4", size - 4, size),
                               (f"bytes=-{size}", 0, size), (f"bytes=-{size + 1}", 0, size),
                               (f"bytes={HEAD_BYTES - 2}-{HEAD_BYTES + 1}", HEAD_BYTES - 2, HEAD_BYTES + 2),
                               (f"bytes=100-{size - 1}", 100, size)]:
        r = await daemon.get(url, reader, headers={"Range": header})
        assert r.status_code == 206 and r.content == data[begin:end], (header, r.status_code)
        assert r.headers["content-range"] == f"bytes {begin}-{end - 1}/{size}", (header, r.headers)
        assert r.headers["content-length"] == str(end - begin), (header, r.headers)
    for header in (f"bytes={size}-", f"bytes={size}-{size}", f"bytes={size + 1}-", f"bytes={size + 1}-{size + 5}",
                   "bytes=-0"):
        r = await daemon.get(url, reader, headers={"Range": header})
        assert r.status_code == 416 and error_of(r) == "RANGE_NOT_SATISFIABLE", (header, r.text)
        assert r.headers["content-range"] == f"bytes */{size}", (header, r.headers)
        assert f"{size} bytes" in r.json()["error"]["message"], r.text
    for header in ("bytes=0-0,5-9", "bytes=0-0, -1", f"bytes={size}-,0-0"):
        r = await daemon.get(url, reader, headers={"Range": header})
        assert r.status_code == 200 and r.content == data, (header, r.status_code)
        assert "content-range" not in r.headers, r.headers
    # an empty artifact has no byte to give: every range is 416 with a size of 0, the whole 200
    empty = hashlib.sha256(b"").hexdigest()
    (daemon.data_dir / "artifacts" / empty).write_bytes(b"")
    r = await daemon.get(f"/artifacts/{empty}", reader, headers={"Range": "bytes=0-0"})
    assert r.status_code == 416 and r.headers["content-range"] == "bytes */0", r.headers
    r = await daemon.get(f"/artifacts/{empty}", reader)
    assert r.status_code == 200 and r.content == b"" and r.headers["content-length"] == "0", r.headers


async def test_an_image_input_naming_a_large_artifact_is_refused_without_reading_it(daemon: Daemon,
                                                                                   strong: str) -> None:
    """An image part is at most 5 MiB: one naming an artifact of 40 MiB that begins as a PNG is
    refused (422) from the artifact's size, having read its head; it was read whole first."""
    size = 40 * MIB
    h = hashlib.sha256(b"\x89PNG\r\n\x1a\n")
    zeros = bytes(MIB)
    for _ in range(size // MIB - 1):
        h.update(zeros)
    h.update(zeros[:MIB - 8])
    aid = h.hexdigest()
    root = daemon.data_dir / "artifacts"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / aid, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.truncate(size)  # (the rest zeros)
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    await daemon.get("/health")
    before = bytes_read()
    r = await daemon.post(f"/sessions/{sid}/inputs", strong, {
        "requestId": "big", "content": [{"type": "image", "artifactId": aid, "mime": "image/png"}]})
    read = bytes_read() - before
    assert r.status_code == 422 and error_of(r) == "IMAGE_UNSUPPORTED", r.text
    assert f"is {size} bytes; an image may be at most {5 * MIB}" in r.text, r.text
    assert read < 4 * MIB, read
