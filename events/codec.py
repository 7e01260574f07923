"""Event body codec: msgspec MessagePack inside one checksummed zstd frame.

A stored body is exactly one zstd frame with its content size and a content checksum, optionally
compressed with a dictionary whose id is recorded both in the frame header and in the row.
Decoding is bounded: a frame declaring more than ``max_event_bytes`` is refused before any
allocation, a frame of unknown size is decompressed into a buffer capped at that limit, and
trailing bytes (a second frame, garbage) are refused.

Codec instances are cheap to share: (de)compressors live in thread-local slots, so the trio
thread can encode while worker threads decode.
"""

from __future__ import annotations

import base64
import math
import struct
import threading
from dataclasses import dataclass
from operator import getitem, itemgetter
from typing import Any, Mapping, Sequence

import msgspec
import zstandard

from .errors import AppendRejected, CorruptEvent, EventTooLarge, TooFewSamples, UnknownDictionary, quoted
from .types import KIND_NAME_RE, KIND_TO_TYPE, Event, Opaque, _Event, kind_of

DEFAULT_MAX_EVENT_BYTES = 32 * 1024 * 1024
_frame_parameters = zstandard.get_frame_parameters
TAG_OF = {cls: tag for tag, cls in KIND_TO_TYPE.items()}  # event type -> its kind
DEFAULT_LEVEL = 3
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # the first four bytes of every zstd data frame (0xFD2FB528)
NO_DICTIONARY = 0
# At most this many bytes (or one maximum-size event) are decompressed for one page of a read:
# the rows' raw_size columns size the buffers, so forged sizes cannot make a read allocate more.
PAGE_DECOMPRESS_BUDGET = 32 * 1024 * 1024
# From this many bodies on, compress_many uses one multi-frame call (it costs ~10 µs to set up).
MULTI_COMPRESS_MIN = 8


@dataclass(frozen=True, slots=True)
class Encoded:
    """An event ready to store: its kind, the framed body and the size before compression."""

    kind: str
    body: bytes
    raw_size: int
    dict_id: int


class Codec:
    """Encode events to stored bodies and back.

    ``dictionaries`` maps zstd dictionary ids to their bytes; ``active_dict_id`` (if any) is
    used for new bodies. Decoding raises :class:`CorruptEvent` (or a subclass) naming the
    problem; callers that know the row add its ``seq`` with ``err.at(seq)``.
    """

    def __init__(
        self,
        *,
        level: int = DEFAULT_LEVEL,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        dictionaries: Mapping[int, bytes] | None = None,
        active_dict_id: int | None = None,
        max_append_bytes: int | None = None,
    ) -> None:
        self.level = level
        # The bound of decoding (decompression never allocates more) and, unless
        # ``max_append_bytes`` says otherwise, of new events too. They differ when a log's limit
        # was lowered: events stored under the higher one must stay readable.
        self.max_event_bytes = max_event_bytes
        self.max_append_bytes = max_event_bytes if max_append_bytes is None else max_append_bytes
        self._dicts: dict[int, zstandard.ZstdCompressionDict] = {}
        self._prepared: dict[int, zstandard.ZstdCompressionDict] = {}  # for compressing
        self._damaged: dict[int, str] = {}  # stored dictionaries that could not be loaded
        for dict_id, data in (dictionaries or {}).items():
            self.add_dictionary(dict_id, data)
        if active_dict_id is not None and active_dict_id not in self._dicts:
            raise ValueError(f"active dictionary {active_dict_id} is not among the dictionaries")
        self.active_dict_id = active_dict_id or NO_DICTIONARY
        self._local = threading.local()
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(Event)
        self._any_decoder = msgspec.msgpack.Decoder(ext_hook=_ext_as_data)

    # ------------------------------------------------------------------ dictionaries

    def mark_damaged(self, dict_id: int, reason: str) -> None:
        """Record that the stored dictionary ``dict_id`` is unusable (see
        :func:`usable_dictionaries`), so bodies needing it name that instead of a missing one."""
        self._damaged[dict_id] = reason

    def _missing(self, dict_id: int) -> UnknownDictionary:
        reason = self._damaged.get(dict_id)
        if reason is not None:
            return UnknownDictionary(f"body needs zstd dictionary {dict_id}, whose stored bytes are damaged ({reason})")
        return UnknownDictionary(f"body needs zstd dictionary {dict_id}, which this store does not hold")

    def add_dictionary(self, dict_id: int, data: bytes) -> None:
        d = zstandard.ZstdCompressionDict(data)
        if d.dict_id() != dict_id:
            raise ValueError(f"dictionary bytes carry id {d.dict_id()}, not {dict_id}")
        self._dicts[dict_id] = d

    def use_dictionary(self, dict_id: int | None) -> None:
        """Compress new bodies with ``dict_id`` (``None``: no dictionary)."""
        if dict_id and dict_id not in self._dicts:
            raise ValueError(f"unknown dictionary {dict_id}")
        self.active_dict_id = dict_id or NO_DICTIONARY
        self._local.__dict__.pop("compressor", None)

    @property
    def dictionary_ids(self) -> list[int]:
        return sorted(self._dicts)

    def _compressor(self) -> zstandard.ZstdCompressor:
        return self._compressor_for()[0]

    def _compressor_for(self) -> tuple[zstandard.ZstdCompressor, int]:
        """This thread's compressor and the dictionary id it compresses with (read once, so a
        dictionary switched by another thread meanwhile never mislabels a body)."""
        local = self._local
        active = self.active_dict_id
        c = getattr(local, "compressor", None)
        if c is None or getattr(local, "compressor_dict", None) != active:
            kwargs: dict[str, Any] = {}
            if active:
                kwargs["dict_data"] = self._compression_dict(active)
            c = zstandard.ZstdCompressor(
                level=self.level, write_checksum=True, write_content_size=True, **kwargs
            )
            local.compressor = c
            local.compressor_dict = active
        return c, active

    def _compression_dict(self, dict_id: int) -> zstandard.ZstdCompressionDict:
        """Dictionary ``dict_id`` prepared once for compressing at this codec's level.

        Without it every ``multi_compress_to_buffer`` call loads the dictionary again
        (~1.5 µs more per ~1 KiB event); the frames are byte-identical either way. A separate
        object from the one decompressors use, prepared before any compressor sees it (zstd
        must not re-prepare a dictionary a compressor holds); two threads racing here each
        build their own, which is harmless.
        """
        prepared = self._prepared.get(dict_id)
        if prepared is None:
            prepared = zstandard.ZstdCompressionDict(self._dicts[dict_id].as_bytes())
            prepared.precompute_compress(level=self.level)
            self._prepared[dict_id] = prepared
        return prepared

    def _decompressor(self, dict_id: int) -> zstandard.ZstdDecompressor:
        cache = getattr(self._local, "decompressors", None)
        if cache is None:
            cache = self._local.decompressors = {}
        d = cache.get(dict_id)
        if d is None:
            kwargs: dict[str, Any] = {}
            if dict_id:
                if dict_id not in self._dicts:
                    raise self._missing(dict_id)
                kwargs["dict_data"] = self._dicts[dict_id]
            d = cache[dict_id] = zstandard.ZstdDecompressor(**kwargs)
        return d

    # ------------------------------------------------------------------ encode

    def pack(self, event: _Event) -> bytes:
        """MessagePack of the event (its ``kind`` tag included), uncompressed."""
        return self._encoder.encode(event)

    def encode(self, event: _Event) -> Encoded:
        """Frame ``event`` for storage (:meth:`pack_checked`, then compress).

        Raises :class:`AppendRejected` as :meth:`pack_checked` does.
        """
        raw = self.pack_checked(event)
        compressor, dict_id = self._compressor_for()
        return Encoded(kind_of(event), compressor.compress(raw), len(raw), dict_id)

    def pack_checked(self, event: _Event) -> bytes:
        """The MessagePack of ``event``, checked so that it can be stored and decoded again.

        Raises :class:`AppendRejected` when it cannot be encoded, does not match its own schema
        (msgspec does not type-check at construction, and a mistyped body stored now could never
        be decoded again), or is larger than ``max_append_bytes``.
        """
        try:
            raw = self._encoder.encode(event)
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError, RecursionError) as exc:
            raise AppendRejected(f"{kind_of(event)} event cannot be encoded ({exc})") from None
        try:
            self._decoder.decode(raw)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
            raise AppendRejected(f"{kind_of(event)} event does not match its schema ({exc})") from None
        if len(raw) > self.max_append_bytes:
            raise AppendRejected(
                f"{kind_of(event)} event is {len(raw)} bytes, over the maximum event size "
                f"of {self.max_append_bytes} bytes",
                size=len(raw), limit=self.max_append_bytes,
            )
        return raw

    def compress_many(self, raws: Sequence[bytes]) -> tuple[list[bytes], int]:
        """Frame each of ``raws`` (checked MessagePack) and name the dictionary used.

        Many bodies are compressed in one call that holds no GIL throughout (one hand-off for
        the whole batch instead of one per body); the frames are the same as :meth:`encode`'s.
        """
        compressor, dict_id = self._compressor_for()
        if len(raws) < MULTI_COMPRESS_MIN:
            return [compressor.compress(raw) for raw in raws], dict_id
        frames = compressor.multi_compress_to_buffer(list(raws))
        return [frames[i].tobytes() for i in range(len(raws))], dict_id

    # ------------------------------------------------------------------ decode

    def decompress(self, body: bytes, dict_id: int = NO_DICTIONARY) -> bytes:
        """The raw MessagePack of a stored body, bounded by ``max_event_bytes``."""
        try:
            params = zstandard.get_frame_parameters(body)
        except zstandard.ZstdError as exc:
            raise CorruptEvent(f"body is not a zstd frame ({exc})") from None
        if body[:4] != ZSTD_MAGIC:  # (what else the call above takes: a skippable frame)
            magic = int.from_bytes(body[:4], "little")
            raise CorruptEvent(f"body starts with a zstd skippable frame (magic 0x{magic:08X}), not a data frame")
        if params.dict_id != dict_id:
            if params.dict_id and params.dict_id not in self._dicts:
                raise self._missing(params.dict_id)
            raise CorruptEvent(
                f"frame names dictionary {params.dict_id} but the row records {dict_id}"
            )
        if not params.has_checksum:
            raise CorruptEvent("zstd frame carries no content checksum")
        size = params.content_size
        limit = self.max_event_bytes
        if size != zstandard.CONTENTSIZE_UNKNOWN and size > limit:
            raise EventTooLarge(
                f"frame declares {size} bytes, over the maximum event size of {limit} bytes"
            )
        d = self._decompressor(dict_id)
        if size == zstandard.CONTENTSIZE_UNKNOWN:
            return self._decompress_unknown_size(d, body, limit)
        try:
            raw = d.decompress(body, allow_extra_data=False)
        except zstandard.ZstdError as exc:
            text = str(exc)
            if "unused data" in text:
                raise CorruptEvent(f"trailing bytes after the zstd frame ({text})") from None
            raise CorruptEvent(f"zstd frame does not decompress ({text})") from None
        if len(raw) != size:
            raise CorruptEvent(f"frame declares {size} bytes but holds {len(raw)}")
        return raw

    @staticmethod
    def _decompress_unknown_size(d: zstandard.ZstdDecompressor, body: bytes, limit: int) -> bytes:
        # Lens never writes such frames; they come from elsewhere, so feed the input in tiny
        # slices: one slice can expand to a few MiB at most, and we stop at `limit`.
        dobj = d.decompressobj()
        out = bytearray()
        step = 64
        try:
            for i in range(0, len(body), step):
                out += dobj.decompress(body[i : i + step])
                if len(out) > limit:
                    raise EventTooLarge(
                        f"frame of unknown size decompresses past the maximum event size of "
                        f"{limit} bytes"
                    )
                if dobj.eof:
                    rest = dobj.unused_data + body[i + step :]
                    if rest:
                        raise CorruptEvent(f"{len(rest)} trailing bytes after the zstd frame")
                    return bytes(out)
        except zstandard.ZstdError as exc:
            raise CorruptEvent(f"zstd frame does not decompress ({exc})") from None
        raise CorruptEvent("zstd frame is truncated")

    def decode_raw(self, kind: str, raw: bytes) -> _Event | Opaque:
        """Decode MessagePack ``raw`` stored under ``kind``."""
        if kind not in KIND_TO_TYPE:
            if not KIND_NAME_RE.fullmatch(kind):
                raise CorruptEvent(f"row kind {quoted(kind)} is no event kind (at most 128 letters, digits, "
                                   f"'_', '.', ':' or '-')")
            try:
                data = self._any_decoder.decode(raw)
            except msgspec.DecodeError as exc:
                raise CorruptEvent(f"body of unknown kind {kind!r} is not MessagePack ({exc})") from None
            except RecursionError:
                raise CorruptEvent(f"body of unknown kind {kind!r} nests too deeply to decode") from None
            # Whatever a newer Lens writes is a tagged struct too: a map whose tag is the row's kind.
            if not isinstance(data, dict):
                raise CorruptEvent(f"body of unknown kind {kind!r} is not a MessagePack map "
                                   f"(a {type(data).__name__})")
            if "kind" not in data:
                raise CorruptEvent(f"body of unknown kind {kind!r} carries no kind tag")
            if data["kind"] != kind:
                raise CorruptEvent(f"row kind {kind!r} but body holds {quoted(data['kind'])}")
            return Opaque(kind, _jsonable(data))
        try:
            event = self._decoder.decode(raw)
        except msgspec.ValidationError as exc:
            raise CorruptEvent(f"{kind} body does not match its schema ({exc})") from None
        except msgspec.DecodeError as exc:
            raise CorruptEvent(f"{kind} body is not valid MessagePack ({exc})") from None
        except RecursionError:
            raise CorruptEvent(f"{kind} body nests too deeply to decode") from None
        if kind_of(event) != kind:
            raise CorruptEvent(f"row kind {kind!r} but body holds {kind_of(event)!r}")
        return event

    def plan_frames(self, rows: Sequence[tuple[Any, ...]]) -> FramePlan:
        """Group log rows (tuples in ``ROW_COLUMNS`` order) for :meth:`decompress_rows`.

        A row joins a group only if its kind is known, its ``raw_size`` is within
        ``max_event_bytes`` (the size zstd is then held to) and the plan's remaining
        :data:`PAGE_DECOMPRESS_BUDGET`, its dictionary is loaded, its frame header has a
        content checksum and a dictionary id exactly when the row names one, and its body is
        exactly one frame. The common page (one dictionary, every frame a single block) is
        checked a column at a time (:meth:`_plan_page`); any other page row by row.
        """
        plan = self._plan_page(rows)
        return plan if plan is not None else self._plan_rows(rows)

    def _plan_page(self, rows: Sequence[tuple[Any, ...]]) -> FramePlan | None:
        """The plan of a page whose rows all share one dictionary and whose frames are all one
        block (raw or compressed), checked with C-level passes over the page; ``None`` otherwise.

        Exactly one frame per body, without walking each one: a row's frame of one last block
        is ``header + 3 + block size + 4`` bytes (``c``), read from its descriptor byte and block
        header. zstd then decompresses each frame from its body alone and fails the whole
        group unless every frame ends within its body (``c <= n``, its length) — so the page's
        ``sum(c) == sum(n)`` means ``c == n`` for every row: no trailing bytes, no second
        frame. (A failed group takes the row-by-row path, which names the problem.)
        """
        if not rows:
            return None
        dict_ids = set(map(_DICT_ID, rows))
        if len(dict_ids) != 1:
            return None
        dict_id = dict_ids.pop()
        if type(dict_id) is not int or (dict_id and dict_id not in self._dicts) \
                or not _KNOWN_KINDS.issuperset(map(_KIND, rows)):
            return None
        sizes = list(map(_RAW_SIZE, rows))
        limit = self.max_event_bytes
        bodies = list(map(_BODY, rows))
        try:  # a mistyped column fails one of these (TypeError, struct.error): row by row then
            if min(sizes) <= 0 or max(sizes) > limit or sum(sizes) > max(PAGE_DECOMPRESS_BUDGET, limit):
                return None
            packed_sizes = struct.pack(f"={len(sizes)}Q", *sizes)  # integers only
            descriptors = bytes(map(_DESCRIPTOR, bodies))
            for fhd in set(descriptors):
                if not _HEADER_SIZE[fhd] or (not fhd & 3) != (not dict_id):  # checksum; dict id
                    return None
            offsets = descriptors.translate(_HEADER_SIZE)  # each block header's position
            low = bytes(map(getitem, bodies, offsets))
            if low.translate(None, _ONE_LAST_BLOCK):  # some block is not last, or is RLE
                return None
            mid = bytes(map(getitem, bodies, offsets.translate(_PLUS_1)))
            high = bytes(map(getitem, bodies, offsets.translate(_PLUS_2)))
        except (IndexError, TypeError, struct.error):  # e.g. a body too short to hold its header
            return None
        block_sizes = (sum(low) - sum(low.translate(_LOW_3_BITS)) + (sum(mid) << 8) + (sum(high) << 16)) >> 3
        if sum(offsets) + 7 * len(rows) + block_sizes != sum(map(len, bodies)):
            return None
        return FramePlan(len(rows), [(dict_id, range(len(rows)), bodies, packed_sizes)])

    def _plan_rows(self, rows: Sequence[tuple[Any, ...]]) -> FramePlan:
        """:meth:`plan_frames` row by row: rows that fail a check are left out."""
        limit = self.max_event_bytes
        budget = max(PAGE_DECOMPRESS_BUDGET, limit)  # bytes this plan may decompress at once
        dicts = self._dicts
        known = KIND_TO_TYPE
        header_size = _HEADER_SIZE
        by_dict: dict[int, tuple[list[int], list[bytes], list[int]]] = {}
        for i, row in enumerate(rows):
            body = row[11]
            dict_id = row[9]
            raw_size = row[10]
            if type(body) is not bytes or type(raw_size) is not int or type(dict_id) is not int:
                continue  # a mistyped column: the checked path names it
            n = len(body)
            if n < 12 or not 0 < raw_size <= limit or row[7] not in known or raw_size > budget:
                continue
            fhd = body[4]
            hs = header_size[fhd]  # 0: no content checksum, or a reserved bit set
            if not hs or n < hs + 7 or (not fhd & 3) != (not dict_id):  # dictionary id vs row
                continue
            # Exactly one frame, nothing after it: the common single-block frame inline.
            block = body[hs] | body[hs + 1] << 8 | body[hs + 2] << 16
            if block & 3 == 1:  # the last block, raw or compressed (an RLE block is not)
                if hs + 7 + (block >> 3) != n:
                    continue
            elif _frame_length(body) != n:
                continue
            if dict_id and dict_id not in dicts:
                continue
            group = by_dict.get(dict_id)
            if group is None:
                group = by_dict[dict_id] = ([], [], [])
            group[0].append(i)
            group[1].append(body)
            group[2].append(raw_size)
            budget -= raw_size  # rows past the budget take the one-at-a-time path
        return FramePlan(
            len(rows),
            [(d, idx, bodies, struct.pack(f"={len(sizes)}Q", *sizes))
             for d, (idx, bodies, sizes) in by_dict.items()],
        )

    def decompress_rows(self, plan: FramePlan) -> Sequence[Any]:
        """Decompress every planned frame, one zstd call (holding no GIL) per dictionary.

        Returns one entry per row: a buffer of exactly ``raw_size`` bytes whose checksum
        verified, or ``None`` for rows left out or in a group where any frame failed (those
        rows then go through :meth:`decode`, which names what is wrong). Safe to call from
        another thread.
        """
        groups = plan.groups
        done = []
        for dict_id, idx, bodies, sizes in groups:
            try:
                done.append((idx, self._decompressor(dict_id).multi_decompress_to_buffer(
                    bodies, decompressed_sizes=sizes
                )))
            except zstandard.ZstdError:
                continue
        if len(done) == 1 and len(done[0][0]) == plan.rows:
            return done[0][1]  # the common case: every row, in order, in one collection
        out: list[Any] = [None] * plan.rows
        for idx, frames in done:
            for j, i in enumerate(idx):
                out[i] = frames[j]
        return out

    @property
    def raw_decoder(self) -> msgspec.msgpack.Decoder:
        """The typed decoder of event MessagePack (for a loop that checks the tag itself)."""
        return self._decoder

    def decode(self, kind: str, body: bytes, dict_id: int = NO_DICTIONARY) -> _Event | Opaque:
        """Decode a stored body. Raises :class:`CorruptEvent` naming what is wrong.

        The common case (a well-formed frame of known size within the limit, a known kind) is
        checked inline; anything unusual goes through :meth:`decompress` and
        :meth:`decode_raw`, which apply the same checks one by one and name the problem.
        """
        try:
            params = _frame_parameters(body)
        except zstandard.ZstdError:
            params = None
        if (
            params is None
            or params.dict_id != dict_id
            or not params.has_checksum
            or params.content_size > self.max_event_bytes  # also CONTENTSIZE_UNKNOWN/ERROR
            or kind not in KIND_TO_TYPE
        ):
            return self.decode_raw(kind, self.decompress(body, dict_id))
        cache = getattr(self._local, "decompressors", None)
        d = cache.get(dict_id) if cache is not None else None
        if d is None:
            d = self._decompressor(dict_id)
        try:
            raw = d.decompress(body, allow_extra_data=False)
            event = self._decoder.decode(raw)
        except (zstandard.ZstdError, msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            return self.decode_raw(kind, self.decompress(body, dict_id))  # names the problem
        if len(raw) != params.content_size or TAG_OF.get(type(event)) != kind:
            return self.decode_raw(kind, self.decompress(body, dict_id))
        return event


def _header_size(fhd: int) -> int:
    """Bytes of a zstd frame header (magic included) from its descriptor byte; 0 if invalid."""
    if fhd & 0x08:  # reserved bit
        return 0
    single_segment = fhd & 0x20
    fcs = (1 if single_segment else 0, 2, 4, 8)[fhd >> 6]
    return 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3] + fcs


# Header size per descriptor byte, for frames that carry a content checksum (0 otherwise).
_HEADER_SIZE = bytes(_header_size(fhd) if fhd & 0x04 else 0 for fhd in range(256))
# For Codec._plan_page: first block-header bytes of a last raw or compressed block (low bits
# 001 or 101), byte tables adding 1 and 2, the low three bits of a byte, and row columns.
_ONE_LAST_BLOCK = bytes(b for b in range(256) if b & 7 in (1, 5))
_PLUS_1 = bytes((b + 1) & 0xFF for b in range(256))
_PLUS_2 = bytes((b + 2) & 0xFF for b in range(256))
_LOW_3_BITS = bytes(b & 7 for b in range(256))
_KNOWN_KINDS = frozenset(KIND_TO_TYPE)
_KIND, _DICT_ID, _RAW_SIZE, _BODY = itemgetter(7), itemgetter(9), itemgetter(10), itemgetter(11)
_DESCRIPTOR = itemgetter(4)


def _frame_length(body: bytes) -> int:
    """The length of the checksummed zstd frame at the start of ``body`` (walking its block
    headers), or -1 when it has no checksum or is cut short; compare with ``len(body)``."""
    pos = _HEADER_SIZE[body[4]]
    if not pos:
        return -1
    end = len(body) - 3
    while pos <= end:
        header = body[pos] | body[pos + 1] << 8 | body[pos + 2] << 16
        pos += 3 + (1 if header & 6 == 2 else header >> 3)  # an RLE block stores one byte
        if header & 1:  # last block
            return pos + 4
    return -1


class FramePlan:
    """A page's frames grouped by dictionary, checked enough to decompress them in one call.

    ``groups`` holds, per dictionary id, the row positions, their frames and the packed
    expected sizes (the rows' ``raw_size``); rows left out go through :meth:`Codec.decode`.
    """

    __slots__ = ("rows", "groups")

    def __init__(self, rows: int, groups: list[tuple[int, list[int], list[bytes], bytes]]) -> None:
        self.rows = rows
        self.groups = groups


def _ext_as_data(code: int, data: memoryview) -> dict[str, Any]:
    """A MessagePack extension value in an opaque body, as data JSON can carry."""
    return {"msgpack_ext": code, "data": bytes(data)}


def _jsonable(value: Any) -> Any:
    """An opaque body (an event kind this build does not know) made printable as JSON, keeping
    every value apart: map keys MessagePack allows but JSON does not (arrays, nil, booleans,
    numbers) become their JSON text — unless two keys of one map would then read the same
    (``1`` and ``"1"``), and that map is ``{"msgpack_map": [[key, value], ...]}`` instead; a
    float JSON cannot write (NaN, ±infinity) is ``{"msgpack_float": "NaN" | "Infinity" |
    "-Infinity"}``. Decoded values are otherwise kept as they are (bytes print as base64)."""
    if isinstance(value, dict):
        out = {_key_text(k): _jsonable(v) for k, v in value.items()}
        if len(out) == len(value):
            return out
        return {"msgpack_map": [[_jsonable(list(k) if isinstance(k, tuple) else k), _jsonable(v)]
                                for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return {"msgpack_float": "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")}
    if isinstance(value, msgspec.msgpack.Ext):  # in an `Any` field of a known kind
        return _ext_as_data(value.code, memoryview(value.data))
    return value


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bytes):
        return base64.b64encode(key).decode()
    return msgspec.json.encode(_jsonable(list(key) if isinstance(key, tuple) else key)).decode()


def usable_dictionaries(stored: Mapping[int, Any]) -> tuple[dict[int, bytes], dict[int, str]]:
    """Split the ``dictionaries`` table's rows into loadable ones and damaged ones (with why).

    A row edited or damaged on disk (bytes of another dictionary, text, NULL) must not make the
    whole log unreadable: only the bodies that need that dictionary fail, naming it.
    """
    good: dict[int, bytes] = {}
    damaged: dict[int, str] = {}
    for dict_id, data in stored.items():
        if type(data) is not bytes:
            damaged[dict_id] = f"stored as {type(data).__name__}, not as a blob"
            continue
        try:
            loaded = zstandard.ZstdCompressionDict(data)
            found = loaded.dict_id()
        except zstandard.ZstdError as exc:
            damaged[dict_id] = str(exc)
            continue
        if found != dict_id:
            damaged[dict_id] = f"the bytes carry dictionary id {found}"
            continue
        try:  # the id is read from the first bytes; zstd checks the rest only when it loads them
            zstandard.ZstdDecompressor(dict_data=loaded).decompressobj()
        except zstandard.ZstdError as exc:
            damaged[dict_id] = f"zstd cannot load it: {exc}"
            continue
        good[dict_id] = data
    return good, damaged


# fastCover with fixed parameters instead of zstd's search over them: a quarter of the CPU (about
# 0.06 s instead of 0.24 s for 5,000 events of ~1 KB, on a core the writer and the event loop
# share while the automatic dictionary trains), and on held-out events (the benchmark's, and
# source code) frames as small or a little smaller than the searched dictionary gave.
_TRAIN_SEGMENT = 256
_TRAIN_DMER = 8


MIN_DICTIONARY_SAMPLES = 8


def train_dictionary(samples: list[bytes], size: int = 16 * 1024) -> tuple[int, bytes]:
    """Train a zstd dictionary from raw (uncompressed) event bodies; returns (dict_id, bytes).
    Fewer than :data:`MIN_DICTIONARY_SAMPLES` is :class:`TooFewSamples`."""
    if len(samples) < MIN_DICTIONARY_SAMPLES:
        raise TooFewSamples(f"need at least {MIN_DICTIONARY_SAMPLES} samples to train a dictionary, "
                            f"have {len(samples)}")
    d = zstandard.train_dictionary(size, samples, k=_TRAIN_SEGMENT, d=_TRAIN_DMER)
    return d.dict_id(), d.as_bytes()



# Dictionary ids zstd leaves to trained dictionaries (RFC 8878: below 32768 and from 2**31 on are reserved).
_TRAINED_IDS = (32768, 2**31)


def free_dictionary_id(dict_id: int, data: bytes, taken: Mapping[int, Any]) -> tuple[int, bytes]:
    """``(dict_id, data)``, or the same dictionary under the next id ``taken`` does not hold when
    ``dict_id`` is held there with other bytes (the header's Dictionary_ID is rewritten; nothing
    else in a dictionary depends on it).

    A trained dictionary's id is a hash of its content: training again on the same events (after
    the stored one was damaged, say) gives the same id, and a row written under it would name a
    stored dictionary it was not compressed with."""
    if taken.get(dict_id, data) == data:
        return dict_id, data
    low, high = _TRAINED_IDS
    new_id = dict_id
    while new_id in taken:
        new_id = low + (new_id - low + 1) % (high - low)
    new = data[:4] + new_id.to_bytes(4, "little") + data[8:]
    if zstandard.ZstdCompressionDict(new).dict_id() != new_id:  # (not a zstd-format dictionary)
        raise ValueError(f"dictionary {dict_id} cannot be given another id")
    return new_id, new

