"""A session's view lists at most ``VIEW_AGENTS_MAX`` agents (docs/decisions.md, "HTTP edges,
subagents and MCP: what the last audits left"): the main agent and every agent not finished
always, then the latest to finish; ``agentsTotal`` counts them all. The state is folded from the
log's own events by the session reducer, as a session's actor folds them."""

from __future__ import annotations

from events import types as t
from events.reader import StoredEvent
from projections.session_state import SessionState, apply
from runtime.views import VIEW_AGENTS_MAX, session_view


def folded(subagents: int, *, running: int | None = None) -> SessionState:
    """A session whose main agent ran ``subagents`` subagents one after another, all finished but
    the one numbered ``running`` (started and not finished: a long one still at work)."""
    state = SessionState("s1")
    events: list[tuple[str | None, t._Event]] = [(None, t.SessionCreated(model="faux/faux-1"))]
    for i in range(subagents):
        aid = f"sub_call_{i}"
        events.append((aid, t.AgentStarted(parent_agent_id="main", parent_call_id=f"call_{i}", prompt=f"job {i}")))
        if i != running:
            events.append((aid, t.AgentFinished(status="completed", result="ok")))
    for seq, (aid, ev) in enumerate(events, 1):
        apply(state, StoredEvent(seq, 0, "p1", "s1", seq, aid, None, t.kind_of(ev), None, ev))
    return state


def ids(view: dict) -> list[str]:
    return [a["agentId"] for a in view["agents"]]


def test_a_view_lists_every_agent_up_to_the_bound_then_the_latest() -> None:
    at = folded(VIEW_AGENTS_MAX - 1)  # (with the main agent: exactly the bound)
    view = session_view(at)
    assert view["agentsTotal"] == VIEW_AGENTS_MAX == len(view["agents"])
    assert ids(view) == ["main"] + [f"sub_call_{i}" for i in range(VIEW_AGENTS_MAX - 1)]
    over = folded(VIEW_AGENTS_MAX)  # one past: the oldest finished subagent is left out
    view = session_view(over)
    assert view["agentsTotal"] == VIEW_AGENTS_MAX + 1 and len(view["agents"]) == VIEW_AGENTS_MAX
    assert ids(view) == ["main"] + [f"sub_call_{i}" for i in range(1, VIEW_AGENTS_MAX)]
    many = folded(5000, running=3)  # thousands: still the bound, the one at work kept, in start order
    view = session_view(many)
    assert view["agentsTotal"] == 5001 and len(view["agents"]) == VIEW_AGENTS_MAX
    assert ids(view)[:2] == ["main", "sub_call_3"]
    assert ids(view)[2:] == [f"sub_call_{i}" for i in range(5000 - (VIEW_AGENTS_MAX - 2), 5000)]
    assert view["agents"][1]["status"] == "running"
