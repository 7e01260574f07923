"""Property tests of history_search and history_read (F-TOOL-7): history_read's byte pages, and
history_search's pages read while new items arrive.

Texts mix 1- to 4-byte UTF-8 characters, combining marks and NULs. A "character" here is what the
spec's "never splitting a character" can mean for UTF-8 bytes: one code point. A page may end
between a letter and a combining mark that follows it (a grapheme cluster is not kept whole);
paging page after page still gives back the item's bytes exactly.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import apsw
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import types as t
from events.reader import LogReader
from events.store import Draft, open_store
from projections.history import MAX_LIMIT, RANKED_LIMIT, HistoryError, HistoryIndex, HistoryProjection
from projections.projector import Projector, open_projections_db

MAX_READ = 1024 * 1024

# 1-byte, 2-byte (é, ß, Cyrillic), 3-byte (✓, CJK, a combining mark U+0301 is 2 bytes, U+20D7 is
# 3), 4-byte (emoji, a Gothic letter), a NUL, a zero-width joiner and a variation selector.
CHARS = st.sampled_from(list("aZ \n\0éßд✓数ह\u0301\u0308\u20d7\u200d\ufe0f😀𐍈\U0001f44d\U0001f3fd"))
TEXTS = st.lists(CHARS, max_size=60).map("".join) | st.text(max_size=40)


def index_of(text: str) -> HistoryIndex:
    conn = apsw.Connection(":memory:")
    HistoryProjection().create(conn)
    HistoryProjection._flush(conn, [("c1", "prj", "s1", "main", "t1", "user", 1, text)])
    return HistoryIndex(conn)


def starts(data: bytes) -> set[int]:
    """The byte offsets at which a UTF-8 character begins (and the end)."""
    return {i for i, b in enumerate(data) if b & 0xC0 != 0x80} | {len(data)}


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, limits=st.lists(st.integers(1, 12) | st.sampled_from([MAX_READ]), min_size=1, max_size=8))
def test_pages_reassemble_the_item_exactly_and_carry_its_digest(text: str, limits: list[int]) -> None:
    index = index_of(text)
    full = text.encode()
    digest = hashlib.sha256(full).hexdigest()
    out, offset, pages = b"", 0, 0
    while True:
        limit = limits[pages % len(limits)]
        page = index.read("c1", offset=offset, limit=limit)
        chunk = page["text"].encode()
        assert page["offset"] == offset
        assert page["nextOffset"] == offset + len(chunk)
        assert (page["size"], page["digest"]) == (len(full), digest)  # the whole item's, on every page
        assert page["eof"] == (page["nextOffset"] == len(full))
        assert page["nextOffset"] in starts(full)
        if offset < len(full):
            assert chunk, "a page before the end always progresses"
        out += chunk
        offset = page["nextOffset"]
        pages += 1
        if page["eof"]:
            break
    assert out == full
    assert pages <= max(1, len(full))


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, offset=st.integers(-3, 250), limit=st.integers(-2, 12) | st.sampled_from([MAX_READ, MAX_READ + 1]))
def test_any_offset_and_limit_is_one_exact_page_or_a_clear_refusal(text: str, offset: int, limit: int) -> None:
    index = index_of(text)
    full = text.encode()
    ok = starts(full)
    try:
        page = index.read("c1", offset=offset, limit=limit)
    except HistoryError as exc:
        assert exc.code == "INVALID_ARGUMENT"
        # refused exactly when the offset is outside the item or inside a character, or the
        # limit is outside 1..1 MiB
        assert offset not in ok or not 1 <= limit <= MAX_READ, (offset, limit)
        return
    assert offset in ok and 1 <= limit <= MAX_READ
    end = page["nextOffset"]
    assert page["text"].encode() == full[offset:end]
    fitting = [b for b in ok if offset < b <= offset + limit]
    if offset == len(full):
        assert (end, page["eof"], page["text"]) == (offset, True, "")
    elif fitting:
        assert end == max(fitting)  # as many whole characters as the limit holds
    else:
        assert end == min(b for b in ok if b > offset)  # a limit below one character: that character


# --------------------------------------------------------------------------- paging while items arrive

WORDS = ["quokka", "wombat", "numbat"]
SESSIONS = [("prj_one", "s1"), ("prj_one", "s2"), ("prj_two", "s3")]  # s3: another project


def _drafts(choices: list[tuple[int, int, int, int]], base: int) -> list[Draft]:
    """Assistant answers: (session, agent, task, words) picked by index; each text distinct."""
    out = []
    for i, (s, a, tk, w) in enumerate(choices):
        project, session = SESSIONS[s]
        words = [WORDS[j] for j in range(len(WORDS)) if w >> j & 1] or ["dingo"]
        text = " ".join(words * (1 + (base + i) % 3)) + f" item{base + i}"  # relevance varies
        out.append(Draft(t.ModelResponded(text=text), project_id=project, session_id=session,
                         agent_id=("main", "sub_1")[a], task_id=("t1", "t2")[tk]))
    return out


CHOICE = st.tuples(st.integers(0, 2), st.integers(0, 1), st.integers(0, 1), st.integers(0, 7))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.lists(CHOICE, min_size=1, max_size=40), many=st.booleans(),
    later=st.lists(st.lists(CHOICE, max_size=6), max_size=12), limit=st.integers(1, 5),
    query=st.sampled_from(["quokka", "quokka wombat", "numbat*", "item*"]),
    flt=st.sampled_from([{}, {"session_id": "s1"}, {"agent_id": "sub_1"}, {"task_id": "t2"},
                         {"session_id": "s2", "agent_id": "main", "task_id": "t1"}]),
)
def test_paging_while_items_arrive_skips_and_repeats_none_of_what_existed(
        start: list, many: bool, later: list[list], limit: int, query: str, flt: dict) -> None:
    """Pages read while new items are appended and projected between them hold every match that
    existed when paging began, once each and in their first order; filters and the project
    hold on every page. ``many``: more than RANKED_LIMIT matches (newest-first order)."""
    if many:  # past RANKED_LIMIT matches of every query under the filter
        match = ({"s2": 1}.get(flt.get("session_id"), 0), int(flt.get("agent_id") == "sub_1"),
                 int(flt.get("task_id") == "t2"), 7)
        start = [match] * (RANKED_LIMIT + 1) + start

    async def scenario(data: Path) -> None:
        async with open_store(data, synchronous="OFF") as store:
            await store.append(Draft(t.SessionCreated(), project_id="prj_one", session_id="s1"))
            await store.append(*_drafts(start, 0))
            projector = Projector(LogReader(data), open_projections_db(data), [HistoryProjection()])
            try:
                projector.catch_up()
                index = HistoryIndex(projector.conn)
                everything, more = index.search("prj_one", query, limit=MAX_LIMIT, **flt)
                while more:
                    page, more = index.search("prj_one", query, limit=MAX_LIMIT, after_item_id=more, **flt)
                    everything += page
                before = [h.context_item_id for h in everything]
                assert (len(before) > RANKED_LIMIT) == many
                seen: list = []
                after, n = None, len(start)
                for step in range(10_000):
                    page, after = index.search("prj_one", query, limit=limit, after_item_id=after, **flt)
                    seen += page
                    if after is None:
                        break
                    if step < len(later) and later[step]:
                        await store.append(*_drafts(later[step], n))
                        n += len(later[step])
                        projector.catch_up()
                ids_seen = [h.context_item_id for h in seen]
                assert len(set(ids_seen)) == len(ids_seen), "a result repeated"
                assert set(before) <= set(ids_seen), "a result that existed was skipped"
                assert [i for i in ids_seen if i in set(before)] == before, "the first order changed"
                for h in seen:
                    assert h.project_id == "prj_one" and h.session_id != "s3"
                    for key, value in flt.items():
                        assert getattr(h, key) == value
            finally:
                projector.close()
                projector.reader.close()

    with tempfile.TemporaryDirectory() as tmp:
        trio.run(scenario, Path(tmp) / "data")
