"""HTTP route of artifacts (F-TOOL-5): ``GET /api/v1/artifacts/{id}`` (and ``HEAD``).

An artifact is named by the SHA-256 of its bytes (any other id is 400, never 404). Its answer
carries a strong ``ETag`` (a revalidation is 304), serves one byte range (206; 416
``RANGE_NOT_SATISFIABLE`` for one it holds none of), is typed from its first bytes
(:func:`artifact_type`: never HTML, SVG or script) and is checked against its id before a byte is
sent (``ARTIFACT_CORRUPT``, 500). ``ARTIFACT_NOT_FOUND`` (404) for one not stored.

:func:`check_image` checks an image input's artifact for the session routes.
"""

from __future__ import annotations

import logging
import re
from typing import Any, AsyncIterator, Callable, TypeVar

import trio
from quart import Response, request
from quart_trio import QuartTrio

from events import types as t
from events.ids import SHA256_RE
from tools.artifacts import CHUNK_BYTES, HEAD_BYTES, ArtifactError, ArtifactStore, OpenArtifact, reads_as_text
from tools.files.errors import MAX_IMAGE_BYTES
from tools.files.image import fault as image_fault
from tools.files.image import sniff as sniff_image

from .http_parts import ApiError, error_response
from .providers.compile import IMAGE_MIMES
from .services import Services

log = logging.getLogger("lens.http")
_T = TypeVar("_T")


UNSATISFIABLE = (-1, -1)
_BYTE_RANGE = re.compile(r"bytes=([0-9]{0,19})-([0-9]{0,19})")  # one range (ASCII digits, at most 19)


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The ``[begin, end)`` of ``size`` bytes a ``Range`` header asks for (RFC 9110 §14.1.2), or
    :data:`UNSATISFIABLE` (it starts past the end, or asks for none of the last bytes), or None for
    the whole body: no header, or one this does not serve (several ranges, another unit,
    malformed, first past last), which HTTP lets a server ignore."""
    m = _BYTE_RANGE.fullmatch(header.strip()) if header else None
    if m is None or not (m[1] or m[2]):
        return None
    if not m[1]:  # the last N bytes
        n = int(m[2])
        return UNSATISFIABLE if n == 0 or size == 0 else (max(0, size - n), size)
    begin = int(m[1])
    if m[2] and int(m[2]) < begin:
        return None
    if begin >= size:
        return UNSATISFIABLE
    return begin, size if not m[2] else min(size, int(m[2]) + 1)


def check_artifact_id(value: str, what: str) -> str:
    """An artifact is named by the SHA-256 of its bytes: any other name is malformed (400), never
    an artifact that is not stored (404)."""
    if not SHA256_RE.fullmatch(value):
        raise ApiError("INVALID_ARGUMENT", f"{what} must be 64 lowercase hex digits (the SHA-256 of the artifact's bytes)")
    return value


# The types an artifact is served as when its ``artifact.stored`` says so and its bytes agree (a
# fetched PDF): each with its file name's extension and the bytes it must begin with. All are
# documents a browser does not run in the page that fetched them, served as an attachment; any
# other stored type (``text/html``, ``image/svg+xml``…) is never served as itself.
STORED_TYPES: dict[str, tuple[str, tuple[bytes, ...]]] = {
    "application/pdf": ("pdf", (b"%PDF-",)),
    "application/zip": ("zip", (b"PK\x03\x04", b"PK\x05\x06")),
    "application/gzip": ("gz", (b"\x1f\x8b",)),
}
# On every artifact answer: were it ever opened as a page (a download's preview, a link pasted
# with a credential some proxy adds), it runs nothing, loads nothing and has no origin of its own
# to act in; and no other site may embed it.
ARTIFACT_GUARD = {"Content-Security-Policy": "sandbox; default-src 'none'",
                  "Cross-Origin-Resource-Policy": "same-origin"}


def stored_type_claimed(head: bytes) -> bool:
    """Whether ``head`` (an artifact's first bytes) begins as one of :data:`STORED_TYPES` does (so
    its stored type is asked)."""
    return any(head.startswith(magic) for _, magics in STORED_TYPES.values() for magic in magics)


def artifact_type(head: bytes, aid: str, stored: str | None = None, *, whole: bool = True) -> dict[str, str]:
    """``Content-Type`` and ``Content-Disposition`` of an artifact, from its first bytes
    (``head``: :data:`tools.artifacts.HEAD_BYTES` of them, all of it when ``whole``; an artifact
    is named by its digest alone) and the type its ``artifact.stored`` gave (``stored``): the four
    image types models take, inline; a type of :data:`STORED_TYPES` the bytes agree with, as an
    attachment; UTF-8 text without NUL in its head (a job's output, a fetched JSON document,
    source; a character cut at the head's end is no reason to doubt it),
    ``text/plain; charset=utf-8`` inline, never HTML, SVG or script whatever it holds; anything
    else bytes, as an attachment. With ``nosniff`` (on every answer) nothing is rendered as
    another type in the dashboard's origin. The type depends on the head alone, so a range of an
    artifact is typed as the whole is, without reading the rest."""
    image = sniff_image(head)
    name = aid[:16]
    if image is not None:
        return {"Content-Type": image, "Content-Disposition": f'inline; filename="{name}.{image.split("/")[1]}"'}
    if stored in STORED_TYPES:
        ext, magics = STORED_TYPES[stored]
        if head.startswith(magics):
            return {"Content-Type": stored, "Content-Disposition": f'attachment; filename="{name}.{ext}"'}
    if reads_as_text(head, whole=whole):
        return {"Content-Type": "text/plain; charset=utf-8", "Content-Disposition": f'inline; filename="{name}.txt"'}
    return {"Content-Type": "application/octet-stream", "Content-Disposition": f'attachment; filename="{name}.bin"'}


def artifact_store(svc: Services) -> ArtifactStore:
    """The store the tools write: the daemon's own (its verdicts are shared)."""
    if svc.artifacts is None:
        svc.artifacts = ArtifactStore(svc.data_dir / "artifacts")
    return svc.artifacts


async def artifact_io(aid: str, read: Callable[..., _T], *args: Any) -> _T:
    """``read(*args)`` (of the artifact store or an artifact it opened), in a worker thread;
    its errors as the API's."""
    try:
        return await trio.to_thread.run_sync(read, *args)
    except ArtifactError as exc:
        if exc.code == "ARTIFACT_CORRUPT":
            raise ApiError("ARTIFACT_CORRUPT", exc.message) from None
        raise ApiError("ARTIFACT_NOT_FOUND", f"no artifact {aid[:80]!r}") from None


async def check_image(svc: Services, part: t.ImagePart) -> None:
    """An image input must name a stored, intact artifact of a type models take, as what it
    is: checked before the input enters the log, where a bad part would fail every later
    model request of the session (images are loaded afresh for each)."""
    check_artifact_id(part.artifact_id, "artifactId")  # (malformed is 400, as in GET /artifacts/{id}: not 404)
    if part.mime not in IMAGE_MIMES:
        raise ApiError("IMAGE_UNSUPPORTED", f"an image must be one of {', '.join(sorted(IMAGE_MIMES))}, "
                                            f"not {part.mime[:80]!r}")
    # (its size and type from its head: an artifact of 60 MiB is refused without reading it)
    found = await artifact_io(part.artifact_id, artifact_store(svc).head, part.artifact_id)
    if found.size > MAX_IMAGE_BYTES:  # as view_image: an image a model is sent is at most 5 MiB
        raise ApiError("IMAGE_UNSUPPORTED", f"artifact {part.artifact_id} is {found.size} bytes; an image "
                                            f"may be at most {MAX_IMAGE_BYTES}")
    actual = sniff_image(found.head)
    if actual != part.mime:
        raise ApiError("IMAGE_UNSUPPORTED", f"artifact {part.artifact_id} holds "
                                            f"{actual or 'no PNG, JPEG, GIF or WebP'} data, not {part.mime}")
    # (damaged: 500, before the log; then whole, as view_image takes an image: a truncated one, or
    # one of no pixels or too many, a provider refuses)
    # (read and walked in a worker thread: a GIF of many frames takes tens of milliseconds)
    store = artifact_store(svc)
    wrong = await artifact_io(part.artifact_id, lambda: image_fault(store.get(part.artifact_id)))
    if wrong is not None:
        raise ApiError("IMAGE_UNSUPPORTED", f"artifact {part.artifact_id}: the {part.mime} image {wrong[1]}")


def not_modified(aid: str) -> Response:
    """A 304: the artifact the client holds is still this one. Its ETag alone: the empty
    body's own ``Content-Type`` (Quart's ``text/html``) and ``Content-Length: 0`` were
    taken by a cache updating its stored answer from a 304 (RFC 9111 4.3.4) for the
    artifact's, and a length other than a 200's is forbidden there (RFC 9110 8.6)."""
    resp = Response(b"", 304, {"ETag": f'"{aid}"'})
    del resp.headers["Content-Type"]
    del resp.headers["Content-Length"]
    return resp

async def artifact_pieces(opened: OpenArtifact, begin: int, end: int) -> AsyncIterator[bytes]:
    """Bytes ``begin``–``end`` of an open artifact, read in worker threads a piece at a time
    (so an answer of 64 MiB holds 256 KiB at once); the descriptor is closed when the body
    ends (one never started: when the answer is dropped). A file that is shorter than it was
    when the answer began (truncated since) ends the body short: the client sees the length
    it was promised broken, never other bytes. One removed meanwhile is still read whole: the
    descriptor holds it."""
    offset = begin
    try:
        while offset < end:
            try:
                piece = await trio.to_thread.run_sync(opened.read_at, offset, min(CHUNK_BYTES, end - offset))
            except OSError as exc:  # (the head is sent: no status can say it any more)
                log.warning("artifact %s: its answer ended at byte %d of %d: %s", opened.id, offset, end,
                            exc.strerror or exc)
                return
            if not piece:
                log.warning("artifact %s: its answer ended at byte %d of %d: the file is shorter", opened.id,
                            offset, end)
                return
            yield piece
            offset += len(piece)
    finally:
        opened.close()


def add_artifact_routes(app: QuartTrio, svc: Services) -> None:
    @app.get("/api/v1/artifacts/<aid>")
    async def artifact(aid: str) -> Response:
        check_artifact_id(aid, "artifact id")
        # The file is opened once: its size, its first bytes (its type, a 304, a range), its check
        # against the id and every byte sent come from that one descriptor, so a file swapped in
        # after the check is never what is sent.
        store = artifact_store(svc)
        opened = await artifact_io(aid, store.open, aid)
        sending = False  # (once the body is made, it owns the descriptor and closes it)
        try:
            size = opened.size
            head = await trio.to_thread.run_sync(opened.read_at, 0, min(size, HEAD_BYTES))
            # Its bytes never change under its id: a strong ETag (a revalidation is 304, which sends
            # no byte and is not checked), and one byte range (206) for a client resuming or showing
            # part of a large binary.
            if request.if_none_match.contains_weak(aid):
                return not_modified(aid)
            # (the type it was stored with is asked only of bytes that may be one of those served as
            # stored: every other answer is the same whether the projections are up to date or not)
            stored = await svc.projections.artifact_type(aid) if stored_type_claimed(head) else None
            kind = artifact_type(head, aid, stored, whole=size <= len(head))
            headers = {**kind, **ARTIFACT_GUARD, "ETag": f'"{aid}"', "Accept-Ranges": "bytes"}
            if_range = request.headers.get("If-Range")
            wanted = byte_range(request.headers.get("Range"), size) if if_range in (None, f'"{aid}"') else None
            if wanted == UNSATISFIABLE:
                refused = error_response("RANGE_NOT_SATISFIABLE", f"the range {request.headers['Range'][:80]!r} holds "
                                                                  f"none of the artifact's {size} bytes", 416)
                refused.headers["Content-Range"] = f"bytes */{size}"
                return refused
            # Every answer that sends bytes or says they can be had (whole, a range, a HEAD) is
            # checked against the id first: read whole the first time this file is answered, then
            # by the verdict the store remembers for it (damaged: 500, before a byte is sent).
            await artifact_io(aid, store.check, opened)
            if wanted is None:
                begin, end, status = 0, size, 200
            else:
                (begin, end), status = wanted, 206
                headers["Content-Range"] = f"bytes {begin}-{end - 1}/{size}"
            if request.method == "HEAD":  # (the same head, no body to read)
                resp = Response(b"", status, headers)
                resp.headers["Content-Length"] = str(end - begin)
                return resp
            if end <= len(head):  # (all of it in the head already read)
                return Response(head[begin:end], status, headers)
            sending = True
            return Response(artifact_pieces(opened, begin, end), status, {**headers, "Content-Length": str(end - begin)})
        finally:
            if not sending:
                opened.close()
