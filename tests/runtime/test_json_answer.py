"""``runtime.pieces.encode_in_pieces``: ``msgspec.json.encode``'s bytes, made a piece at a
time (a worker thread gives the interpreter's lock up between two pieces), and scrubbed of the
daemon's secrets as the app scrubs a whole JSON answer."""

from __future__ import annotations

import msgspec
from hypothesis import example, given
from hypothesis import strategies as st

from events.secrets import Secrets
from runtime.pieces import CHUNK_BYTES, PIECE_CHARS, encode_in_pieces

KEY = "sk-test-0123456789abcdefSECRET"
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)  # (no lone surrogates: no UTF-8 for them)
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False)
                    | TEXT | st.binary(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4)
                    | st.dictionaries(st.integers(0, 9), inner, max_size=2), max_leaves=30)


@given(JSON)
def test_the_pieces_are_msgspec_s_encoding_byte_for_byte(value) -> None:
    chunks, length = encode_in_pieces(value)
    whole = msgspec.json.encode(value)
    assert b"".join(chunks) == whole and length == len(whole)


def test_a_long_string_is_encoded_in_slices_and_put_together_whole() -> None:
    text = "".join(f'{i}: "q" \\ \u2028 \x00 é 😀\n' for i in range(30_000))
    view = {"items": [{"text": text, "n": 1}, {"text": "short"}], "total": 2, "deep": [[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]]}
    assert len(text) > 4 * PIECE_CHARS
    chunks, length = encode_in_pieces(view)
    assert b"".join(chunks) == msgspec.json.encode(view) and length == sum(map(len, chunks))
    assert len(chunks) > 1 and all(len(c) < CHUNK_BYTES + PIECE_CHARS * 6 + 64 for c in chunks)


def test_secrets_are_scrubbed_from_strings_and_keys_as_the_app_scrubs_an_answer() -> None:
    secrets = Secrets({KEY: "OPENAI_API_KEY"})
    long = ("x" * (PIECE_CHARS - 5)) + KEY + ("y" * PIECE_CHARS)  # (across a slice's end)
    value = {"text": f"the key is {KEY}.", KEY: [long], "n": 3}
    chunks, _ = encode_in_pieces(value, secrets)
    assert b"".join(chunks) == secrets.scrub_json(msgspec.json.encode(value))
    assert KEY.encode() not in b"".join(chunks)
    assert b"".join(encode_in_pieces({"text": "none here"}, secrets)[0]) == b'{"text":"none here"}'


SECRET_TEXT = st.one_of(TEXT, st.builds(lambda a, b: a + KEY + b, TEXT, TEXT))
SECRET_JSON = st.recursive(st.none() | st.integers() | SECRET_TEXT | st.builds(str.encode, SECRET_TEXT),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(SECRET_TEXT, inner, max_size=4),
                           max_leaves=30)


@given(SECRET_JSON)
@example({KEY: 1, "[redacted OPENAI_API_KEY]": 2})  # (two keys the scrub makes one)
def test_scrubbed_as_the_walk_meets_each_string_and_key_as_a_scrub_of_the_whole_copy(value) -> None:
    # (each string and key scrubbed where the walk meets it, deep values whole: the bytes of the
    # whole copy scrubbed first, then encoded; bytes arrive as base64 text, on both paths)
    secrets = Secrets({KEY: "OPENAI_API_KEY"})
    deep = value
    for _ in range(20):
        deep = {KEY: [deep]}
    for v in (value, deep):
        chunks, length = encode_in_pieces(v, secrets)
        whole = msgspec.json.encode(secrets.scrub(msgspec.to_builtins(v, str_keys=True)))
        assert b"".join(chunks) == whole and length == len(whole)
        assert KEY.encode() not in whole
