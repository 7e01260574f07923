"""Context items carry their text once; a session's tail is read by ``session_seq``; the faux
provider's request record is bounded."""

from __future__ import annotations

from pathlib import Path

import apsw

from events import types as t
from events.reader import LogReader, StoredEvent
from events.store import Draft, open_store
from projections import snapshots
from projections.session_state import (
    AgentState,
    SessionState,
    apply,
    item_parts,
    pruned_placeholder,
    snapshot_bytes,
    state_from_snapshot,
    working_context,
)
from runtime.providers.base import ModelRequest
from runtime.providers.faux import REQUESTS_KEPT, FauxProvider
from runtime.views import session_view

IMAGE = t.ImagePart("a" * 64, "image/png")


def fold(events: list[t._Event]) -> SessionState:
    state = SessionState("s1")
    for seq, ev in enumerate(events, 1):
        rid = f"r{seq}" if isinstance(ev, t.InputSubmitted) else None
        apply(state, StoredEvent(seq, 0, "p1", "s1", seq, None, "task_1", t.kind_of(ev), rid, ev))
    return state


def test_pure_text_items_carry_their_text_once_and_parts_read_the_same() -> None:
    call = t.ToolCall("call_1", "bash", "{}")
    state = fold([
        t.SessionCreated(model="faux/faux-1"),
        t.InputSubmitted(content=[t.TextPart("look at this"), IMAGE]),
        t.InputSubmitted(content=[t.TextPart("plain")]),
        t.TaskStarted(input_request_id="r2"),
        t.InputPlaced(input_request_id="r2"),
        t.InputPlaced(input_request_id="r3"),
        t.ModelRequested(provider="faux", model="faux-1"),
        t.ModelResponded(text="calling", tool_calls=[call]),
        t.ToolFinished(call_id="call_1", name="bash", status="ok", content=[t.TextPart("out")]),
        t.ToolFinished(call_id="call_2", name="bash", status="ok", content=[t.TextPart("a"), t.TextPart("b")]),
        t.ToolFinished(call_id="call_3", name="bash", status="ok", content=[]),
        t.InstructionAppended(text="", source="user"),
        t.ContextCompacted(summary="so far", replaced_item_ids=["c3"]),
    ])
    items = state.agents["main"].items
    by_role = [(it.role, it.text, it.parts, item_parts(it)) for it in items]
    assert by_role == [
        ("user", "look at this", (t.TextPart("look at this"), IMAGE), [t.TextPart("look at this"), IMAGE]),
        ("user", "plain", (), [t.TextPart("plain")]),
        ("assistant", "calling", (), [t.TextPart("calling")]),
        ("tool_call", "", (), []),
        ("tool_result", "out", (), [t.TextPart("out")]),
        # (several text parts: ``text`` joins them with a newline, audit C defect 2; was "ab")
        ("tool_result", "a\nb", (t.TextPart("a"), t.TextPart("b")), [t.TextPart("a"), t.TextPart("b")]),
        ("tool_result", "", (), []),
        ("system", "", (t.TextPart(""),), [t.TextPart("")]),
        ("summary", "so far", (), [t.TextPart("so far")]),
    ]
    # snapshots round-trip exactly
    assert state_from_snapshot(snapshot_bytes(state)) == state
    # the view keeps its shape: "parts" only for items with images or several parts
    view = session_view(state)
    assert view["items"][0]["parts"] == [{"type": "text", "text": "look at this"},
                                         {"type": "image", "artifactId": "a" * 64, "mime": "image/png"}]
    assert "parts" not in view["items"][1] and view["items"][1]["text"] == "plain"
    assert view["items"][-1]["replacedIds"] == ["c3"]
    # a placeholder reads as one text part
    agent = state.agents["main"]
    agent.pruned = [items[4].id]
    placeholder = next(it for it in working_context(agent) if it.id == items[4].id)
    assert item_parts(placeholder) == [t.TextPart(pruned_placeholder(items[4].id))]


async def test_the_tail_read_by_session_seq_matches_the_read_by_seq(tmp_path: Path) -> None:
    async with open_store(tmp_path) as store:
        for i in range(30):
            for sid in ("s1", "s2"):
                await store.append(Draft(t.SessionNamed(name=f"{sid}-{i}"), "p1", sid))
        s1 = [e for e in await store.read_events(limit=1000) if e.session_id == "s1"]
        cut = s1[11]
        by_seq = await store.read_events(session_id="s1", after=cut.seq, limit=1000)
        both = await store.read_events(session_id="s1", after=cut.seq, after_session_seq=cut.session_seq, limit=1000)
        paged = await store.read_events(session_id="s1", after=cut.seq, after_session_seq=cut.session_seq, limit=5)
    assert both == by_seq == s1[12:]
    assert paged == s1[12:17]
    with LogReader(tmp_path) as reader:
        rows = list(reader.rows(session_id="s1", after_session_seq=28, page=1))
    assert [r.session_seq for r in rows] == [29, 30]


async def test_the_faux_provider_keeps_only_its_latest_requests() -> None:
    faux = FauxProvider("faux")
    for i in range(REQUESTS_KEPT + 3):
        await faux.stream(ModelRequest("faux-1", [], [], [], agent_id=f"a{i}"), lambda delta: None)
    assert len(faux.requests) == REQUESTS_KEPT
    assert faux.requests[0].agent_id == "a3" and faux.requests[-1].agent_id == f"a{REQUESTS_KEPT + 2}"


def test_a_snapshot_in_item_chunks_loads_the_same_state(monkeypatch) -> None:
    monkeypatch.setattr(snapshots, "CHUNK_ITEMS", 2)
    events: list[t._Event] = [t.SessionCreated(model="faux/faux-1")]
    for i in range(5):
        events += [t.ModelRequested(provider="faux", model="faux-1"), t.ModelResponded(text=f"answer {i}")]
    state = fold(events)
    state.agents["sub_x"] = AgentState("sub_x", role="subagent", items=list(state.agents["main"].items[:3]))
    state.agents["empty"] = AgentState("empty")
    store = snapshots.SnapshotStore(apsw.Connection(":memory:"))
    store.save(state)
    assert store.load("s1") == state
    store.conn.execute("UPDATE snapshots SET state = substr(state, 1, 200)")
    assert store.load("s1") is None  # a damaged snapshot is only a lost shortcut


def test_a_snapshot_with_a_flipped_bit_is_refused_never_loaded_as_another_state() -> None:
    """zstd frames were written without a checksum: a bit flipped in a stored snapshot (bad
    sector, a torn copy) often still decompressed and decoded, into another item text or counter,
    and the session woke with a state its log never said."""
    events: list[t._Event] = [t.SessionCreated(model="faux/faux-1")]
    for i in range(5):
        events += [t.ModelRequested(provider="faux", model="faux-1"),
                   t.ModelResponded(text=f"answer number {i}, long enough to be stored as literals")]
    state = fold(events)
    state.agents["sub_a0"] = AgentState("sub_a0", role="subagent", items=list(state.agents["main"].items[:2]))
    state.agents["sub_a1"] = AgentState("sub_a1", role="subagent", items=list(state.agents["main"].items[2:3]))
    store = snapshots.SnapshotStore(apsw.Connection(":memory:"))
    store.save(state)
    (blob,) = store.conn.execute("SELECT state FROM snapshots").fetchone()
    wrong = []
    for i in range(len(blob)):
        for bit in (0x01, 0x80):
            damaged = bytearray(blob)
            damaged[i] ^= bit
            store.conn.execute("UPDATE snapshots SET state = ?", (bytes(damaged),))
            loaded = store.load("s1")
            if loaded is not None and loaded != state:
                wrong.append((i, bit))
    assert wrong == []
    store.conn.execute("UPDATE snapshots SET state = ?", (blob,))
    assert store.load("s1") == state
