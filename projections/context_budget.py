"""Working Context accounting: token estimates, the automatic-compaction threshold, which old
tool results pruning replaces, and how each Full Context item stands in the Working Context.

Pure functions of an agent's state (no I/O, no clock), so the actor's decisions (compact now,
prune these) and the session view agree, and replaying the events they recorded gives the same
Working Context.

Token estimate (F-CTX-2): one token per 4 bytes of UTF-8 text, rounded up per piece of text
(an item's text, a tool call's name and arguments, each system prompt section, each tool's
JSON schema), plus :data:`IMAGE_TOKENS` per image (F-EXE-6). It is an estimate for deciding
when to compact, never a count reported as usage (F-CTX-5).
"""

from __future__ import annotations

from typing import Any, Iterable

import msgspec

from events import types as t

from .session_state import AgentState, Item, item_parts, working_context

IMAGE_TOKENS = 4096  # per image, whatever its size (F-EXE-6)
BYTES_PER_TOKEN = 4


def text_tokens(text: str) -> int:
    """The estimate for one piece of text: its UTF-8 bytes / 4, rounded up."""
    n = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return -(-n // BYTES_PER_TOKEN)


def item_tokens(item: Item) -> int:
    """The estimate for one Working Context item (as it is there: a pruned result's placeholder)."""
    if item.role == "tool_call" and item.call is not None:
        return text_tokens(item.call.name) + text_tokens(item.call.arguments)
    total = 0
    for p in item_parts(item):
        if isinstance(p, t.ImagePart):
            total += IMAGE_TOKENS
        else:
            total += text_tokens(p.text)
    return total


_json = msgspec.json.Encoder()


def request_tokens(system: Iterable[str], items: Iterable[Item], tools: Iterable[dict[str, Any]] = ()) -> int:
    """The estimate for a model request: its system prompt sections, items and tool schemas."""
    return (sum(text_tokens(s) for s in system) + sum(item_tokens(it) for it in items)
            + sum(text_tokens(_json.encode(tool).decode()) for tool in tools))


def compaction_threshold(context_window: int, trigger_percent: int) -> int:
    """The estimated tokens at which automatic compaction starts: ``trigger_percent`` of the
    window, rounded up (a request of exactly this many tokens is compacted first)."""
    return -(-context_window * trigger_percent // 100)


def replaceable(agent: AgentState) -> list[Item]:
    """The Working Context items a compaction replaces: all of them but system instructions
    (skill instructions and instruction updates keep their effect; they are not conversation)."""
    return [it for it in working_context(agent) if it.role != "system"]


def worth_compacting(agent: AgentState) -> bool:
    """Whether a compaction would shrink anything: the Working Context holds conversation beyond
    one summary. (After a compaction it holds just that summary: an automatic compaction is not
    repeated however large the summary is, so it can never loop.)"""
    items = replaceable(agent)
    return bool(items) and not (len(items) == 1 and items[0].role == "summary")


def prunable_results(agent: AgentState, keep_rounds: int, min_tokens: int) -> list[str]:
    """Ids of the tool results pruning replaces now: results in the Working Context (not pruned,
    not re-attached by the user) of calls made before the last ``keep_rounds`` model responses,
    whose estimate is at least ``min_tokens``."""
    response_seqs: list[int] = []
    for it in agent.items:
        if it.role in ("assistant", "tool_call") and (not response_seqs or response_seqs[-1] != it.seq):
            response_seqs.append(it.seq)
    if len(response_seqs) <= keep_rounds:
        return []
    cutoff = response_seqs[-keep_rounds] if keep_rounds > 0 else None  # calls from this response on stay
    call_seq = {it.call.call_id: it.seq for it in agent.items if it.role == "tool_call" and it.call is not None}
    pruned, included = set(agent.pruned), set(agent.included)
    out: list[str] = []
    for it in working_context(agent):
        if it.role != "tool_result" or it.id in pruned or it.id in included:
            continue
        seq = call_seq.get(it.call_id or "")
        if seq is None or (cutoff is not None and seq >= cutoff):
            continue
        if item_tokens(it) >= min_tokens:
            out.append(it.id)
    return out


def item_marks(agent: AgentState) -> dict[str, str]:
    """How each Full Context item stands in the Working Context, by item id: ``visible``,
    ``included`` (re-attached by Include Result), ``pruned`` (a placeholder), ``snipped``,
    ``compacted`` (replaced by a summary), ``hidden`` (by the user) or ``removed`` (its call or
    result is gone, so it went with it)."""
    shown = {it.id: it for it in working_context(agent)}
    replaced: set[str] = set()
    for it in agent.items:
        if it.role == "summary":
            replaced.update(it.replaced_ids)
    snipped, hidden, included, pruned = set(agent.snipped), set(agent.hidden), set(agent.included), set(agent.pruned)
    out: dict[str, str] = {}
    for it in agent.items:
        iid = it.id
        if iid in hidden:
            out[iid] = "hidden"
        elif iid in shown:
            if iid in included:
                out[iid] = "included"
            elif iid in pruned and it.role == "tool_result":
                out[iid] = "pruned"
            elif it.role == "tool_call" and (iid in snipped or iid in replaced):
                out[iid] = "included"  # back with its re-attached result
            elif iid in snipped or iid in replaced:
                # (a result whose call stayed keeps a placeholder in the Working Context)
                out[iid] = "snipped" if iid in snipped else "compacted"
            else:
                out[iid] = "visible"
        elif iid in snipped:
            out[iid] = "snipped"
        elif iid in replaced:
            out[iid] = "compacted"
        else:
            out[iid] = "removed"
    return out
