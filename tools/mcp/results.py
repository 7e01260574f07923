"""An MCP ``tools/call`` result as a Lens :class:`~tools.base.ToolResult`.

Content blocks map as: ``text`` → text part; ``image`` (PNG, JPEG, GIF, WebP up to 5 MiB) →
artifact + image part (a whole one of at most 8000 pixels a side, as ``view_image`` takes; else
a text line saying why it is not shown); any other binary (``audio``, a ``resource`` with a
``blob``, an image of another type) → artifact + a text line naming it; ``resource`` with ``text`` → text headed by its
URI; ``resource_link`` → a text line. A block that cannot be shown (a ``text`` block without a
string ``text``, a block of an unknown type, one that is not an object, a binary that is not
valid base64 or is above its cap) shows a note in its place. ``structuredContent`` becomes the
structured content, and, in a result whose content gives nothing (none, empty text, or notes
alone), its JSON is the text too. ``isError: true`` makes an error result (``MCP_TOOL_ERROR``)
carrying the server's content (content of notes alone: "reported an error without a message",
then the notes); ``isError`` null or absent is a success; one that is not a boolean (``"true"``,
``1``, an array, an object) makes the result malformed (``MCP_RESULT_INVALID``, naming its JSON
type).

Caps: the text of one result at most :data:`MAX_TEXT_BYTES` (the rest is cut, and the result
says so), at most :data:`MAX_BLOCKS` content blocks read and :data:`MAX_BINARIES` binaries
stored (the others are counted in one line), one binary at most :data:`MAX_BINARY_BYTES`,
structured content at most :data:`MAX_STRUCTURED_BYTES` of JSON. Text is made valid Unicode (a lone surrogate from a
``\\ud800`` escape could not be recorded).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import msgspec
import trio

from events import types as t
from events.secrets import Secrets
from runtime.atomicfile import why_not_written
from tools.artifacts import ArtifactStore
from tools.base import ToolResult, _unrecordable
from tools.files.image import fault as image_fault
from tools.files.image import sniff as sniff_image
from tools.json_values import MISSING, json_kind

MAX_TEXT_BYTES = 256 * 1024
MAX_IMAGE_BYTES = 5 * 1024 * 1024  # as view_image
MAX_BINARY_BYTES = 16 * 1024 * 1024
MAX_STRUCTURED_BYTES = 256 * 1024
# (a result of ten thousand 4-byte images stored ten thousand artifacts, each written and synced,
# and recorded as many artifact.stored events: half a minute past the call's timeout; and a
# quarter of a million one-character text blocks became as many parts of one event)
MAX_BLOCKS = 1000  # content blocks of one result read; the rest are counted, not read
MAX_BINARIES = 100  # binaries of one result stored as artifacts; the rest are counted, not stored


def _clean(text: Any) -> str:
    return str(text).encode("utf-8", "replace").decode("utf-8")


class _Builder:
    def __init__(self, artifacts: ArtifactStore, tool: str, secrets: Secrets) -> None:
        self.artifacts = artifacts
        self.secrets = secrets  # (text is scrubbed before the cap cuts it)
        self.tool = tool
        self.content: list[t.ContentPart] = []
        self.events: list[t._Event] = []
        self.text_bytes = 0
        self.cut = 0  # text bytes left out
        self.binaries = 0  # binaries stored
        self.binaries_left = 0  # binaries past MAX_BINARIES, not stored
        # Whether a block gave something (text, a link, a stored binary), not only notes of what
        # could not be shown: without it, structured content is the text and an error "has no message"
        self.gave = False

    def text(self, text: str, *, note: bool = False) -> None:
        """Add ``text`` (a ``note`` says what a block could not give: it is no content of its own)."""
        data = self.secrets.scrub_text(_clean(text)).encode("utf-8")
        room = MAX_TEXT_BYTES - self.text_bytes
        if len(data) > room:
            self.cut += len(data) - room
            data = data[:max(room, 0)]
        if data:
            self.gave = self.gave or not note
            self.text_bytes += len(data)
            self.content.append(t.TextPart(data.decode("utf-8", "ignore")))  # (a character cut at the cap: dropped)

    async def binary(self, b64: Any, mime: Any, what: str) -> None:
        mime = self.secrets.cut(_clean(mime or "application/octet-stream"), 100)
        try:
            data = base64.b64decode(str(b64), validate=True)
        except (binascii.Error, ValueError):
            self.text(f"[{what}: {mime}, not valid base64; left out]", note=True)
            return
        if len(data) > MAX_BINARY_BYTES:
            self.text(f"[{what}: {mime}, {len(data)} bytes, above the {MAX_BINARY_BYTES}-byte cap; left out]", note=True)
            return
        if self.binaries >= MAX_BINARIES:
            self.binaries_left += 1
            return
        self.binaries += 1
        self.gave = True
        aid = await trio.to_thread.run_sync(self.artifacts.put, data)
        image = sniff_image(data)
        stored = image or mime
        self.events.append(t.ArtifactStored(artifact_id=aid, sha256=aid, mime=stored, size=len(data), source="mcp"))
        # (an image a model is sent is a whole one, as view_image takes: a provider refuses any
        # other, and with it every later request of the session)
        if image is None or len(data) > MAX_IMAGE_BYTES:
            self.text(f"[{what}: {stored}, {len(data)} bytes, saved as artifact {aid}]")
        elif (wrong := await trio.to_thread.run_sync(image_fault, data)) is not None:
            self.text(f"[{what}: {stored}, {len(data)} bytes, saved as artifact {aid}; "
                      f"the image {wrong[1]}: not shown to the model]")
        else:
            self.content.append(t.ImagePart(aid, image))

    async def block(self, block: Any) -> None:
        if not isinstance(block, dict):
            self.text(f"[a content block that is not an object: {self.secrets.cut(_clean(block), 200)}]", note=True)
            return
        kind = block.get("type")
        if kind == "text":
            text = block.get("text", MISSING)
            if isinstance(text, str):
                self.text(text)
            else:  # (a note in its place, as for a block of another kind that cannot be shown)
                self.text("[a text block without text; left out]" if text is MISSING
                          else f"[a text block whose text is {json_kind(text)}, not a string; left out]", note=True)
        elif kind in ("image", "audio"):
            await self.binary(block.get("data", ""), block.get("mimeType"), kind)
        elif kind == "resource" and isinstance(block.get("resource"), dict):
            res = block["resource"]
            uri = self.secrets.cut(_clean(res.get("uri", "")), 2000)
            if "text" in res:
                self.text(f"[resource {uri}]\n{_clean(res['text'])}")
            else:
                await self.binary(res.get("blob", ""), res.get("mimeType"), f"resource {uri}")
        elif kind == "resource_link":
            name = self.secrets.cut(_clean(block.get("name", "")), 200)
            self.text(f"[resource link: {self.secrets.cut(_clean(block.get('uri', '')), 2000)}{f' ({name})' if name else ''}]")
        else:
            self.text(f"[a content block of type {self.secrets.cut(_clean(kind), 40)!r}, not shown]", note=True)


async def to_tool_result(result: Any, artifacts: ArtifactStore, tool: str,
                         secrets: Secrets | None = None) -> ToolResult:
    """Map a ``tools/call`` result; a malformed one is an ``MCP_RESULT_INVALID`` error result."""
    if not isinstance(result, dict) or not isinstance(result.get("content", []), list):
        return ToolResult.error("MCP_RESULT_INVALID", f"{tool} answered a result without a content list")
    is_error = result.get("isError")
    if is_error is None:  # (null as absent, as structuredContent's null and the project's null optional fields)
        is_error = False
    if not isinstance(is_error, bool):
        # (MCP's isError is a boolean: "true" or 1 read as success would hide a failure, and read
        # as an error would guess what a server meant; the server's answer is malformed, said so)
        return ToolResult.error("MCP_RESULT_INVALID", f"{tool} answered a result whose isError is "
                                                      f"{json_kind(is_error)}, not a boolean (true or false)")
    b = _Builder(artifacts, tool, secrets or Secrets())
    blocks = result.get("content", [])
    try:
        for block in blocks[:MAX_BLOCKS]:
            await b.block(block)
    except OSError as exc:  # (a full disk fails this call, not the session)
        return ToolResult.error("ARTIFACT_WRITE_FAILED", f"a binary {tool} returned could not be stored ({why_not_written(exc)})")
    structured, left_out = result.get("structuredContent"), None
    if structured is not None:
        problem = _unrecordable(structured)
        size = len(msgspec.json.encode(structured)) if problem is None else 0
        if problem is not None or size > MAX_STRUCTURED_BYTES:
            left_out = problem or f"{size} bytes of JSON, above the {MAX_STRUCTURED_BYTES}-byte cap"
            structured = None
    if structured is not None and not b.gave and len(blocks) <= MAX_BLOCKS:
        # (structured content alone, or with notes of blocks that could not be shown: MCP asks a
        # server to repeat it as text, and one that does not would answer the model nothing, which
        # sees a result's content only: it sees the JSON.
        # Before the notes below: scrubbing can lengthen it past the cap, which is then said)
        b.text(msgspec.json.encode(structured).decode())
    if b.cut:
        b.content.append(t.TextPart(f"[output truncated: {b.cut} more {'byte' if b.cut == 1 else 'bytes'} of text above the {MAX_TEXT_BYTES}-byte cap]"))
    if b.binaries_left:
        b.content.append(t.TextPart(f"[{b.binaries_left} more binaries left out: at most {MAX_BINARIES} "
                                    f"are stored per result]"))
    if len(blocks) > MAX_BLOCKS:
        b.content.append(t.TextPart(f"[{len(blocks) - MAX_BLOCKS} more content blocks left out: at most "
                                    f"{MAX_BLOCKS} are read per result]"))
    if left_out is not None:
        b.content.append(t.TextPart(f"[structured content left out: {left_out}]"))
    if is_error:
        if b.gave:
            message = (b.secrets.cut("".join(p.text for p in b.content if isinstance(p, t.TextPart)), 2000)
                       or f"{tool} reported an error without a message")  # (an image alone)
            content = b.content
        else:  # (notes alone are no message: said so, and the notes follow)
            message = f"{tool} reported an error without a message"
            content = [t.TextPart(f"MCP_TOOL_ERROR: {message}"), *b.content]
        return ToolResult(content,
                          {"error": {"code": "MCP_TOOL_ERROR", "message": message}, "structured": structured},
                          is_error=True, error_code="MCP_TOOL_ERROR", events=b.events)
    return ToolResult(b.content, structured, events=b.events)
