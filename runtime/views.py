"""JSON shapes of the HTTP API (camelCase), derived from state and projections."""

from __future__ import annotations

from itertools import islice
from typing import Any

import msgspec

from events import types as t
from events.secrets import Secrets
from projections.context_budget import item_marks
from projections.session_state import (EMPTY_ANSWER, REFUSED, USAGE_FIELDS, MAIN_AGENT, AgentState, Item, SessionState, UsageTotals, item_parts,
                                       text_of)

from .decide import CUT_BY, run_order
from .errors import AgentNotFound, InvalidCommand

QUEUED_PREVIEW_CHARS = 2000
# At most this many items in one view (``itemsLimit``'s default and maximum): the main agent's
# items grow with the session's whole life (the Full Context keeps what compaction replaced).
VIEW_ITEMS_MAX = 1000
# At most this many agents in one view: the main agent, every agent not finished (subagents run
# one at a time, so these are its chain of parents), then the latest to finish. A session that
# ran thousands of subagents answered each read with an entry (and its reruns) for every one.
VIEW_AGENTS_MAX = 100
# At most this many queued inputs in one view (``queuedLimit``'s default and maximum), the next to
# run first: each carries a preview of up to QUEUED_PREVIEW_CHARS, and a queue of thousands made
# every read of the view megabytes long.
VIEW_QUEUED_MAX = 100


def _parts(parts: list[t.ContentPart], not_sent: dict[str, str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, t.TextPart):
            out.append({"type": "text", "text": p.text})
        else:
            out.append({"type": "image", "artifactId": p.artifact_id, "mime": p.mime})
            if p.artifact_id in not_sent:  # (omitted when the agent's last request sent it)
                out[-1]["notSent"] = not_sent[p.artifact_id]
    return out


def _not_sent_of(item: Item, not_sent: dict[str, str]) -> list[dict[str, str]]:
    """The images of ``item`` its agent's last request did not send, and why."""
    return [{"artifactId": p.artifact_id, "why": not_sent[p.artifact_id]}
            for p in item_parts(item) if isinstance(p, t.ImagePart) and p.artifact_id in not_sent]


_CAMEL = {name: name.split("_")[0] + "".join(w.title() for w in name.split("_")[1:]) for name in USAGE_FIELDS}


def usage_view(u: UsageTotals | t.Usage) -> dict[str, Any]:
    out: dict[str, Any] = {_CAMEL[name]: getattr(u, name) for name in USAGE_FIELDS}
    if isinstance(u, UsageTotals):
        out["requests"] = u.requests
        # Per count, how many answered requests did not report it: a total is complete only
        # when its count is 0 here (an unreported count is unknown, never taken as 0).
        out["unreported"] = {_CAMEL[name]: u.unreported.get(name, 0) for name in USAGE_FIELDS}
    return out


def item_view(it: Item, results: dict[str, Item], running: str | None, pending: frozenset[str],
              not_sent: dict[str, str] | None = None) -> dict[str, Any]:
    """One item as the view shows it; a call's status is its result's, else ``running`` /
    ``pending`` while the agent has it to run (``pending``: the call ids it has), else
    ``interrupted``: a call a fork inherited without its result never runs, and the model is told
    it has no result (``interrupted``) — see ``runtime.providers.compile``. ``not_sent``: the
    images the agent's last request did not send (``AgentState.images_not_sent``): an image part
    says why (``notSent``), a call's result lists its own (``imagesNotSent``)."""
    not_sent = not_sent or {}
    v: dict[str, Any] = {"id": it.id, "role": it.role, "seq": it.seq, "taskId": it.task_id}
    # (the last item of an answer the provider cut, or the item of an empty answer: where it
    # stopped; omitted otherwise)
    if it.stop_reason in CUT_BY or (it.status == EMPTY_ANSWER and it.stop_reason):
        v["stopReason"] = it.stop_reason
    if it.role == "tool_call" and it.call is not None:
        res = results.get(it.call.call_id)
        cid = it.call.call_id
        status = (res.status if res is not None else "running" if running == cid
                  else "pending" if cid in pending else "interrupted")
        v["call"] = {"callId": it.call.call_id, "name": it.call.name, "arguments": it.call.arguments, "status": status}
        if res is not None:
            v["result"] = {"itemId": res.id, "status": res.status, "isError": res.is_error, "text": res.text,
                           "structuredContent": res.structured}
            if res.rerun_after is not None:  # (omitted when the call ran once)
                v["result"]["rerunAfter"] = res.rerun_after
            if not_sent and (missed := _not_sent_of(res, not_sent)):  # (omitted when all were sent)
                v["result"]["imagesNotSent"] = missed
        _refused(v, it)
        return v
    v["text"] = it.text
    parts = item_parts(it)
    # ``text`` joins the text parts with a newline; ``parts`` keeps them apart as they were
    # sent, whenever there is more than one part or an image.
    if len(parts) > 1 or any(isinstance(p, t.ImagePart) for p in parts):
        v["parts"] = _parts(parts, not_sent)
    if it.role == "tool_result":
        v.update(callId=it.call_id, status=it.status, isError=it.is_error)
    elif it.role == "assistant" and it.status:
        # (``aborted``: the text an aborted answer had streamed; ``empty``: an answer with neither
        # text nor calls)
        v["status"] = it.status
    _refused(v, it)
    if it.role == "summary":
        v["replacedIds"] = list(it.replaced_ids)
    if it.role == "system" and it.source:
        v["source"] = it.source
    return v


def view_texts(view: dict[str, Any]) -> list[str]:
    """The strings of a :func:`session_view` where a large view's size is: its items' texts and
    text parts (an item of several parts carries its text twice: joined in ``text``, apart in
    ``parts``), calls' arguments and results' texts (a few dictionary reads an item), for
    :func:`runtime.json_chars.strings_chars` (see :func:`runtime.json_answer.json_answer`).
    Left out: a result's ``structuredContent`` (any JSON), names, ids and the short fields."""
    texts: list[str] = []
    for v in view["items"]:
        if text := v.get("text"):
            texts.append(text)
        parts = v.get("parts")
        if parts is not None:
            texts.extend(p["text"] for p in parts if p["type"] == "text" and p["text"])
        call = v.get("call")
        if call is not None:
            if arguments := call["arguments"]:
                texts.append(arguments)
            result = v.get("result")
            if result is not None and (result_text := result["text"]):
                texts.append(result_text)
    return texts


def _refused(v: dict[str, Any], it: Item) -> None:
    """An item of an answer the provider refused says so (``refused: true``), and the first says
    why when the provider did (``stopDetails``: its ``type``, ``category``, ``explanation``)."""
    if it.status == REFUSED:
        v["refused"] = True
    if it.status in (REFUSED, EMPTY_ANSWER) and it.stop_details:  # (an empty answer refused: why)
        v["stopDetails"] = dict(it.stop_details)


def rerun_calls(items: list[Item]) -> list[dict[str, Any]]:
    """The calls among ``items`` (a subagent's) that ran twice, their executor dead under the first
    run: ``[{callId, name, rerunAfter}]`` in the order they finished."""
    names = {it.call.call_id: it.call.name for it in items if it.role == "tool_call" and it.call is not None}
    return [{"callId": it.call_id, "name": names.get(it.call_id or ""), "rerunAfter": it.rerun_after}
            for it in items if it.role == "tool_result" and it.rerun_after is not None]


def view_status(s: SessionState, unrecorded_work: bool = False) -> str:
    """The view's ``status``: the state's, except that an idle session at work the log does not
    show yet reads ``running``: ``/skill:`` inputs being checked (one is recorded next and starts
    a run, as a queued input would) or a manual compaction waiting for its summary (nothing of it
    is recorded until it ends). A client polling for idle must wait, as ``WaitIdle`` does. An
    input refused by its check, a compaction that ends, leave the session idle again."""
    return _at_work(s.status, unrecorded_work)


def _at_work(status: str, working: bool) -> str:
    return "running" if status == "idle" and working else status


def session_view(s: SessionState, *, unrecorded_work: bool = False, items_limit: int = VIEW_ITEMS_MAX,
                 items_before: int | None = None, agents_start: int | None = None,
                 agents_limit: int = VIEW_AGENTS_MAX, secrets: Secrets | None = None,
                 agent_id: str | None = None, queued_start: int = 0,
                 queued_limit: int = VIEW_QUEUED_MAX) -> dict[str, Any]:
    """The view state of ``GET /sessions/{id}``. ``items`` is a window of the main agent's
    projected items (``itemsTotal`` of them, indexed from 0, the oldest first): the last
    ``items_limit`` before index ``items_before`` (default: the end), starting at
    ``itemsStart``. Only the window is built. Previews cut to :data:`QUEUED_PREVIEW_CHARS` are
    scrubbed of ``secrets`` before the cut (an event stored before a key was known holds it).

    With ``agent_id`` the items (their window, total and ``context`` marks) are that agent's
    instead of the main agent's (a subagent's conversation), and the answer repeats ``agentId``
    (a key only such a view has, so the default answer is as it was); the rest of the view is the
    session's, as always.

    ``agents`` is :func:`shown_agents` by default; with ``agents_start`` it is a page of every
    agent in the order they started (``agentsTotal`` of them, indexed from 0, the main agent
    first): ``agents_limit`` of them from index ``agents_start``, which the answer repeats as
    ``agentsStart`` (a key only a paged view has, so the default answer is as it was).

    ``queued`` is ``queued_limit`` of the queued inputs from index ``queued_start`` of the queue
    (``queuedTotal`` of them, indexed from 0, the next to run first): the whole queue while it
    holds at most :data:`VIEW_QUEUED_MAX`.

    Raises :class:`InvalidCommand` when ``items_before`` is past ``itemsTotal``,
    ``agents_start`` past ``agentsTotal`` or ``queued_start`` past ``queuedTotal``, :class:`AgentNotFound` when the session has no agent
    ``agent_id``."""
    secrets = secrets or Secrets()
    agent = s.agents.get(MAIN_AGENT if agent_id is None else agent_id)
    if agent_id is not None and agent is None:
        raise AgentNotFound(f"session {s.session_id!r} has no agent {agent_id!r}")
    items: list[dict[str, Any]] = []
    agents: list[dict[str, Any]] = []
    shown: list[Item] = []
    if agent is not None:
        results = {it.call_id: it for it in agent.items if it.role == "tool_result" and it.call_id}
        called = {it.call.call_id for it in agent.items if it.role == "tool_call" and it.call is not None}
        # A tool result is shown inside its call's entry; orphans (none today) stand alone.
        shown = [it for it in agent.items if it.role != "tool_result" or it.call_id not in called]
    total = len(shown)
    before = total if items_before is None else items_before
    if before > total:
        whose = "the session's" if agent_id is None else f"agent {agent_id!r}'s"
        raise InvalidCommand(f"itemsBefore {before} is past {whose} {total} items")
    start = max(0, before - items_limit)
    if agents_start is not None and agents_start > len(s.agents):
        raise InvalidCommand(f"agentsStart {agents_start} is past the session's {len(s.agents)} agents")
    if queued_start > len(s.queue):
        raise InvalidCommand(f"queuedStart {queued_start} is past the session's {len(s.queue)} queued inputs")
    if agent is not None:
        pending = frozenset(c.call_id for c in agent.pending_calls)
        items = [item_view(it, results, agent.running_call, pending, agent.images_not_sent)
                 for it in shown[start:before]]
        # How each item stands in the Working Context (visible, pruned, snipped, compacted…).
        marks = item_marks(agent)
        for v in items:
            v["context"] = marks.get(v["id"])
            if "result" in v:
                v["result"]["context"] = marks.get(v["result"]["itemId"])
    for a in shown_agents(s) if agents_start is None else agents_page(s, agents_start, agents_limit):
        # A finished subagent shows how it ended (completed / failed / aborted / interrupted, as
        # its agent.finished says), not a bare "finished" that hid an abort.
        status = a.outcome if a.status == "finished" and a.outcome else a.status
        entry: dict[str, Any] = {"agentId": a.agent_id, "role": a.role, "parentAgentId": a.parent_agent_id,
                                 "status": status, "items": len(a.items),
                                 "lastError": a.last_error,  # "CODE: message" of its last failed model request
                                 "usage": usage_view(a.usage)}  # its own requests (the session's is their sum)
        if a.agent_id != MAIN_AGENT:  # (the main agent's calls are the items, each with its own rerunAfter)
            rerun = rerun_calls(a.items)
            if rerun:  # (omitted when none ran twice)
                entry["rerunCalls"] = rerun
        agents.append(entry)
    return {
        "id": s.session_id,
        "projectId": s.project_id,
        "name": s.name,
        "model": s.model,
        "thinkingLevel": s.thinking_level,
        "status": view_status(s, unrecorded_work),
        "runningTaskId": s.running_task,
        "items": items,
        "itemsTotal": total,
        "itemsStart": start,
        "queued": [
            {"requestId": q.request_id, "text": secrets.cut(text_of(q.content), QUEUED_PREVIEW_CHARS), "whenBusy": q.when_busy,
             "seq": q.seq, "images": sum(1 for p in q.content if isinstance(p, t.ImagePart))}
            for q in islice(run_order(s), queued_start, queued_start + queued_limit)
        ],
        "queuedTotal": len(s.queue),
        "todos": [msgspec.to_builtins(x) for x in s.todos],
        "questions": [
            {"questionId": q.question_id, "agentId": q.agent_id, "questions": msgspec.to_builtins(q.questions)}
            for q in s.questions.values()
        ],
        "usage": usage_view(s.usage),
        # Background jobs as the log says (output: GET /sessions/{id}/jobs/{jobId}).
        "jobs": [{"jobId": j.job_id, "command": secrets.cut(j.command, QUEUED_PREVIEW_CHARS), "status": j.status,
                  "exitCode": j.exit_code, "reason": j.reason} for j in s.jobs.values()],
        "agents": agents,
        "agentsTotal": len(s.agents),
        "lastSeq": s.last_seq,
        "deleted": s.deleted,
        "forkedFrom": {"sessionId": s.forked_from_session, "seq": s.forked_from_seq} if s.forked_from_session else None,
    } | ({} if agents_start is None else {"agentsStart": agents_start}) | ({} if agent_id is None else {"agentId": agent_id})


def agents_page(s: SessionState, start: int, limit: int) -> list[AgentState]:
    """At most ``limit`` agents from index ``start`` of every agent in the order they started
    (the order of ``s.agents``: an agent is added when it starts and never removed)."""
    return list(islice(s.agents.values(), start, start + limit))


def shown_agents(s: SessionState) -> list[AgentState]:
    """The agents a view lists, at most :data:`VIEW_AGENTS_MAX`, in the order they started: the
    main agent and every agent not finished always, then as many of the latest finished as fit
    (the view's ``agentsTotal`` counts them all)."""
    agents = list(s.agents.values())
    if len(agents) <= VIEW_AGENTS_MAX:
        return agents
    kept = {id(a) for a in agents if a.agent_id == MAIN_AGENT or a.status != "finished"}
    for a in reversed(agents):
        if len(kept) >= VIEW_AGENTS_MAX:
            break
        kept.add(id(a))
    return [a for a in agents if id(a) in kept]


def session_row_view(row: tuple, *, unrecorded_work: bool = False) -> dict[str, Any]:
    """A row of the session list; ``unrecorded_work``: the session has ``/skill:`` inputs being
    checked or a manual compaction under way (it reads ``running`` then, as its view does:
    :func:`view_status`)."""
    (sid, project_id, name, model, thinking, created, updated, last_seq, deleted, fsess, fseq, open_tasks, queued,
     open_questions, quarantined) = row
    # (as the view's status has it: deleted, quarantined, open questions, then work running or queued)
    status = ("deleted" if deleted else "quarantined" if quarantined else "awaiting_answer" if open_questions
              else "running" if open_tasks or queued else "idle")
    status = _at_work(status, unrecorded_work)
    return {
        "id": sid, "projectId": project_id, "name": name, "model": model, "thinkingLevel": thinking,
        "createdTs": created, "updatedTs": updated, "lastSeq": last_seq, "deleted": bool(deleted),
        "status": status, "queued": queued,
        "forkedFrom": {"sessionId": fsess, "seq": fseq} if fsess else None,
    }


def project_view(row: tuple) -> dict[str, Any]:
    pid, name, workspace, created, _seq = row
    return {"id": pid, "name": name, "workspace": workspace, "createdTs": created}
