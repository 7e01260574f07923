"""The store trains a zstd dictionary by itself once the log is long enough (auto_dictionary_after)."""

from __future__ import annotations

from pathlib import Path

import trio

from events.reader import LogReader
from events.store import Draft, open_store
from events.types import InstructionAppended

WORDS = "alpha beta gamma delta event store codec frame replay session commit durable".split()


def text(i: int) -> str:
    return " ".join(f"{WORDS[(i * 7 + j) % len(WORDS)]}_{(i * 31 + j) % 97}" for j in range(40))


async def test_dictionary_is_trained_once_and_every_row_decodes(data_dir: Path) -> None:
    async with open_store(data_dir, auto_dictionary_after=200) as store:
        seqs = []
        for i in range(600):
            seqs.extend((await store.append(Draft(InstructionAppended(text=text(i)), session_id="s1"))).seqs)
            if i >= 300 and store.codec.active_dict_id:
                break
            if i % 50 == 0:
                await trio.sleep(0.01)  # let the background trainer finish
        with trio.move_on_after(10):  # a loaded machine may starve the trainer's thread a while
            while not store.codec.active_dict_id:
                await trio.sleep(0.01)
        dict_id = store.codec.active_dict_id
        assert dict_id, "no dictionary was trained"
        more = await store.append(Draft(InstructionAppended(text=text(10_000)), session_id="s1"))
        events = await store.read_events(limit=10_000)
    assert [e.seq for e in events] == seqs + list(more.seqs)
    assert events[-1].event.text == text(10_000)
    with LogReader(data_dir) as reader:
        assert reader.meta()["active_dict_id"] == str(dict_id)
        assert dict_id in reader.dictionaries()
        dict_ids = {r.dict_id for r in reader.rows()}
        assert dict_ids == {0, dict_id}
        assert [e.event.text for e in reader.events()][-1] == text(10_000)


async def test_auto_dictionary_off(data_dir: Path) -> None:
    async with open_store(data_dir, auto_dictionary_after=None) as store:
        for i in range(300):
            await store.append(Draft(InstructionAppended(text=text(i)), session_id="s1"))
        assert not store.codec.active_dict_id
