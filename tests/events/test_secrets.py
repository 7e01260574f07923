"""Secrets never stored: the exact values of configured credentials, scrubbed from every event
body before it is encoded (``events/secrets.py``), at the store's one seam."""

from __future__ import annotations

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
