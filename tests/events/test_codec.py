"""The body codec: msgpack in one checksummed zstd frame, bounded, with optional dictionaries."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec
import pytest
import zstandard

from events.codec import DEFAULT_MAX_EVENT_BYTES, Codec, train_dictionary
from events.errors import AppendRejected, CorruptEvent, EventTooLarge, LogError, TooFewSamples, UnknownDictionary
from events.types import (
    ImagePart,
    InputSubmitted,
    InstructionAppended,
    ModelResponded,
    Opaque,
    SessionNamed,
    TextPart,
    ToolCall,
    ToolStarted,
    Usage,
    body_of,
    kind_of,
)

EVENT = ModelResponded(
    text="hello " * 20,
    tool_calls=[ToolCall(call_id="c1", name="read_file", arguments='{"path": "a.py"}')],
    usage=Usage(input_tokens=10, output_tokens=3),
)


def similar_events(n: int) -> list[ToolStarted]:
    return [
        ToolStarted(call_id=f"call-{i}", name="read_file", arguments=f'{{"path": "src/mod_{i}.py"}}')
        for i in range(n)
    ]


def sized(n: int) -> InstructionAppended:
    """An event whose MessagePack is exactly ``n`` bytes (n in 300..65000)."""
    overhead = len(Codec().pack(InstructionAppended(text="x" * 300))) - 300
    event = InstructionAppended(text="x" * (n - overhead))
    assert len(Codec().pack(event)) == n
    return event


def assert_clean(err: LogError, code: str, *words: str) -> None:
    """A typed error with its stable code, naming the problem, without a driver traceback."""
    assert err.code == code
    for word in words:
        assert word in str(err), (word, str(err))
    assert err.__cause__ is None
    assert err.__context__ is None or err.__suppress_context__


# ---------------------------------------------------------------------- framing


def test_encode_writes_one_checksummed_frame_with_content_size() -> None:
    codec = Codec()
    enc = codec.encode(EVENT)
    assert (enc.kind, enc.dict_id) == ("model.responded", 0)
    params = zstandard.get_frame_parameters(enc.body)
    assert params.has_checksum
    assert params.content_size == enc.raw_size == len(codec.pack(EVENT))
    assert params.dict_id == 0
    # exactly one frame: a streaming reader finds nothing after it
    dobj = zstandard.ZstdDecompressor().decompressobj()
    assert dobj.decompress(enc.body) == codec.pack(EVENT)
    assert dobj.eof and dobj.unused_data == b""
    assert enc.raw_size > len(enc.body)  # it does compress
    assert codec.decode(enc.kind, enc.body) == EVENT


def test_msgpack_carries_the_kind_tag_and_omits_defaults() -> None:
    raw = Codec().pack(SessionNamed(name="n"))
    assert msgspec.msgpack.decode(raw) == {"kind": "session.named", "name": "n"}
    assert msgspec.msgpack.decode(Codec().pack(ModelResponded())) == {"kind": "model.responded"}


def test_body_of_includes_defaults_and_nested_tags() -> None:
    body = body_of(InputSubmitted(content=[TextPart("a"), ImagePart("art1", "image/png")]))
    assert body == {
        "content": [
            {"type": "text", "text": "a"},
            {"type": "image", "artifact_id": "art1", "mime": "image/png"},
        ],
        "when_busy": "followUp",
    }
    assert kind_of(SessionNamed(name="x")) == "session.named"


def test_compression_level_is_used() -> None:
    text = InstructionAppended(text="".join(f"line {i}: some repeated words\n" for i in range(400)))
    fast, strong = Codec(level=1).encode(text), Codec(level=19).encode(text)
    assert len(strong.body) < len(fast.body)
    assert Codec().decode(strong.kind, strong.body) == text


# ---------------------------------------------------------------------- size limits


def test_event_of_exactly_max_event_bytes_is_accepted_and_one_more_is_rejected() -> None:
    codec = Codec(max_event_bytes=4096)
    enc = codec.encode(sized(4096))
    assert enc.raw_size == 4096
    assert codec.decode(enc.kind, enc.body) == sized(4096)
    with pytest.raises(AppendRejected) as info:
        codec.encode(sized(4097))
    assert_clean(info.value, "APPEND_REJECTED", "4097", "4096", "instruction.appended")


def test_decoder_refuses_frames_declaring_more_than_its_limit() -> None:
    body = Codec().encode(sized(5000)).body
    assert Codec(max_event_bytes=5000).decode("instruction.appended", body) == sized(5000)
    with pytest.raises(EventTooLarge) as info:
        Codec(max_event_bytes=4999).decode("instruction.appended", body)
    assert_clean(info.value, "EVENT_TOO_LARGE", "5000", "4999")
    assert isinstance(info.value, CorruptEvent)
    assert DEFAULT_MAX_EVENT_BYTES == 32 * 1024 * 1024


# ---------------------------------------------------------------------- decode errors


@pytest.mark.parametrize(
    "mangle, words",
    [
        (lambda b: b[: len(b) // 2] + bytes([b[len(b) // 2] ^ 0xFF]) + b[len(b) // 2 + 1 :], ["decompress"]),
        (lambda b: b[:-1] + bytes([b[-1] ^ 0x01]), ["checksum"]),
        (lambda b: b[:-7], ["decompress"]),
        (lambda b: b[:3], ["not a zstd frame"]),
        (lambda b: b"", ["not a zstd frame"]),
        (lambda b: b"\x00" * 40, ["not a zstd frame"]),
        (lambda b: b + b, ["trailing"]),
        (lambda b: b + b"\x00", ["trailing"]),
    ],
    ids=["flipped-byte", "bad-checksum", "truncated", "header-only", "empty", "zeros", "two-frames",
         "trailing-byte"],
)
def test_damaged_bodies_raise_event_corrupt(mangle, words) -> None:  # type: ignore[no-untyped-def]
    codec = Codec()
    body = mangle(codec.encode(EVENT).body)
    with pytest.raises(CorruptEvent) as info:
        codec.decode("model.responded", body)
    assert_clean(info.value, "EVENT_CORRUPT", *words)


def test_frame_without_checksum_is_refused() -> None:
    raw = Codec().pack(EVENT)
    body = zstandard.ZstdCompressor(write_checksum=False).compress(raw)
    with pytest.raises(CorruptEvent) as info:
        Codec().decode("model.responded", body)
    assert_clean(info.value, "EVENT_CORRUPT", "checksum")


def test_frame_of_unknown_size_decodes_when_small_and_clean() -> None:
    raw = Codec().pack(EVENT)
    cobj = zstandard.ZstdCompressor(write_checksum=True, write_content_size=False).compressobj()
    body = cobj.compress(raw) + cobj.flush()
    assert zstandard.get_frame_parameters(body).content_size == zstandard.CONTENTSIZE_UNKNOWN
    codec = Codec()
    assert codec.decode("model.responded", body) == EVENT
    for bad, word in [(body + b"x", "trailing"), (body + body, "trailing"), (body[:-2], "truncated")]:
        with pytest.raises(CorruptEvent) as info:
            codec.decode("model.responded", bad)
        assert_clean(info.value, "EVENT_CORRUPT", word)


def test_kind_mismatch_schema_mismatch_and_bad_msgpack() -> None:
    codec = Codec()
    body = codec.encode(EVENT).body
    with pytest.raises(CorruptEvent) as info:
        codec.decode("tool.started", body)
    assert_clean(info.value, "EVENT_CORRUPT", "tool.started", "model.responded")

    wrong_shape = zstandard.ZstdCompressor(write_checksum=True).compress(
        msgspec.msgpack.encode({"kind": "session.named", "name": 12})
    )
    with pytest.raises(CorruptEvent) as info:
        codec.decode("session.named", wrong_shape)
    assert_clean(info.value, "EVENT_CORRUPT", "session.named", "schema")

    not_msgpack = zstandard.ZstdCompressor(write_checksum=True).compress(b"\xc1\xc1\xc1")
    for kind in ("session.named", "some.future.kind"):
        with pytest.raises(CorruptEvent) as info:
            codec.decode(kind, not_msgpack)
        assert_clean(info.value, "EVENT_CORRUPT", "MessagePack")


def test_unknown_kind_decodes_as_opaque() -> None:
    raw = msgspec.msgpack.encode({"kind": "future.thing", "answer": 42, "items": ["a"]})
    body = zstandard.ZstdCompressor(write_checksum=True).compress(raw)
    event = Codec().decode("future.thing", body)
    assert event == Opaque("future.thing", {"kind": "future.thing", "answer": 42, "items": ["a"]})
    assert kind_of(event) == "future.thing"
    assert body_of(event) == {"answer": 42, "items": ["a"]}
    # still a tagged struct: a map whose tag is the row's kind
    for value, words in [([1, 2], "not a MessagePack map"), ({"answer": 42}, "no kind tag"),
                         ({"kind": "other.thing"}, "body holds 'other.thing'")]:
        frame = zstandard.ZstdCompressor(write_checksum=True).compress(msgspec.msgpack.encode(value))
        with pytest.raises(CorruptEvent, match=words):
            Codec().decode("future.thing", frame)


def test_corrupt_event_at_names_the_seq_and_keeps_its_class() -> None:
    err = EventTooLarge("too big").at(17)
    assert type(err) is EventTooLarge and err.seq == 17
    assert str(err) == "seq 17: too big" and err.code == "EVENT_TOO_LARGE"
    assert str(CorruptEvent("bad")) == "bad"


# ---------------------------------------------------------------------- dictionaries


def test_dictionary_codec_round_trip_and_ids() -> None:
    samples = [Codec().pack(e) for e in similar_events(200)]
    dict_id, data = train_dictionary(samples, size=4096)
    assert dict_id != 0
    codec = Codec(dictionaries={dict_id: data}, active_dict_id=dict_id)
    plain, small = Codec().encode(similar_events(1)[0]), codec.encode(similar_events(1)[0])
    assert small.dict_id == dict_id == zstandard.get_frame_parameters(small.body).dict_id
    assert len(small.body) < len(plain.body)
    assert codec.decode(small.kind, small.body, dict_id) == similar_events(1)[0]
    assert codec.decode(plain.kind, plain.body, 0) == similar_events(1)[0]
    assert codec.dictionary_ids == [dict_id]
    # a frame whose dictionary differs from the row's record is corrupt, not silently decoded
    with pytest.raises(CorruptEvent) as info:
        codec.decode(small.kind, small.body, 0)
    assert_clean(info.value, "EVENT_CORRUPT", str(dict_id))
    with pytest.raises(CorruptEvent) as info:
        codec.decode(plain.kind, plain.body, dict_id)
    assert_clean(info.value, "EVENT_CORRUPT", str(dict_id))
    # without the dictionary: a clear "unknown dictionary"
    with pytest.raises(UnknownDictionary) as info:
        Codec().decode(small.kind, small.body, dict_id)
    assert_clean(info.value, "EVENT_UNKNOWN_DICTIONARY", str(dict_id))
    # switching back to no dictionary
    codec.use_dictionary(None)
    assert codec.encode(similar_events(1)[0]).dict_id == 0


@pytest.mark.parametrize("level", [1, 3, 9])
def test_dictionary_frames_match_plain_zstd_in_both_compress_paths(level: int) -> None:
    """The codec prepares its dictionary once for compressing; its frames stay byte-identical to
    zstd's own with the unprepared dictionary, one at a time and in one batched call."""
    samples = [Codec().pack(e) for e in similar_events(200)]
    dict_id, data = train_dictionary(samples, size=4096)
    codec = Codec(level=level, dictionaries={dict_id: data}, active_dict_id=dict_id)
    plain = zstandard.ZstdCompressor(
        level=level, write_checksum=True, write_content_size=True,
        dict_data=zstandard.ZstdCompressionDict(data),
    )
    events = similar_events(40)
    raws = [codec.pack(e) for e in events]
    expected = [plain.compress(raw) for raw in raws]
    batched, used = codec.compress_many(raws)  # one multi-frame call (40 >= MULTI_COMPRESS_MIN)
    assert used == dict_id and batched == expected
    assert [codec.encode(e).body for e in events] == expected
    assert [codec.decode(kind_of(e), body, dict_id) for e, body in zip(events, batched)] == events


def test_dictionary_argument_checks() -> None:
    samples = [Codec().pack(e) for e in similar_events(100)]
    dict_id, data = train_dictionary(samples, size=2048)
    with pytest.raises(ValueError, match="not among"):
        Codec(active_dict_id=dict_id)
    with pytest.raises(ValueError, match="carry id"):
        Codec(dictionaries={dict_id + 1: data})
    with pytest.raises(ValueError, match="unknown dictionary"):
        Codec().use_dictionary(dict_id)
    with pytest.raises(TooFewSamples, match="at least 8"):
        train_dictionary(samples[:7])


def test_codec_is_shared_safely_between_threads() -> None:
    samples = [Codec().pack(e) for e in similar_events(200)]
    dict_id, data = train_dictionary(samples, size=4096)
    codec = Codec(dictionaries={dict_id: data})
    events = similar_events(300)
    barrier = threading.Barrier(4)

    def work(offset: int) -> list[bool]:
        barrier.wait()
        out = []
        for event in events[offset::4]:
            enc = codec.encode(event)
            out.append(codec.decode(enc.kind, enc.body, enc.dict_id) == event)
        return out

    with ThreadPoolExecutor(4) as pool:
        results = [ok for chunk in pool.map(work, range(4)) for ok in chunk]
    assert len(results) == 300 and all(results)
    # a dictionary switch made on this thread reaches compressors cached by the worker threads
    with ThreadPoolExecutor(2) as pool:
        before = list(pool.map(lambda e: codec.encode(e).dict_id, events[:20]))
        codec.use_dictionary(dict_id)
        after = list(pool.map(lambda e: codec.encode(e).dict_id, events[:20]))
    assert before == [0] * 20 and after == [dict_id] * 20


def test_nesting_deeper_than_the_interpreter_decodes_is_rejected_or_named() -> None:
    deep: Any = "leaf"
    for _ in range(5000):
        deep = [deep]
    event = ModelResponded(text="x", diagnostics={"deep": deep})
    with pytest.raises(AppendRejected) as info:
        Codec().pack_checked(event)
    assert info.value.code == "APPEND_REJECTED" and "cannot be encoded" in str(info.value)
    raw = (b"\x82" + msgspec.msgpack.encode("kind") + msgspec.msgpack.encode("model.responded")
           + msgspec.msgpack.encode("diagnostics") + b"\x81" + msgspec.msgpack.encode("d")
           + b"\x91" * 5000 + b"\xc0")
    body = zstandard.ZstdCompressor(write_checksum=True, write_content_size=True).compress(raw)
    for kind in ("model.responded", "future.kind"):
        with pytest.raises(CorruptEvent) as err:
            Codec().decode(kind, body)
        assert_clean(err.value, "EVENT_CORRUPT", "nests too deeply to decode")
