"""Request compilation shared by the wire protocols (F-MOD-2, F-EXE-6).

:func:`prepare` turns a :class:`~runtime.providers.base.ModelRequest` (system prompt + Working
Context items) into a neutral, protocol-free list of :class:`Entry` values, which each protocol
module renders into its SDK's request shape. What happens here, once for all protocols:

* **Order.** Entries follow the items' order. The request's ``system`` strings and the system
  items *before* the first conversation item are the *leading* system prompt; later system items
  (skill loads, instruction updates) keep their position and are marked ``leading=False`` —
  OpenAI renders them as system/developer messages in place, Anthropic as user content blocks
  beginning ``Lens instruction update:``.
* **One response, one assistant entry.** An assistant text and the tool calls of the same
  response (same event ``seq``) become one :class:`Entry` of kind ``assistant``.
* **Paired tool results.** Right after an assistant entry come the results of its calls, in call
  order. A call without a result item gets a synthetic error result
  (:data:`SYNTHETIC_RESULT_TEXT`) so the request stays valid; a result whose call is not in the
  context is left out (``diagnostics["dropped_results"]``).
* **Empty answers.** The item of an answer with neither text nor calls (status ``empty``) is left
  out (``diagnostics["empty_answers"]``): the providers refuse an empty assistant message.
* **Refused answers.** The entries of an answer whose items are ``refused`` (its stop reason was
  ``refusal``) and the results of its calls are marked ``refused``: Anthropic asks that such a
  turn be removed before going on, so its renderer leaves them out; the OpenAI protocols send
  them as any other.
* **Reasoning blocks.** The provider-native reasoning a response carried (signed Anthropic
  thinking blocks, encrypted Responses reasoning items; see ``ModelResult.reasoning_blocks``)
  rides on its assistant entry, tagged with the protocol it came from. Each protocol module sends
  back only its own (:func:`native_reasoning`), unchanged; blocks from another protocol (the
  session switched models) are left out.
* **Images.** Each :class:`~events.types.ImagePart` is loaded by artifact id, its SHA-256
  checked against the id (by the artifact store's ``get`` for a :class:`StoreImages` loader,
  once per file on disk; here for any other), and base64-encoded in memory only (never written
  back anywhere), all in a worker thread.
  A damaged artifact raises ``ProviderError("ARTIFACT_CORRUPT")`` before anything is sent.
  A model configured without image input gets a short text placeholder instead.
* **Images a service would refuse are not sent.** An image stays in the context and goes with
  every later request, so one the service refuses would fail each of them until it is snipped.
  Each image is read as :func:`tools.files.image.measure` reads it (whole, at most 8000 pixels a
  side; sent under the type its bytes say) and the protocol's :class:`ImageLimits` are applied
  (bytes of one image, images and bytes of images in one request, the side when a request holds
  many, an animated GIF where the service takes only still ones), the newest images kept first.
  An image not sent becomes a text naming it and why
  (:data:`IMAGE_WITHHELD`); ``diagnostics["images_withheld"]`` lists them
  (``{"artifact_id", "why"}``, once per artifact: the images that are not whole in the order of
  the request, then those past the limits).

Nothing here changes the items it reads (they are the persisted context); compiling the same
request twice gives the same entries.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal

import trio

from events import types as t
from projections.session_state import EMPTY_ANSWER, REFUSED, Item, item_parts, text_of
from tools.artifacts import ArtifactError, ArtifactStore
from tools.files.image import MIME_TYPES, Malformed, Measured, measure
from tools.json_values import lone_surrogate, scalars

from .base import ModelRequest, ProviderError
from .names import CallIds, ToolNames

INSTRUCTION_PREFIX = "Lens instruction update:"
SYNTHETIC_RESULT_TEXT = (
    "no result (interrupted): Lens holds no result for this tool call; it may not have run, or "
    "may have partly run. Check the current state before retrying."
)
SUMMARY_PREFIX = "Summary of the earlier conversation (it replaced the messages it summarises):"
IMAGE_MIMES = frozenset(MIME_TYPES)
IMAGE_OMITTED = "[image {id} omitted: the selected model does not accept image input]"
IMAGE_WITHHELD = "[image {id} not sent: {why}]"

LoadImage = Callable[[str], Awaitable[bytes]]


class StoreImages:
    """The image loader over an artifact store. The store checks the bytes against their id
    (``ARTIFACT_CORRUPT`` otherwise) and does so once per file on disk, so :func:`prepare` does
    not hash them again, as it does a loader's of any other kind: an image a long session sends
    with every request is not hashed for every request. Nor is it measured again (its structure
    walked, :func:`tools.files.image.measure`): an id is the SHA-256 of the bytes the store
    checked, so what was found for it holds for as long as the id does; the last
    :data:`MEASURED_IDS` ids are kept. Reading, measuring and encoding run in a worker thread,
    never on the event loop (a GIF of many frames takes tens of milliseconds to walk)."""

    MEASURED_IDS = 4096

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store
        self._found: dict[str, Measured | str] = {}  # id -> (mime, width, height, frames) | why not
        self._lock = threading.Lock()
        self.measurements = 0  # images walked (not answered from the kept ids): for tests and measurements

    async def image(self, artifact_id: str) -> Image | Withheld:
        """The artifact as sent, or why it is not (see :func:`prepare`)."""
        return await trio.to_thread.run_sync(self._image, artifact_id)

    def _image(self, artifact_id: str) -> Image | Withheld:
        data = self.store.get(artifact_id)
        with self._lock:
            found = self._found.get(artifact_id)
        if found is None:
            found = _measure(data)
            with self._lock:
                self.measurements += 1
                if len(self._found) >= self.MEASURED_IDS:
                    del self._found[next(iter(self._found))]  # (the oldest)
                self._found[artifact_id] = found
        return _image(artifact_id, data, found)


ImageLoader = LoadImage | StoreImages
"""What :func:`prepare` loads images with: the artifact store's (:class:`StoreImages`, which checks
and measures each id once) or any function from an id to its bytes (checked and measured here)."""


@dataclass(frozen=True)
class ImageLimits:
    """What one service takes of images in a request: bytes of one image and of all (before
    base64), images in one request, for a request holding more than ``many`` images the pixels of
    a side (0: no such rule), and whether it takes an animated GIF (one of more than one frame).
    See the module docstring."""

    service: str
    each: int
    count: int
    total: int
    many: int = 0
    many_side: int = 0
    animated: bool = True


# Anthropic: 5 MiB of base64 an image (3,932,160 bytes before it), 100 images and 32 MB a request
# (18 MiB of images is 24 MiB of base64, leaving the rest to the text), and at most 2000 pixels a
# side once a request holds more than 20 images. OpenAI: 20 MB an image, 500 images and 50 MB of
# image bytes a request, and a GIF only when it is not animated.
ANTHROPIC_IMAGES = ImageLimits("Anthropic", each=5 * 1024 * 1024 * 3 // 4, count=100, total=18 * 1024 * 1024,
                               many=20, many_side=2000)
OPENAI_IMAGES = ImageLimits("OpenAI", each=20_000_000, count=500, total=50_000_000, animated=False)


@dataclass(frozen=True)
class Image:
    """An image ready to send: bytes verified and base64-encoded, in memory only; ``mime`` is
    the type its bytes say, ``size`` their length before base64, ``frames`` a GIF's frames (1
    for the other types)."""

    artifact_id: str
    mime: str
    data: str  # base64
    size: int
    width: int
    height: int
    frames: int = 1

    @property
    def data_url(self) -> str:
        return f"data:{self.mime};base64,{self.data}"


@dataclass(frozen=True)
class Withheld:
    """An image not sent, and why (the text completing "not sent: ")."""

    artifact_id: str
    why: str

    @property
    def part(self) -> t.TextPart:
        return t.TextPart(IMAGE_WITHHELD.format(id=self.artifact_id, why=self.why))


Part = t.TextPart | Image


@dataclass
class Entry:
    kind: Literal["system", "user", "summary", "assistant", "result"]
    parts: list[Part] = field(default_factory=list)
    leading: bool = False  # system entries: part of the leading system prompt
    source: str = ""  # system entries: where the instruction came from
    calls: list[t.ToolCall] = field(default_factory=list)  # assistant entries (internal names)
    call_id: str = ""  # result entries
    is_error: bool = False
    synthetic: bool = False
    item_ids: list[str] = field(default_factory=list)
    # assistant entries: ``{"protocol", "block"}`` dicts as recorded (the persisted items' own
    # objects: read them through :func:`native_reasoning`, which copies)
    reasoning_blocks: list[dict[str, Any]] = field(default_factory=list)
    # assistant entries of an answer the provider refused (its items ``refused``), and the
    # results of their calls: Anthropic's requests leave them out (see :mod:`.anthropic_messages`)
    refused: bool = False

    @property
    def text(self) -> str:
        # Joined as the items' own text is (session view, history): parts never run together.
        return text_of(p for p in self.parts if isinstance(p, t.TextPart))


@dataclass
class Compiled:
    entries: list[Entry]
    names: ToolNames
    tools: list[dict[str, Any]]  # the request's tools, unchanged (internal names)
    diagnostics: dict[str, Any] = field(default_factory=dict)

    def call_ids(self, *, chat: bool = False) -> CallIds:
        """The ids the request's calls and results are sent under (see :class:`CallIds`)."""
        return CallIds([c.call_id for e in self.entries for c in e.calls]
                       + [e.call_id for e in self.entries if e.kind == "result"], chat=chat)


def instruction_text(entry: Entry) -> str:
    """A later system instruction as Anthropic sees it: a user text block with a marker."""
    origin = f" ({entry.source})" if entry.source else ""
    return f"{INSTRUCTION_PREFIX}{origin}\n{entry.text}"


def summary_text(entry: Entry) -> str:
    return f"{SUMMARY_PREFIX}\n{entry.text}"


async def prepare(request: ModelRequest, *, load_image: ImageLoader | None, images: bool,
                  limits: ImageLimits | None = None) -> Compiled:
    """Compile ``request`` into protocol-free entries (see the module docstring); ``limits`` are
    the service's for images (none: each whole image is sent).

    Raises :class:`ProviderError` ``ARTIFACT_CORRUPT`` / ``ARTIFACT_NOT_FOUND`` for an image that
    cannot be loaded as recorded, ``TOOL_NAME_COLLISION`` if two tool ids would share a native name.
    """
    names = ToolNames((tool["name"] for tool in request.tools), request.tool_aliases)
    loaded: dict[str, Image | Withheld] = {}
    withheld: list[Withheld] = []
    stats = {"images": 0, "synthetic_results": 0, "dropped_results": 0, "instruction_updates": 0, "empty_answers": 0}

    async def parts_of(item: Item) -> list[Part]:
        src: list[t.ContentPart] = item_parts(item)
        out: list[Part] = []
        for p in src:
            if isinstance(p, t.TextPart):
                out.append(p)
            elif not images:
                out.append(t.TextPart(IMAGE_OMITTED.format(id=p.artifact_id)))
            else:
                img = loaded.get(p.artifact_id)
                if img is None:
                    img = loaded[p.artifact_id] = await _load(p, load_image)
                if isinstance(img, Image):
                    stats["images"] += 1
                    out.append(img)
                else:
                    withheld.append(img)
                    out.append(img.part)
        return out

    entries: list[Entry] = [Entry("system", [t.TextPart(s)], leading=True, source="prompt") for s in request.system if s]
    items = request.items
    results: dict[str, Item] = {}
    for it in items:
        if it.role == "tool_result" and it.call_id is not None:
            results.setdefault(it.call_id, it)
    called: set[str] = {it.call.call_id for it in items if it.role == "tool_call" and it.call is not None}
    used: set[str] = set()
    conversation_started = False
    i = 0
    while i < len(items):
        it = items[i]
        if it.role == "system":
            entries.append(Entry("system", await parts_of(it), leading=not conversation_started,
                                 source=it.source, item_ids=[it.id]))
            if conversation_started:
                stats["instruction_updates"] += 1
            i += 1
            continue
        conversation_started = True
        if it.role in ("user", "summary"):
            entries.append(Entry(it.role, await parts_of(it), item_ids=[it.id]))
            i += 1
        elif it.role == "assistant" and it.status == EMPTY_ANSWER:
            # An answer with neither text nor calls (its one item): an empty assistant message is
            # refused (OpenAI Chat wants content or calls, a Responses reasoning item its output)
            # and tells the model nothing, so it is left out with its reasoning, as before it had
            # an item.
            stats["empty_answers"] += 1
            i += 1
        elif it.role in ("assistant", "tool_call"):
            # One response: its text (if any) and the calls recorded with the same seq.
            seq = it.seq
            entry = Entry("assistant")
            while i < len(items) and items[i].role in ("assistant", "tool_call") and items[i].seq == seq:
                cur = items[i]
                entry.reasoning_blocks.extend(cur.reasoning_blocks)
                entry.refused = entry.refused or cur.status == REFUSED
                if cur.role == "assistant":
                    entry.parts.extend(await parts_of(cur))
                elif cur.call is not None:
                    entry.calls.append(cur.call)
                    names.add_called(cur.call.name)
                entry.item_ids.append(cur.id)
                i += 1
            entries.append(entry)
            for call in entry.calls:
                res = results.get(call.call_id)
                if res is not None and call.call_id not in used:
                    used.add(call.call_id)
                    entries.append(Entry("result", await parts_of(res), call_id=call.call_id,
                                         is_error=res.is_error, item_ids=[res.id], refused=entry.refused))
                else:
                    stats["synthetic_results"] += 1
                    entries.append(Entry("result", [t.TextPart(SYNTHETIC_RESULT_TEXT)], call_id=call.call_id,
                                         is_error=True, synthetic=True, refused=entry.refused))
        elif it.role == "tool_result":
            if it.call_id not in called:
                stats["dropped_results"] += 1
            i += 1  # placed right after its call (or dropped: a lone result is malformed)
        else:  # an unknown role: keep its text as user content rather than lose it
            entries.append(Entry("user", await parts_of(it), item_ids=[it.id]))
            i += 1
    if limits is not None:
        fitted = _fit(entries, limits)
        stats["images"] -= len(fitted)
        withheld.extend(fitted)
    diagnostics: dict[str, Any] = {k: v for k, v in stats.items() if v}
    if withheld:
        first: dict[str, Withheld] = {}
        for w in withheld:
            first.setdefault(w.artifact_id, w)
        diagnostics["images_withheld"] = [{"artifact_id": w.artifact_id, "why": w.why} for w in first.values()]
    return Compiled(entries, names, list(request.tools), diagnostics)


def _fit(entries: list[Entry], limits: ImageLimits) -> list[Withheld]:
    """Replace the images ``limits`` leave no room for with :data:`IMAGE_WITHHELD` texts, the
    newest images kept first; what was replaced, one per image part."""
    spots = [(e, i, p) for e in entries for i, p in enumerate(e.parts) if isinstance(p, Image)]
    kept: list[tuple[Entry, int, Image]] = []  # newest first
    total = 0
    out: list[Withheld] = []

    def withhold(entry: Entry, i: int, img: Image, why: str) -> None:
        out.append(Withheld(img.artifact_id, why))
        entry.parts[i] = out[-1].part

    service = limits.service
    for entry, i, img in reversed(spots):
        if img.frames > 1 and not limits.animated:
            withhold(entry, i, img, f"the image is an animated GIF ({img.frames} frames); {service} takes only still GIFs")
        elif img.size > limits.each:
            withhold(entry, i, img, f"it is {img.size} bytes; {service} takes at most {limits.each} bytes an image")
        elif len(kept) == limits.count:
            withhold(entry, i, img, f"{service} takes at most {limits.count} images a request, "
                                    f"and newer images of the context fill them")
        elif total + img.size > limits.total:
            withhold(entry, i, img, f"{service} takes at most {limits.total} bytes of images a request, "
                                    f"and with the newer images of the context it would be {total + img.size}")
        else:
            kept.append((entry, i, img))
            total += img.size
    count = len(kept)
    for entry, i, img in reversed(kept):  # (the oldest first)
        if not limits.many or count <= limits.many:
            break
        if max(img.width, img.height) > limits.many_side:
            withhold(entry, i, img, f"it is {img.width}x{img.height} pixels; in a request of more than "
                                    f"{limits.many} images {service} takes at most {limits.many_side} a side")
            count -= 1
    return out


async def _load(part: t.ImagePart, load_image: ImageLoader | None) -> Image | Withheld:
    if part.mime not in IMAGE_MIMES:  # (not loaded: an artifact of another type may be large)
        return Withheld(part.artifact_id, f"it is recorded as {part.mime!r}, none of {', '.join(sorted(IMAGE_MIMES))}")
    if load_image is None:
        raise ProviderError("ARTIFACT_NOT_FOUND", f"artifact {part.artifact_id} cannot be loaded: no artifact store is configured")
    try:
        if isinstance(load_image, StoreImages):
            return await load_image.image(part.artifact_id)
        data = await load_image(part.artifact_id)
    except ProviderError:
        raise
    except (ArtifactError, OSError) as exc:  # (anything else is a defect, not a missing artifact)
        code = getattr(exc, "code", None) or "ARTIFACT_NOT_FOUND"
        raise ProviderError(code, getattr(exc, "message", None) or str(exc)) from None
    return await trio.to_thread.run_sync(_checked_image, part.artifact_id, data)


def _checked_image(artifact_id: str, data: bytes) -> Image | Withheld:
    # Checked here for a loader that is not the store (the store checks what it reads): nothing
    # damaged is ever sent.
    if hashlib.sha256(data).hexdigest() != artifact_id:
        raise ProviderError("ARTIFACT_CORRUPT", f"artifact {artifact_id} does not match its SHA-256; the request was not sent")
    return _image(artifact_id, data, _measure(data))


def _measure(data: bytes) -> Measured | str:
    """Read as view_image reads an image: one it would refuse (stored by an earlier build, or by
    hand) is not sent (why, as a string), and its type is the one its bytes say."""
    try:
        return measure(data)
    except Malformed as exc:
        return f"the image {exc}"


def _image(artifact_id: str, data: bytes, found: Measured | str) -> Image | Withheld:
    if isinstance(found, str):
        return Withheld(artifact_id, found)
    return Image(artifact_id, found.mime, base64.b64encode(data).decode("ascii"), len(data), found.width,
                 found.height, found.frames)


def native_reasoning(compiled: Compiled, entry: Entry, protocol: str) -> list[dict[str, Any]]:
    """The native reasoning blocks of assistant ``entry`` that came from ``protocol``, in order,
    as deep copies (the renderer may add keys without touching the persisted items). Blocks of
    another protocol are counted in ``compiled.diagnostics["foreign_reasoning_blocks"]``."""
    out: list[dict[str, Any]] = []
    for rb in entry.reasoning_blocks:
        block = rb.get("block") if isinstance(rb, dict) else None
        if isinstance(block, dict) and rb.get("protocol") == protocol:
            out.append(copy.deepcopy(block))
        else:
            compiled.diagnostics["foreign_reasoning_blocks"] = compiled.diagnostics.get("foreign_reasoning_blocks", 0) + 1
    return out


def arguments_object(arguments: str) -> dict[str, Any] | None:
    """A call's recorded arguments as the JSON object they are, or ``None`` when they are not one
    that any JSON parser reads: not JSON (cut short, trailing text, single quotes…), JSON that is no
    object (``[1]``, ``"x"``), ``NaN``/``Infinity`` (Python's extension, not JSON), a string with
    a lone surrogate escape (``"\\ud800"``), nesting or an integer too large to read. Blank
    arguments are the empty object (the tool runner reads them so)."""
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments, parse_constant=_not_json)
    except (ValueError, RecursionError):  # (JSONDecodeError is a ValueError, as is a 5000-digit integer)
        return None
    if not isinstance(value, dict) or _lone_surrogate(value):
        return None
    return value


def call_input(compiled: Compiled, call: t.ToolCall) -> dict[str, Any]:
    """Anthropic's ``tool_use.input`` for ``call``: its arguments object; for arguments that are
    none, the empty object (see :func:`call_arguments`)."""
    value = arguments_object(call.arguments)
    if value is None:
        _count_replaced(compiled)
        return {}
    return value


def call_arguments(compiled: Compiled, call: t.ToolCall) -> str:
    """The OpenAI protocols' ``arguments`` text for ``call``: as recorded when it is a JSON object,
    else ``"{}"``. OpenAI takes any text there, but OpenAI-compatible servers (vLLM's chat
    templates, llama.cpp, others) parse it and refuse the whole request, which would fail every
    later request of the session. The model is not left guessing: such a call was answered with a
    ``INVALID_ARGUMENT`` result that says what was wrong and quotes what it sent, and the
    log keeps the arguments as the model sent them."""
    if arguments_object(call.arguments) is None:
        _count_replaced(compiled)
        return "{}"
    return call.arguments if call.arguments.strip() else "{}"


def _count_replaced(compiled: Compiled) -> None:
    compiled.diagnostics["invalid_arguments_sent_empty"] = compiled.diagnostics.get("invalid_arguments_sent_empty", 0) + 1


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _lone_surrogate(value: Any) -> bool:
    return any(isinstance(v, str) and lone_surrogate(v) is not None for v in scalars(value))


def request_tails(entries: list[Entry]) -> list[int]:
    """Indexes of the last non-assistant entry before each assistant entry: where each earlier
    request of this conversation ended (its input's tail)."""
    tails: list[int] = []
    for i, e in enumerate(entries):
        if e.kind == "assistant" and i > 0 and entries[i - 1].kind != "assistant":
            tails.append(i - 1)
    return tails
