"""The writer keeps the last ``session_seq`` of a bounded number of sessions (``cached_sessions``):
a session it forgot numbers on from the log, and its request ids still answer as duplicates."""

from __future__ import annotations

from pathlib import Path

import pytest

from events.errors import ConcurrencyConflict
from events.reader import LogReader
from events.store import Draft, open_store
from events.types import InstructionAppended

SESSIONS = 40
CACHED = 8


def note(text: str, session: str, request_id: str | None = None) -> Draft:
    return Draft(InstructionAppended(text=text), session_id=session, request_id=request_id)


async def test_forgotten_sessions_number_on_and_answer_repeats(data_dir: Path) -> None:
    async with open_store(data_dir, cached_sessions=CACHED) as store:
        first = {}
        for round_ in range(3):  # every session written to again after many others
            for k in range(SESSIONS):
                sid = f"s{k}"
                result = await store.append(note(f"{sid}:{round_}", sid, request_id=f"r{round_}"),
                                            note(f"{sid}:{round_}b", sid))
                assert result.session_seqs == (2 * round_ + 1, 2 * round_ + 2)
                assert not result.duplicate
                first.setdefault(sid, result)
                # (the bound holds between groups; a group may look more sessions up first)
                assert len(store._session_seq) <= CACHED + 1
        for k in range(SESSIONS):  # a repeat of the first request of every session, long forgotten
            again = await store.append(note("repeat", f"s{k}", request_id="r0"), note("repeat b", f"s{k}"))
            assert again.duplicate and again.seqs == first[f"s{k}"].seqs[:1]
        last = await store.append(note("checked", "s0"), expected_session_seq=6)
        assert last.session_seqs == (7,)
        with pytest.raises(ConcurrencyConflict):  # (s1 forgotten: its last session_seq comes from the log)
            await store.append(note("stale", "s1"), expected_session_seq=5)
    reader = LogReader(data_dir)
    try:
        for k in range(SESSIONS):
            rows = list(reader.rows(session_id=f"s{k}"))
            want = 7 if k == 0 else 6
            assert [r.session_seq for r in rows] == list(range(1, want + 1))
        assert len(list(reader.rows())) == SESSIONS * 6 + 1
    finally:
        reader.close()
