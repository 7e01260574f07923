"""The store trains a zstd dictionary by itself once the log is long enough (auto_dictionary_after),
and a dictionary trained again never takes an id the log holds with other bytes."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import apsw
import pytest
import trio
import zstandard

from events.codec import free_dictionary_id, train_dictionary
from events.errors import CorruptEvent, TooFewSamples
from events.reader import LogReader
from events.store import (DICTIONARY_SAMPLE_MAX_BYTES, DICTIONARY_SAMPLES_MAX_BYTES, Draft, EventStore,
                          open_store)
from events.types import InstructionAppended

from ..rawlog import body_of_row, edit_log

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


async def _train(store) -> int:  # type: ignore[no-untyped-def]
    return await trio.to_thread.run_sync(store.train_dictionary)


async def test_a_dictionary_trained_again_never_takes_the_id_of_a_damaged_one(data_dir: Path) -> None:
    """A trained dictionary's id is a hash of its content, so training again on the same events
    gives the same id. With that id's stored row damaged, the store used the new bytes under it
    while the row kept the damaged ones: every event appended after that was acknowledged, read
    back fine until the restart, and could never be decoded again."""
    async with open_store(data_dir, auto_dictionary_after=None) as store:
        for i in range(300):
            await store.append(Draft(InstructionAppended(text=text(i)), session_id="s1"))
        first = await _train(store)
        assert await _train(store) == first  # intact: the same dictionary, the same id, one row
    with LogReader(data_dir) as reader:
        assert list(reader.dictionaries()) == [first]
        original = reader.dictionaries()[first]
    conn = apsw.Connection(str(data_dir / "events.db"))
    with conn:
        conn.execute("UPDATE dictionaries SET data = x'00' WHERE dict_id = ?", (first,))
    conn.close()
    async with open_store(data_dir, auto_dictionary_after=None) as store:
        assert not store.codec.active_dict_id  # the damaged one is not used
        second = await _train(store)
        after = await store.append(Draft(InstructionAppended(text=text(10_000)), session_id="s1"))
    with LogReader(data_dir) as reader:
        (row,) = reader.rows(after=after.seq - 1)
        assert reader.decode(row).event.text == text(10_000)  # after the restart too
        assert second != first
        stored = reader.dictionaries()
        assert stored[first] == b"\x00"  # the damage stays for verify to report
        assert stored[second][8:] == original[8:]  # the same dictionary under a free id
        assert reader.meta()["active_dict_id"] == str(second)
        assert row.dict_id == second
        assert reader.damaged_dictionaries.keys() == {first}


def test_a_free_dictionary_id_wraps_inside_the_range_zstd_leaves_to_trained_dictionaries() -> None:
    samples = [text(i).encode() for i in range(200)]
    dict_id, data = train_dictionary(samples, 4096)
    assert free_dictionary_id(dict_id, data, {dict_id: data}) == (dict_id, data)  # the same bytes
    assert free_dictionary_id(dict_id, data, {}) == (dict_id, data)
    for taken, want in (({dict_id: b"x"}, dict_id + 1 if dict_id + 1 < 2**31 else 32768),
                        ({dict_id: b"x", dict_id + 1: b"y"}, dict_id + 2 if dict_id + 2 < 2**31 else None)):
        if want is None:
            continue
        new_id, new = free_dictionary_id(dict_id, data, taken)
        assert new_id == want and zstandard.ZstdCompressionDict(new).dict_id() == want
    top = 2**31 - 1  # the last id zstd leaves to trained dictionaries; past it, the first
    at_top = data[:4] + top.to_bytes(4, "little") + data[8:]
    assert free_dictionary_id(top - 1, data[:4] + (top - 1).to_bytes(4, "little") + data[8:],
                              {top - 1: b"x"})[0] == top
    assert free_dictionary_id(top, at_top, {top: b"x"})[0] == 32768
    assert free_dictionary_id(top, at_top, {top: b"x", 32768: b"y"})[0] == 32769


async def test_a_store_closed_while_its_dictionary_trains_waits_for_the_trainer(data_dir: Path,
                                                                             monkeypatch) -> None:
    """The trainer is a thread of the store's: a store closed while it trains waits for it, so no
    thread of a closed store reads on (its connection, the data directory) after ``close``."""
    training, closed = threading.Event(), threading.Event()
    real = zstandard.train_dictionary

    def held_train(*args, **kwargs):  # type: ignore[no-untyped-def]
        training.set()
        closed.wait(2.0)  # held until the store is closed (or, when close waits for it, 2 s)
        return real(*args, **kwargs)

    monkeypatch.setattr(zstandard, "train_dictionary", held_train)
    store = EventStore.open(data_dir, auto_dictionary_after=20)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        for i in range(40):
            await store.append(Draft(InstructionAppended(text=text(i)), session_id="s1"))
        assert await trio.to_thread.run_sync(training.wait, 10.0), "the trainer did not start"
        store.close_writer()
    trainers = [t for t in threading.enumerate() if t.name == "lens-dictionary-trainer"]
    assert trainers
    store.close()
    left = [t for t in trainers if t.is_alive()]
    closed.set()
    for t in trainers:
        t.join(10.0)
    assert not left, "the dictionary trainer outlived the closed store"


def sampled_by(monkeypatch) -> list[list[bytes]]:  # type: ignore[no-untyped-def]
    """The samples each training hands to zstd (the training itself runs as it is)."""
    seen: list[list[bytes]] = []
    real = zstandard.train_dictionary

    def recording(size, samples, **kw):  # type: ignore[no-untyped-def]
        seen.append(list(samples))
        return real(size, samples, **kw)

    monkeypatch.setattr(zstandard, "train_dictionary", recording)
    return seen


async def test_a_dictionary_is_trained_on_the_small_events_without_reading_the_large_ones(
        data_dir: Path, monkeypatch) -> None:
    # A command's output of 1 MiB of one line repeated is a few KB in the log; training read every
    # one of the latest 5,000 events whole: 2,000 such events made the trainer hold 512 MB and
    # work 12 s (1 GB peak), the daemon's background trainer the same at 10,000 events. A
    # dictionary is for small events: only events of at most DICTIONARY_SAMPLE_MAX_BYTES are
    # samples, chosen by their recorded size before any is decompressed. The large events' bodies
    # are damaged here: a training that read one would fail (damage is never skipped).
    seen = sampled_by(monkeypatch)
    large = "build step ok: compiling module\n" * (1024 * 1024 // 32)
    async with open_store(data_dir, auto_dictionary_after=None) as store:
        small, larges = [], []
        for i in range(60):
            r = await store.append(Draft(InstructionAppended(text=text(i)), session_id="s1"))
            small.extend(r.seqs)
            r = await store.append(Draft(InstructionAppended(text=f"{large}{i}"), session_id="s1"))
            larges.extend(r.seqs)
        edge = "x" * (DICTIONARY_SAMPLE_MAX_BYTES - 64)
        at_limit = None
        for pad in range(64):  # one event of exactly the limit, one byte past it
            raw = store.codec.pack_checked(InstructionAppended(text=edge + "y" * pad))
            if len(raw) == DICTIONARY_SAMPLE_MAX_BYTES:
                at_limit = edge + "y" * pad
                break
        assert at_limit is not None
        await store.append(Draft(InstructionAppended(text=at_limit), session_id="s1"))
        past = await store.append(Draft(InstructionAppended(text=at_limit + "y"), session_id="s1"))
        larges.extend(past.seqs)
    for seq in larges:  # the frame's content and checksum damaged: it no longer decompresses
        body = body_of_row(data_dir, seq)
        edit_log(data_dir, "UPDATE events SET body = ? WHERE seq = ?", (body[:-8] + bytes(8), seq))
    async with open_store(data_dir, auto_dictionary_after=None) as store:
        dict_id = await _train(store)
        assert dict_id and store.codec.active_dict_id == dict_id
    [samples] = seen
    assert max(map(len, samples)) == DICTIONARY_SAMPLE_MAX_BYTES
    assert len(samples) == len(small) + 1  # the small ones and the one at the limit, in seq order
    assert [s for s in samples if len(s) < DICTIONARY_SAMPLE_MAX_BYTES] == [
        store.codec.pack_checked(InstructionAppended(text=text(i))) for i in range(60)]


async def test_the_samples_of_a_dictionary_are_the_latest_events_up_to_a_total(data_dir: Path, monkeypatch) -> None:
    # The samples are the latest events back to the first that does not fit the total: of sizes
    # that differ (60, 1 and 30 KB in turn), so an older small event that would still fit is left
    # out too (the samples are the latest, not whatever fits).
    seen = sampled_by(monkeypatch)
    sizes = (60_000, 1_000, 30_000)
    n = DICTIONARY_SAMPLES_MAX_BYTES // (sum(sizes) // len(sizes)) + 30
    raws = []
    async with open_store(data_dir, auto_dictionary_after=None) as store:
        for i in range(n):
            words = (text(i) + " ") * (sizes[i % 3] // (len(text(i)) + 1) + 1)
            event = InstructionAppended(text=f"{i:06d} " + words[:sizes[i % 3]])
            raws.append(store.codec.pack_checked(event))
            await store.append(Draft(event, session_id="s1"))
        await _train(store)
    [samples] = seen
    total = sum(map(len, samples))
    firsts = [int(store.codec.decode_raw("instruction.appended", s).text[:6]) for s in samples]  # the latest, in seq order
    assert firsts == list(range(n - len(samples), n))
    assert samples == raws[n - len(samples):]
    assert total <= DICTIONARY_SAMPLES_MAX_BYTES < total + len(raws[n - len(samples) - 1])
    # (an older event would have fit: skipping the one that does not would have taken it)
    assert total + min(map(len, raws[:n - len(samples) - 1])) <= DICTIONARY_SAMPLES_MAX_BYTES


async def _small_log_with_damage(data_dir: Path, damage: str) -> int:
    """A log of 40 small events, one of them (returned) then damaged: ``size`` changes its
    recorded ``raw_size``, ``checksum`` its frame's checksum."""
    async with open_store(data_dir, auto_dictionary_after=None) as store:
        for i in range(40):
            r = await store.append(Draft(InstructionAppended(text=text(i)), session_id="s1"))
            if i == 20:
                [bad] = r.seqs
    if damage == "size":
        edit_log(data_dir, "UPDATE events SET raw_size = raw_size - 1 WHERE seq = ?", (bad,))
    else:
        body = body_of_row(data_dir, bad)
        edit_log(data_dir, "UPDATE events SET body = ? WHERE seq = ?", (body[:-1] + bytes([body[-1] ^ 1]), bad))
    return bad


@pytest.mark.parametrize("damage", ["size", "checksum"])
async def test_a_damaged_sample_fails_the_training_naming_its_seq(data_dir: Path, damage: str) -> None:
    # F-LOG-6: damage is never hidden. A row whose frame's size disagrees with its raw_size was
    # skipped silently, while one whose checksum is damaged raised (without its seq): both raise
    # CorruptEvent naming the seq, and no dictionary is recorded.
    bad = await _small_log_with_damage(data_dir, damage)
    async with open_store(data_dir, auto_dictionary_after=None) as store:
        with pytest.raises(CorruptEvent) as caught:
            await _train(store)
        assert not store.codec.active_dict_id
    assert caught.value.seq == bad and str(caught.value).startswith(f"seq {bad}: "), str(caught.value)
    assert caught.value.code == "EVENT_CORRUPT"
    with LogReader(data_dir) as reader:
        assert not reader.dictionaries()


@pytest.mark.parametrize("damage", ["size", "checksum"])
async def test_the_automatic_dictionary_not_trained_for_a_damaged_sample_says_so(
        data_dir: Path, damage: str, caplog) -> None:
    # The daemon's own training goes on without a dictionary, and logs one line naming the seq.
    bad = await _small_log_with_damage(data_dir, damage)
    caplog.set_level(logging.INFO, logger="lens.events")
    async with open_store(data_dir, auto_dictionary_after=40) as store:
        await store.append(Draft(InstructionAppended(text=text(40)), session_id="s1"))
    assert not store.codec.active_dict_id  # (closing the store waited for its trainer)
    lines = [r.getMessage() for r in caplog.records if "dictionary" in r.getMessage()]
    assert len(lines) == 1 and f"seq {bad}: " in lines[0], lines
    assert caplog.records[-1].levelno == logging.WARNING


async def test_too_few_small_events_to_train_on_is_a_typed_error_saying_why(data_dir: Path) -> None:
    # 7 small events and 3 large ones: "need at least 8" was a bare ValueError; it is the log's
    # typed error, its code stable, saying the large events are no samples.
    large = "x" * DICTIONARY_SAMPLE_MAX_BYTES
    async with open_store(data_dir, auto_dictionary_after=None) as store:
        for i in range(7):
            await store.append(Draft(InstructionAppended(text=text(i)), session_id="s1"))
        for i in range(3):
            await store.append(Draft(InstructionAppended(text=large), session_id="s1"))
        with pytest.raises(TooFewSamples) as caught:
            await _train(store)
        assert not store.codec.active_dict_id
    assert caught.value.code == "DICTIONARY_TOO_FEW_SAMPLES"
    message = str(caught.value)
    assert "need at least 8 events to train a dictionary, have 7" in message, message
    assert "3 events over 64 KiB" in message and "not samples" in message, message
    with pytest.raises(TooFewSamples, match="need at least 8 samples to train a dictionary, have 7"):
        train_dictionary([text(i).encode() for i in range(7)])
