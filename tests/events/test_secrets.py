"""Secrets never stored: the exact values of configured credentials, scrubbed from every event
body before it is encoded (``events/secrets.py``), at the store's one seam."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from events.errors import AppendRejected
from events.reader import StoredEvent
from events.secrets import MIN_SECRET, Secrets, marker
from events.store import Draft, open_store
from events.types import InputSubmitted, ModelResponded, TextPart, ToolCall

KEY = "sk-proj-Q7mZ4kT1vB8nR3wY6pJ0dF5h"
SECRETS = Secrets.from_environ(["OPENAI_API_KEY", "UNSET", "EMPTY"], {"OPENAI_API_KEY": KEY, "EMPTY": ""})


def test_a_packed_body_holding_a_secret_is_rewritten_in_strings_keys_and_binaries():
    raw = msgspec.msgpack.encode({"text": f"key {KEY}.", KEY: [b"x" + KEY.encode()], "n": 3})
    assert msgspec.msgpack.decode(SECRETS.scrub_packed(raw)) == {
        "text": f"key {marker('OPENAI_API_KEY')}.", marker("OPENAI_API_KEY"): [b"x" + marker("OPENAI_API_KEY").encode()],
        "n": 3}
    assert SECRETS.scrub_packed(msgspec.msgpack.encode({"text": KEY[:-1]})) is None  # (no secret: not decoded)


def test_short_values_are_never_scrubbed_and_the_longest_value_goes_first():
    short = "x" * (MIN_SECRET - 1)
    secrets = Secrets({short: "SHORT", KEY: "A", KEY + "-more": "B"})
    assert secrets.scrub_text(f"{short} {KEY}-more {KEY}") == f"{short} {marker('B')} {marker('A')}"
    assert not Secrets({short: "SHORT"})


@pytest.mark.parametrize("count", [1, 2, 3])
def test_a_secret_cut_between_streamed_pieces_is_never_shown(count: int):
    text = f"the key is {KEY}, and {KEY[:6]} is not, nor {KEY[:7]}"  # (the last is held until the end)
    for cut in range(1, len(text)):
        cuts = sorted({c for c in [cut, (cut * 7) % len(text), (cut * 13) % len(text)][:count] if c})
        parts = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)])]
        scrub = SECRETS.stream()
        shown = [scrub.feed(p) for p in parts]
        shown.append(scrub.flush())
        assert "".join(shown) == SECRETS.scrub_text(text), parts
        assert not any(KEY[:MIN_SECRET] in "".join(shown[:i + 1]) for i in range(len(shown))), parts


async def test_the_store_stores_and_hands_on_the_scrubbed_events(tmp_path: Path):
    seen: list[StoredEvent] = []
    answer = ModelResponded(text=f"your key: {KEY}", reasoning="none",
                            tool_calls=[ToolCall("c1", "run_command", f'{{"command": "echo {KEY}"}}')])
    async with open_store(tmp_path, secrets=SECRETS) as store:
        store.on_commit(seen.extend)
        clean = await store.append(Draft(InputSubmitted(content=[TextPart("hello")]), session_id="s"))
        assert clean.events is None  # (stored as given)
        res = await store.append(Draft(answer, session_id="s"))
        stored = await store.read_events(after=0)
    mark = marker("OPENAI_API_KEY")
    expected = ModelResponded(text=f"your key: {mark}", reasoning="none",
                              tool_calls=[ToolCall("c1", "run_command", f'{{"command": "echo {mark}"}}')])
    assert res.events == (expected,)
    assert seen[-1].event == expected
    assert stored[-1].event == expected


async def test_an_event_the_marker_makes_too_large_is_refused_by_name(tmp_path: Path):
    secrets = Secrets({"k" * MIN_SECRET: "A_VERY_LONG_NAME_" * 20})
    async with open_store(tmp_path, secrets=secrets, max_event_bytes=1024) as store:
        with pytest.raises(AppendRejected, match="over the maximum event size"):
            await store.append(Draft(InputSubmitted(content=[TextPart("k" * MIN_SECRET * 100)]), session_id="s"))
        assert store.last_seq == 0


SLASHED = "tvly-dev-Q7mZ4kT1/vB8nR3wY+6pJ0dF5h=Canary"  # (characters a JSON text may escape)
SLASHED_SECRETS = Secrets({SLASHED: "SEARCH_KEY", KEY: "OPENAI_API_KEY"})


@pytest.mark.parametrize("written", [
    json.dumps({"key": SLASHED}),
    SLASHED.replace("/", "\\/"),  # (PHP, some Java encoders)
    json.dumps(SLASHED).replace("/", "\\/").replace("+", "\\u002b").replace("=", "\\u003D"),  # (HTML-safe ones)
    "".join(c if c.isalnum() or c in "-_." else f"\\u{ord(c):04x}" for c in SLASHED),  # (all it may)
])
def test_a_secret_a_json_text_holds_escaped_is_replaced(written: str):
    scrubbed = SLASHED_SECRETS.scrub_text(written)
    assert marker("SEARCH_KEY") in scrubbed and "Q7mZ4kT1" not in scrubbed, scrubbed
    if written.startswith("{"):
        assert json.loads(scrubbed) == {"key": marker("SEARCH_KEY")}


def test_a_part_of_a_secret_with_escapable_characters_is_left_and_not_rewritten():
    part = SLASHED.split("/")[0]  # (the part searched for first)
    raw = msgspec.msgpack.encode({"text": f"{part} and {SLASHED[:-1]}"})
    assert SLASHED_SECRETS.scrub_packed(raw) is None


async def test_tool_call_arguments_holding_a_secret_escaped_are_stored_with_its_marker(tmp_path: Path):
    arguments = json.dumps({"command": f"echo {SLASHED}"}).replace("/", "\\/")
    async with open_store(tmp_path, secrets=SLASHED_SECRETS) as store:
        await store.append(Draft(ModelResponded(text="", tool_calls=[ToolCall("c1", "run_command", arguments)]),
                                 session_id="s"))
        (stored,) = await store.read_events(after=0)
    assert json.loads(stored.event.tool_calls[0].arguments) == {"command": f"echo {marker('SEARCH_KEY')}"}


def test_what_is_read_back_from_the_log_is_encoded_without_its_secrets():
    old = StoredEvent(1, 0, "p", "s", 1, "a", None, "model.responded", None,
                      ModelResponded(text=f"key {KEY}", tool_calls=[ToolCall("c1", "x", json.dumps({"k": SLASHED}))]))
    shown = SLASHED_SECRETS.encode(old.to_json(), msgspec.json.encode)
    assert b"Q7mZ4kT1" not in shown and b"vB8nR3wY" not in shown, shown
    body = msgspec.json.decode(shown)["body"]
    assert body["text"] == f"key {marker('OPENAI_API_KEY')}"
    assert json.loads(body["tool_calls"][0]["arguments"]) == {"k": marker("SEARCH_KEY")}
    clean = StoredEvent(2, 0, "p", "s", 2, "a", None, "model.responded", None, ModelResponded(text="no key"))
    assert SLASHED_SECRETS.encode(clean.to_json(), msgspec.json.encode) == msgspec.json.encode(clean.to_json())


def pages(text: str, limit: int, secrets: Secrets) -> list[str]:
    """``text`` read page by page as the file and job routes read it: ``limit`` bytes from the
    offset the previous page answered."""
    data, out, offset = text.encode(), [], 0
    while True:
        body = data[offset:offset + limit]
        shown, offset, eof = secrets.scrub_page(body.decode(), offset + len(body), offset + len(body) >= len(data))
        out.append(shown)
        if eof:
            return out


@pytest.mark.parametrize("limit", [1, 5, MIN_SECRET, 20, len(KEY), len(KEY) + 1, 64])
def test_no_page_ends_in_the_beginning_of_a_secret(limit: int):
    for at in range(0, 70):
        text = "x" * at + KEY + " and " + SLASHED + ", " + KEY[:MIN_SECRET + 2]
        shown = pages(text, limit, SLASHED_SECRETS)
        for page in shown[:-1]:  # (the last ends the text: what it ends in is no secret)
            for secret in (KEY, SLASHED):
                assert not any(page.endswith(secret[:n]) for n in range(MIN_SECRET, len(secret) + 1)), (limit, at, page)
        if limit > len(SLASHED):  # (a page can hold each whole secret: it is shown as its marker)
            assert "".join(shown) == SLASHED_SECRETS.scrub_text(text), (limit, at, shown)
        else:
            assert "".join(shown).startswith("x" * at)


def test_a_json_answer_is_scrubbed_as_json_and_one_without_a_secret_is_left_as_it_is():
    # (a value with `"` and `\`: JSON escapes them, and the answer must stay valid JSON)
    odd = 'tvly-"quoted"\\back/slash'
    secrets = Secrets({KEY: "A", odd: "B"})
    data = msgspec.json.encode({"text": f"{KEY} and {odd}", KEY: [odd], "n": 1.5})
    assert msgspec.json.decode(secrets.scrub_json(data)) == {
        "text": f"{marker('A')} and {marker('B')}", marker("A"): [marker("B")], "n": 1.5}
    assert secrets.scrub_json(msgspec.json.encode({"text": KEY[:-1] + " " + odd[:-1]})) is None
    assert secrets.scrub_json(f"not json: {KEY}".encode()) == f"not json: {marker('A')}".encode()


def test_structs_holding_a_secret_are_copied_scrubbed_and_the_others_kept():
    from projections.session_state import Item

    held = Item("c1", "user", 1, text=f"key {KEY}")
    clean = Item("c2", "assistant", 2, text="fine")
    assert SECRETS.scrub_structs([clean], Item)[0] is clean
    scrubbed, kept = SECRETS.scrub_structs([held, clean], Item)
    assert scrubbed == Item("c1", "user", 1, text=f"key {marker('OPENAI_API_KEY')}") and kept is clean


def test_a_text_cut_at_any_limit_is_scrubbed_first_and_holds_no_piece_of_a_secret():
    text = "x" * 5 + KEY + " and " + SLASHED + "."
    shown = SLASHED_SECRETS.scrub_text(text)
    for limit in range(len(text) + 2):
        for value, more in ((text, "…"), (text.encode(), b"...")):
            cut = SLASHED_SECRETS.cut(value, limit, more)
            plain = cut.decode() if isinstance(cut, bytes) else cut
            assert not any(secret[:MIN_SECRET - 1] in plain for secret in (KEY, SLASHED)), (limit, plain)
            whole = shown if isinstance(value, str) else shown.encode()
            at = limit  # (a marker the limit falls inside is left out whole)
            for mark in (marker("OPENAI_API_KEY"), marker("SEARCH_KEY")):
                begins = shown.index(mark)
                if begins < limit < begins + len(mark):
                    at = begins
            assert cut == (whole if len(whole) <= limit else whole[:at] + more), (limit, cut)
            assert "[redacted" not in plain or plain.count("[") == plain.count("]"), (limit, plain)
    assert Secrets().cut(text, 10) == text[:10] and Secrets().cut("short", 10, "…") == "short"


def test_a_cut_never_ends_inside_a_marker_it_put_in():
    # A JSON-RPC error's code cut to 40 characters, 30 of them before the key: the marker lost
    # its name ("cccc[redacted "), which says neither which key nor that the text was cut.
    mark = marker("OPENAI_API_KEY")
    text = "c" * 30 + KEY + " tail"
    assert SECRETS.cut(text, 40) == "c" * 30
    assert SECRETS.cut(text, 40, "…") == "c" * 30 + "…"
    # at the edge: a marker ending exactly at the limit is kept; one character less leaves it out
    ends = 30 + len(mark)
    assert SECRETS.cut(text, ends, "…") == "c" * 30 + mark + "…"
    assert SECRETS.cut(text, ends - 1, "…") == "c" * 30 + "…"
    assert SECRETS.cut(text, 31, "…") == "c" * 30 + "…"  # (one character of it)
    assert SECRETS.cut(text, 30, "…") == "c" * 30 + "…"  # (the cut just before it)
    assert SECRETS.cut(text.encode(), ends - 1, b"...") == b"c" * 30 + b"..."  # (bytes alike)
    assert SECRETS.cut(text.encode(), ends, b"...") == (b"c" * 30 + mark.encode() + b"...")
    # a text that fits is not cut, whatever markers it holds; two markers: the one across the cut goes
    assert SECRETS.cut(text, len(SECRETS.scrub_text(text)), "…") == SECRETS.scrub_text(text)
    two = f"{KEY} {KEY}"
    assert SECRETS.cut(two, len(mark) + 3, "…") == mark + " " + "…"
    assert SECRETS.cut(KEY, 5, "…") == "…"  # (a marker from the first character: nothing of it)


def test_a_text_cut_where_no_secret_was_known_leaves_out_the_pieces_at_its_cut_ends():
    text = "x" * 5 + KEY + " and " + SLASHED + "."
    for at in range(len(text) + 1):
        head = SLASHED_SECRETS.mend(text[:at], cut_end=True)
        tail = SLASHED_SECRETS.mend(text[at:], cut_start=True)
        for secret in (KEY, SLASHED):
            assert not any(head.endswith(secret[:n]) for n in range(1, len(secret))), (at, head)
            assert not any(tail.startswith(secret[-n:]) for n in range(1, len(secret))), (at, tail)
        assert SLASHED_SECRETS.scrub_text(text).startswith(head) and SLASHED_SECRETS.scrub_text(text).endswith(tail)
    # (what is not cut at an end keeps it, and without secrets nothing changes)
    assert SLASHED_SECRETS.mend(KEY[:12]) == KEY[:12] and Secrets().mend(KEY[:12], cut_end=True) == KEY[:12]


def _pieces(secret: str) -> list[str]:
    return [secret[i:i + MIN_SECRET] for i in range(len(secret) - MIN_SECRET + 1)]


def test_a_message_quoting_a_value_cut_anywhere_holds_no_piece_of_a_secret():
    # An error quoting a value cut to a limit (from either end) before anything could scrub it:
    # every piece of MIN_SECRET or more characters is its marker; a shorter one stays.
    value = "x" * 5 + KEY + " and " + SLASHED + "."
    for start in range(len(value)):
        for end in range(start, len(value) + 1, 3):
            message = f"field {value[start:end]!r} is not valid"
            shown = SLASHED_SECRETS.scrub_message(message)
            assert not any(p in shown for secret in (KEY, SLASHED) for p in _pieces(secret)), (start, end, shown)
            assert shown.startswith("field '") and shown.endswith("' is not valid")
    piece = KEY[3:3 + MIN_SECRET]
    assert SECRETS.scrub_message(f"a {piece} b {KEY[:MIN_SECRET - 1]}") == \
        f"a {marker('OPENAI_API_KEY')} b {KEY[:MIN_SECRET - 1]}"
    assert SECRETS.scrub_message(f"{KEY}{KEY[:10]}") == marker("OPENAI_API_KEY") * 2  # (a key, then a piece)
    assert Secrets().scrub_message(f"field {KEY[:10]!r}") == f"field {KEY[:10]!r}"


def test_an_error_answer_is_scrubbed_of_pieces_and_one_without_any_is_left():
    body = json.dumps({"error": {"code": "X", "message": f"bad value '{'x' * 70}{KEY[:10]}…'"}}).encode()
    clean = json.loads(SECRETS.scrub_message_json(body))
    assert clean["error"]["message"] == f"bad value '{'x' * 70}{marker('OPENAI_API_KEY')}…'"
    assert SECRETS.scrub_message_json(json.dumps({"error": {"message": KEY[:7]}}).encode()) is None
    assert SECRETS.scrub_message_json(f"not json {KEY[2:12]}".encode()) == \
        f"not json {marker('OPENAI_API_KEY')}".encode()
    assert Secrets().scrub_message_json(body) is None


def test_sent_whole_keeps_the_keys_a_text_holds_whole_and_no_piece_of_another():
    key, other = "sk-sent-whole-Q7w9ZxK2mP4vL8nB3cR6", "sk-other/key\"Z8x7c6v5b4n3"
    secrets = Secrets({key: "A", other: "B"})
    assert not secrets.sent_whole(key[:20] + " and " + other[:-1])  # (pieces: no key is held whole)
    held = secrets.sent_whole(f"x{key}y")
    assert held.scrub_message(key[:12] + " " + other[:12]) == "[redacted A] " + other[:12]
    escaped = other.replace("/", "\\/").replace('"', '\\"')
    assert secrets.sent_whole(escaped).scrub_message(other[:10]) == "[redacted B]"


def test_sent_whole_in_searches_a_body_as_bytes_with_the_texts_beside_it():
    key, other = "sk-sent-whole-Q7w9ZxK2mP4vL8nB3cR6", "sk-other/key\"Z8x7c6v5b4n3"
    secrets = Secrets({key: "A", other: "B"})
    filler = b"y" * (1024 * 1024)
    held = secrets.sent_whole_in(("/path", "header"), filler + key.encode() + filler)
    assert held.scrub_message(key[:12] + " " + other[:12]) == "[redacted A] " + other[:12]
    escaped = other.replace("/", "\\/").replace('"', '\\"').encode()
    assert secrets.sent_whole_in((), filler + escaped).scrub_message(other[:10]) == "[redacted B]"
    assert secrets.sent_whole_in((f"?q={other}",), filler).scrub_message(other[:10]) == "[redacted B]"
    # pieces, in the body or split between a text and the body, hold no key whole
    assert not secrets.sent_whole_in((key[:20],), key[20:].encode() + filler + key[:-1].encode())
    assert not secrets.sent_whole_in((), b"\xff\xfe" + key[:-1].encode())


def test_sent_whole_finds_a_key_a_json_body_holds_whole_in_another_spelling():
    # JSON may write any character as \uXXXX, a letter too: the body holds the key whole
    key = "sk-sent-whole-Q7w9ZxK2mP4vL8nB3cR6"
    secrets = Secrets({key: "A"})
    body = '{"whenBusy": "%s"}' % key.replace("s", "\\u0073", 1).replace("Q", "\\u0051")
    assert json.loads(body)["whenBusy"] == key
    assert secrets.sent_whole(body).scrub_message(key[:12]) == "[redacted A]"
    assert secrets.sent_whole_in((), body.encode()).scrub_message(key[:12]) == "[redacted A]"
    # a key spelled so as a map key, and deep in the body
    deep = '{"a": [{"%s": 1}]}' % key.replace("w", "\\u0077")
    assert secrets.sent_whole_in((), deep.encode())
    # a piece so spelled is no key; nor is a body that is no JSON
    assert not secrets.sent_whole_in((), ('{"a": "%s"}' % key[:-1].replace("s", "\\u0073", 1)).encode())
    assert not secrets.sent_whole_in((), (key.replace("s", "\\u0073", 1) + " not json").encode())
