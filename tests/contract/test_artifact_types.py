"""The type an artifact is served as when its ``artifact.stored`` names one (docs/decisions.md,
"The dashboard and the answers it reads: what the last passes left"): a fetched PDF is served as
``application/pdf`` when its bytes are a PDF's, never a stored type the bytes do not bear out,
and never a type that runs (``text/html``) whatever was stored. A real daemon on a log written
with the real store, read over HTTP."""

from __future__ import annotations

import hashlib
from pathlib import Path

import trio

from events.store import Draft, open_store
from events.types import ArtifactStored, ProjectCreated, SessionCreated, TextPart, ToolFinished
from tests.daemon.conftest import Daemon, DaemonFactory
from tools.artifacts import ArtifactStore

PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
ASCII_PDF = b"%PDF-1.1\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n"  # (UTF-8 text too: the stored type wins)
ZIP = b"PK\x05\x06" + b"\0" * 18  # (an empty archive)
HTML = b"<html><script>window.ran = 1</script></html>"
UNNAMED_PDF = b"%PDF-1.4\n\xff\xfe no artifact.stored names these bytes\n"


async def write_log(root: Path, stored: list[tuple[bytes, str]], named: bytes) -> dict[bytes, str]:
    """Each of ``stored`` (bytes, the type its event gives) in the artifact store and in the log of
    one session, and ``named`` stored and named by a result's text alone; the ids by bytes."""
    artifacts = ArtifactStore(root / "data" / "artifacts")
    ids = {data: artifacts.put(data) for data in [*(d for d, _ in stored), named]}
    env = {"project_id": "prj_types", "session_id": "ses_types", "agent_id": "main"}
    async with open_store(root / "data") as log:
        await log.append(Draft(ProjectCreated(name="types", workspace=str(root)), project_id="prj_types"))
        await log.append(Draft(SessionCreated(model="faux/faux-1"), **env))
        for data, mime in stored:
            aid = ids[data]
            await log.append(Draft(ArtifactStored(artifact_id=aid, sha256=aid, mime=mime, size=len(data),
                                                  source="web_fetch"), **env))
        # (named, so the start-up sweep keeps it, by no artifact.stored)
        await log.append(Draft(ToolFinished(call_id="call_1", name="job", content=[TextPart(f"saved as {ids[named]}")]),
                               **env))
    return ids


async def test_a_stored_type_is_served_where_the_bytes_bear_it_out(daemon_factory: DaemonFactory,
                                                                   tmp_path: Path) -> None:
    """``artifact.stored``'s type was not projected: a fetched PDF was ``application/octet-stream``
    (``.bin``). A PDF, a PDF in ASCII alone and a zip archive are served as stored, as
    attachments, parameters and case dropped; a type the bytes do not bear out, or one that would
    run (HTML stored as ``text/html``, or as ``application/pdf``), is served from the bytes as
    before; the first type stored for the same bytes is the one kept. Each answer, and a range of
    one, keeps the type and carries the sandbox that keeps it from running as a page."""
    root = tmp_path
    ids = await write_log(root, [(PDF, "Application/PDF; name=paper.pdf"), (ASCII_PDF, "application/pdf"),
                                 (ZIP, "application/zip"), (HTML, "text/html"), (HTML, "application/pdf"),
                                 (PDF, "text/html")], UNNAMED_PDF)
    unnamed = ids[UNNAMED_PDF]
    daemon: Daemon = await daemon_factory(root=root)
    reader = await daemon.pair("types-reader", strong=False)
    cases = [(ids[PDF], "application/pdf", "attachment", "pdf"),
             (ids[ASCII_PDF], "application/pdf", "attachment", "pdf"),
             (ids[ZIP], "application/zip", "attachment", "zip"),
             (ids[HTML], "text/plain; charset=utf-8", "inline", "txt"),
             (unnamed, "application/octet-stream", "attachment", "bin")]
    for aid, mime, disposition, ext in cases:
        r = await daemon.get(f"/artifacts/{aid}", reader)
        assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == aid, (aid, r.status_code)
        assert r.headers["content-type"] == mime, (aid, r.headers)
        assert r.headers["content-disposition"] == f'{disposition}; filename="{aid[:16]}.{ext}"', r.headers
        assert r.headers["content-security-policy"] == "sandbox; default-src 'none'", r.headers
        assert r.headers["cross-origin-resource-policy"] == "same-origin", r.headers
        assert r.headers["x-content-type-options"] == "nosniff", r.headers
        part = await daemon.get(f"/artifacts/{aid}", reader, headers={"Range": "bytes=0-4"})
        assert part.status_code == 206 and part.headers["content-type"] == mime, part.headers
        assert part.headers["content-security-policy"] == "sandbox; default-src 'none'", part.headers
    with trio.fail_after(10):
        assert (await daemon.get(f"/artifacts/{ids[PDF]}", reader)).headers["content-type"] == "application/pdf"


PNG = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + b"\0" * 32
JPEG = b"\xff\xd8\xff\xe0\0\x10JFIF\0" + b"\0" * 32
GIF = b"GIF89a\x01\0\x01\0\x80\0\0" + b"<html><script>window.ran = 1</script></html>"  # (a GIF that is also HTML)
WEBP = b"RIFF\x24\0\0\0WEBPVP8 " + b"\0" * 32
WAVE = b"RIFF\x24\0\0\0WAVEfmt " + b"\0" * 32  # (RIFF, but no WebP)
SHORT_RIFF = b"RIFF\x24\0\0\0WEB"  # (11 bytes: too short to say WebP)
SVG = b'<svg xmlns="http://www.w3.org/2000/svg" onload="window.ran = 1"><script>window.ran = 1</script></svg>'
TEXT = "a job's output: ✓ done\n".encode()
BIG_TEXT = b"line\n" * 4000  # (20,000 bytes: typed by its head)


async def test_each_type_by_its_bytes_whatever_its_event_claims(daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    """The four image types by their magic bytes (inline, named with their extension), UTF-8 text
    as ``text/plain`` (inline), and neither SVG nor HTML ever as themselves: served as text, with
    the sandbox, ``nosniff`` and ``Cross-Origin-Resource-Policy``. What an ``artifact.stored``
    claims never wins over the bytes: a PNG claimed a PDF is a PNG, HTML claimed a PNG or SVG
    claimed ``image/svg+xml`` is text, a WAVE claimed ``image/webp`` is bytes, a zip claimed
    gzip is bytes. A range (past the head too) keeps the whole artifact's type."""
    root = tmp_path
    claims = [(PNG, "image/png"), (JPEG, "application/pdf"), (GIF, "text/html"), (WEBP, "image/webp"),
              (WAVE, "image/webp"), (SHORT_RIFF, "image/webp"), (SVG, "image/svg+xml"), (HTML, "image/png"),
              (TEXT, "image/png"), (BIG_TEXT, "text/html"), (ZIP, "application/gzip")]
    ids = await write_log(root, claims, b"named by text")
    daemon: Daemon = await daemon_factory(root=root)
    reader = await daemon.pair("types-reader", strong=False)
    expected = [(PNG, "image/png", "inline", "png"), (JPEG, "image/jpeg", "inline", "jpeg"),
                (GIF, "image/gif", "inline", "gif"), (WEBP, "image/webp", "inline", "webp"),
                (WAVE, "application/octet-stream", "attachment", "bin"),
                (SHORT_RIFF, "application/octet-stream", "attachment", "bin"),
                (SVG, "text/plain; charset=utf-8", "inline", "txt"), (HTML, "text/plain; charset=utf-8", "inline", "txt"),
                (TEXT, "text/plain; charset=utf-8", "inline", "txt"),
                (BIG_TEXT, "text/plain; charset=utf-8", "inline", "txt"),
                (ZIP, "application/octet-stream", "attachment", "bin")]
    with trio.fail_after(30):
        for data, mime, disposition, ext in expected:
            aid = ids[data]
            r = await daemon.get(f"/artifacts/{aid}", reader)
            assert r.status_code == 200 and r.content == data, (data[:12], r.status_code)
            assert r.headers["content-type"] == mime, (data[:12], r.headers)
            assert r.headers["content-disposition"] == f'{disposition}; filename="{aid[:16]}.{ext}"', r.headers
            assert r.headers["content-security-policy"] == "sandbox; default-src 'none'", r.headers
            assert r.headers["cross-origin-resource-policy"] == "same-origin", r.headers
            assert r.headers["x-content-type-options"] == "nosniff", r.headers
            for header in ("bytes=0-0", f"bytes={len(data) - 1}-"):
                part = await daemon.get(f"/artifacts/{aid}", reader, headers={"Range": header})
                assert part.status_code == 206 and part.headers["content-type"] == mime, (data[:12], header)
                assert part.content == data[int(header[6:].split("-")[0]):][:1], (data[:12], header)
