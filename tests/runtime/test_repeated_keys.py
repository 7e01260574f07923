"""The check for a key repeated in one object of a request body (``runtime.http_parts``): the
body's ``:`` counted against its decoded value's, and the pair-by-pair read only for a body that
may repeat one. Its verdict is the pair-by-pair read's, whatever the body."""

from __future__ import annotations

import json

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from runtime.http_parts import _each_key_once, _nothing, _RepeatedKey, _repeated_key


def _read_pair_by_pair(raw: bytes) -> str | None:
    try:
        json.loads(raw, object_pairs_hook=_each_key_once, parse_int=_nothing, parse_float=_nothing)
    except _RepeatedKey as exc:
        return exc.key
    return None


def _verdict(raw: bytes) -> str | None:
    return _repeated_key(raw, msgspec.json.decode(raw))


# Keys and strings short and alike (repeats are likely), with ``:`` in them, written as themselves
# or escaped (``\u003a``, ``\u0061``), and with an escaped backslash before a ``u003a`` (no escape).
_TEXT = st.text(alphabet="a:b\\\"é", max_size=4)


def _written(text: str, escaped: bool) -> str:
    if not escaped:
        return json.dumps(text, ensure_ascii=False)
    return '"' + "".join(f"\\u{ord(c):04x}" for c in text) + '"'


_STRING = st.builds(_written, _TEXT, st.booleans())
_JSON = st.recursive(
    st.one_of(_STRING, st.sampled_from(["1", "-2.5e3", "true", "null"])),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda items: "[" + ", ".join(items) + "]"),
        st.lists(st.tuples(_STRING, inner), max_size=4).map(
            lambda pairs: "{" + ",".join(f"{k} :{v}" for k, v in pairs) + "}")),
    max_leaves=12)


@given(_JSON)
def test_the_verdict_is_the_pair_by_pair_reads_for_any_body(body: str):
    raw = body.encode()
    assert _verdict(raw) == _read_pair_by_pair(raw), raw


def test_a_repeat_is_named_however_it_is_written_and_wherever_it_is():
    for raw, key in [(b'{"a": 1, "a": 2}', "a"),
                     (b'{"a": 1, "\\u0061": 2}', "a"),  # the same key escaped
                     (b'{"x": [{"k": "v:w", "k": "v"}]}', "k"),  # nested, its dropped value holding a ':'
                     (b'{"a": "\\u003a", "a": ""}', "a"),  # an escaped ':' kept
                     (b'{"a:b": 1, "a\\u003ab": 2}', "a:b")]:
        assert _verdict(raw) == key, raw
    for raw in [b'{"a": 1, "b": {"a": 2}}', b'[{"a": 1}, {"a": 2}]', b'{"url": "http://x:1/a:b"}',
                b'{"a": "\\\\u003a", "b": "\\u003a"}', b'"a:b"', b"1", b"[]", b"{}"]:
        assert _verdict(raw) is None, raw
