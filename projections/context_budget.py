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

from typing import Any, Callable, Collection, Iterable

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


def unanswered_inputs(agent: AgentState) -> list[Item]:
    """The user items at the end of the Working Context that no model response has followed yet:
    the input a task starts with and the steers placed since (system instructions among them are
    passed over). A compaction keeps them as written, after its summary: the model answers the
    user's words, not a summary of them."""
    out: list[Item] = []
    for it in reversed(working_context(agent)):
        if it.role == "system":
            continue
        if it.role != "user":
            break
        out.append(it)
    out.reverse()
    return out


def keep_recent_budget(keep_recent_tokens: int, threshold: int) -> int:
    """The estimated tokens of the newest rounds a compaction keeps as written: the configured
    ``keepRecentTokens``, at most half the automatic threshold (what is kept then never brings the
    next request to the threshold by itself, so automatic compaction does not follow every
    request)."""
    return max(0, min(keep_recent_tokens, threshold // 2))


def _worth_summarizing(before: list[Item]) -> bool:
    """Whether what a compaction would replace is more than nothing or one earlier summary."""
    return len(before) > 1 or (len(before) == 1 and before[0].role != "summary")


def _tails(items: list[Item], budget: int, begins: Callable[[int], bool]) -> list[tuple[int, int]]:
    """Where a kept tail of ``items`` may begin, newest first, with its estimate: the indexes ``k``
    for which ``begins(k)``, ``items[k:]`` is estimated at most ``budget`` tokens and holds the
    call of every tool result in it."""
    out: list[tuple[int, int]] = []
    tokens = 0
    calls: set[str] = set()
    results: set[str] = set()
    for k in range(len(items) - 1, -1, -1):
        it = items[k]
        tokens += item_tokens(it)
        if tokens > budget:
            break
        if it.role == "tool_call" and it.call is not None:
            calls.add(it.call.call_id)
        elif it.role == "tool_result":
            results.add(it.call_id or "")
        if results <= calls and begins(k):
            out.append((k, tokens))
    return out


def goes_on(conv: list[Item], k: int) -> bool:
    """Whether the user item ``conv[k]`` goes on a task already begun rather than beginning a
    round: the item before it in ``conv`` (the conversation, system instructions left out;
    summaries passed over, they stand for what they replaced) belongs to the same task — a steer
    placed in the middle of the task's loop, or one placed with its input. Items of no task
    (``task_id`` None) each begin a round."""
    task = conv[k].task_id
    if task is None:
        return False
    prev = next((conv[j] for j in range(k - 1, -1, -1) if conv[j].role != "summary"), None)
    return prev is not None and prev.task_id == task


def recent_rounds(agent: AgentState, budget: int) -> list[Item]:
    """The newest conversation a compaction keeps as written, estimated at most ``budget`` tokens
    (exactly at it is kept, one token past it is not), leaving something before it worth
    summarizing (more than one earlier summary). System instructions are passed over: they are
    never replaced.

    Whole rounds first: the longest tail of the conversation that begins at a round's input (a
    user input that begins a task, not a steer placed in it, :func:`goes_on`) and holds the call
    of every tool result in it. When not even the newest round fits whole (a task deep in a long
    tool loop), the cut falls inside it (:func:`turn_tail`): its input and its newest steps. Empty
    when neither fits: then nothing of it is kept but the inputs not answered yet."""
    conv = [it for it in working_context(agent) if it.role != "system"]
    def begins(k: int) -> bool:  # a round's input, not a steer placed in its task
        return conv[k].role == "user" and not goes_on(conv, k)

    rounds = [k for k, _tokens in _tails(conv, budget, begins) if _worth_summarizing(conv[:k])]
    return conv[rounds[-1]:] if rounds else turn_tail(conv, budget)


def turn_tail(conv: list[Item], budget: int) -> list[Item]:
    """The part of the newest round of ``conv`` (the conversation, system instructions left out)
    a compaction keeps when the round is over the budget: its input (the user items it begins
    with: the task's first input, and a steer placed with it), then its newest steps from where
    a model response or a steer placed in the loop begins — never at a tool result, nor between
    a response's text and its calls, and with the call of every tool result kept — all estimated
    at most ``budget`` tokens, leaving something before the steps worth summarizing. A steer
    placed in the loop is one of the round's steps (:func:`goes_on`): kept in its place when the
    cut falls before it, summarized with the steps before the cut otherwise; the round's input
    is the task's, whatever was steered since. The input is kept while it fits beside at least
    the newest response; else the steps alone. Empty when not even the newest response (with
    the results of its calls) fits, or when the round has no response yet (its inputs are the
    unanswered ones)."""
    start = next((k for k in range(len(conv) - 1, -1, -1)
                  if conv[k].role == "user" and not goes_on(conv, k)), None)
    if start is None:
        return []
    while start > 0 and conv[start - 1].role == "user":
        start -= 1
    end = start
    while end + 1 < len(conv) and conv[end + 1].role == "user":
        end += 1
    inputs, steps = conv[start:end + 1], conv[end + 1:]
    if not steps:
        return []
    if sum(item_tokens(it) for it in conv[start:]) <= budget:
        return []  # the round fits whole: kept whole by recent_rounds, or summarized whole (nothing else is)

    def begins(k: int) -> bool:  # a model response, or a steer a response follows, begins at steps[k]
        it, prev = steps[k], steps[k - 1] if k else None
        if it.role == "user":
            return prev is not None and prev.role != "user" and any(s.role != "user" for s in steps[k:])
        return it.role in ("assistant", "tool_call") and (
            prev is None or prev.seq != it.seq or prev.role not in ("assistant", "tool_call"))

    cuts = _tails(steps, budget, begins)
    with_input = sum(item_tokens(it) for it in inputs)
    for keep_input in (True, False):
        room = budget - (with_input if keep_input else 0)
        fit = [k for k, used in cuts if used <= room
               and _worth_summarizing(conv[:start] + ([] if keep_input else inputs) + steps[:k])]
        if fit:
            return [*inputs, *steps[fit[-1]:]] if keep_input else steps[fit[-1]:]
    return []


def summarized(items: list[Item], keep: Collection[str]) -> list[Item]:
    """The Working Context ``items`` a summarizing request carries: all but those a compaction
    keeps, except a kept input that stands before what is replaced (the input of a round cut
    inside, :func:`turn_tail`): the summary of its first steps is read with what they answered."""
    last = max((i for i, it in enumerate(items) if it.id not in keep and it.role != "system"), default=-1)
    return [it for i, it in enumerate(items) if it.id not in keep or i < last]


def kept_items(agent: AgentState, system: Iterable[str], tools: Iterable[dict[str, Any]], budget: int,
               rounds: list[Item]) -> frozenset[str]:
    """The ids a compaction keeps as written: ``rounds`` (:func:`recent_rounds`) together with
    the inputs not answered yet (a round cut inside has none: its newest item is a response or a
    result; else both are tails of the conversation and the longer holds the other) when they
    fit, with the system prompt and instructions, in a summarizing request's ``budget``; else the
    unanswered inputs alone when they fit; else none."""
    system, tools = list(system), list(tools)
    instructions = [it for it in working_context(agent) if it.role == "system"]
    inputs = unanswered_inputs(agent)
    for kept in (rounds if len(rounds) >= len(inputs) else inputs, inputs):
        if kept and request_tokens(system, [*instructions, *kept], tools) <= budget:
            return frozenset(it.id for it in kept)
    return frozenset()


def replaceable(agent: AgentState, keep: Collection[str] = ()) -> list[Item]:
    """The Working Context items a compaction replaces: all of them but system instructions
    (skill instructions and instruction updates keep their effect; they are not conversation)
    and the ids in ``keep`` (the inputs not answered yet, :func:`unanswered_inputs`, when they
    fit beside a summary)."""
    return [it for it in working_context(agent) if it.role != "system" and it.id not in keep]


def replaced_ids(agent: AgentState, keep: Collection[str] = ()) -> list[str]:
    """The ids a compaction records as replaced: :func:`replaceable`'s, and the items out of the
    Working Context only because the user hid or snipped them that stand among those (before the
    newest of them, in the order the Working Context would have without the hides and snips; not
    system instructions, which a compaction never replaces). The summary is written without such
    an item, and stands for the conversation it was part of: unhidden or unsnipped later, it stays
    out of the Working Context, ``compacted`` like its neighbours (Include Result still re-attaches
    a tool result), instead of coming back before (or inside) a summary that never saw it. One
    among the kept items is not replaced: put back, it is back in its place. With nothing hidden
    or snipped this is :func:`replaceable`'s ids, in their order."""
    replaced = {it.id for it in replaceable(agent, keep)}
    if not agent.hidden and not agent.snipped:
        return [it.id for it in working_context(agent) if it.id in replaced]
    shown = {it.id for it in working_context(agent)}
    unedited = working_context(msgspec.structs.replace(agent, hidden=[], snipped=[]))
    last = max((i for i, it in enumerate(unedited) if it.id in replaced), default=-1)
    return [it.id for i, it in enumerate(unedited) if it.id in replaced or (
        i < last and it.id not in shown and it.role != "system")]


def worth_compacting(agent: AgentState, keep: Collection[str] = ()) -> bool:
    """Whether a compaction would shrink anything: the Working Context holds conversation beyond
    one summary (and the items in ``keep``). (After a compaction it holds just that summary and
    the items it kept: an automatic compaction is not repeated however large the summary is, so
    it can never loop.)"""
    items = replaceable(agent, keep)
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


# --------------------------------------------------------------------------- the summarizing request

# Tokens kept for the summary's own answer when the model sets no ``maxOutputTokens`` (at most
# half the window either way).
SUMMARY_OUTPUT_TOKENS = 8192
# What a cut item keeps of its text, in estimated tokens (its beginning).
CUT_HEAD_TOKENS = 256
CUT_MARK = "cut from the summarizing request"
OMITTED_MARK = "left out of the summarizing request"


def summary_budget(context_window: int, max_output_tokens: int | None) -> int:
    """The estimated tokens a summarizing request may use: the window less room for the summary
    (the model's ``maxOutputTokens``, else :data:`SUMMARY_OUTPUT_TOKENS`; at most half the window)."""
    reserve = min(max_output_tokens or SUMMARY_OUTPUT_TOKENS, context_window // 2)
    return context_window - reserve


class SummaryInput(msgspec.Struct, frozen=True):
    """The items a summarizing request carries (see :func:`fit_summary_input`): ``cut`` ids of the
    items cut to their beginning, ``omitted`` ids of the items left out entirely."""

    items: list[Item]
    cut: list[str] = []
    omitted: list[str] = []


def _cut(item: Item) -> Item | None:
    """``item`` cut to its beginning and a marked placeholder, or None when that saves nothing
    (tool calls keep their arguments: cut JSON would be no arguments)."""
    if item.role not in ("user", "assistant", "tool_result"):
        return None
    total = item_tokens(item)
    text = "".join(p.text for p in item_parts(item) if isinstance(p, t.TextPart))
    head = text[:CUT_HEAD_TOKENS * BYTES_PER_TOKEN]
    while text_tokens(head) > CUT_HEAD_TOKENS:  # (non-ASCII text: more bytes than characters)
        head = head[:len(head) // 2]
    images = sum(1 for p in item_parts(item) if isinstance(p, t.ImagePart))
    left = total - text_tokens(head)
    note = (f"[… {CUT_MARK}: about {left} of {total} estimated tokens left out"
            + (f", {images} image(s) among them" if images else "") + "]")
    out = msgspec.structs.replace(item, text=f"{head}\n{note}" if head else note, parts=(), structured=None)
    return out if item_tokens(out) < total else None


def omitted_note(count: int) -> str:
    return (f"[{count} earlier item(s) of the conversation were {OMITTED_MARK} (it was larger than "
            "the model's window); the summary cannot cover them.]")


def fit_summary_input(items: list[Item], fixed_tokens: int, budget: int) -> SummaryInput:
    """The Working Context ``items`` made to fit a summarizing request of at most ``budget``
    estimated tokens, ``fixed_tokens`` of which its system line, instruction and tool schemas use.

    Items that fit are returned as they are. Otherwise the largest user, assistant and tool result
    items are cut first, one by one, to their first :data:`CUT_HEAD_TOKENS` and a placeholder
    saying how much was left out; if that is not enough, the oldest conversation is left out, one
    response (or input) at a time with the results of its calls, and a user note saying so stands
    in its place. The leading system prompt items, system instructions and earlier summaries are
    never cut nor left out (they are short). When even they do not fit, the items are returned as
    they are: no cut could make the request fit. Pure (the estimate of
    :func:`request_tokens`)."""
    total = fixed_tokens + sum(item_tokens(it) for it in items)
    if total <= budget:
        return SummaryInput(list(items))
    keep = [it for it in items if it.role in ("system", "summary")]
    if fixed_tokens + sum(item_tokens(it) for it in keep) + text_tokens(omitted_note(len(items))) > budget:
        return SummaryInput(list(items))
    out = list(items)
    cut: list[str] = []
    order = sorted(range(len(out)), key=lambda i: (-item_tokens(out[i]), i))
    for i in order:
        if total <= budget:
            break
        smaller = _cut(out[i])
        if smaller is not None:
            total -= item_tokens(out[i]) - item_tokens(smaller)
            out[i] = smaller
            cut.append(smaller.id)
    if total <= budget:
        return SummaryInput(out, cut)
    # Leave out the oldest conversation: whole events (a response's text and calls share a seq),
    # with the results of the calls left out, so what stays is well formed.
    omitted: set[str] = set()
    calls: set[str] = set()

    def fits() -> bool:
        rest = sum(item_tokens(it) for it in out if it.id not in omitted)
        return fixed_tokens + rest + text_tokens(omitted_note(len(omitted))) <= budget

    for it in out:
        if fits():
            break
        if it.role in ("system", "summary") or it.id in omitted:
            continue
        for other in out:
            if other.seq == it.seq and other.role not in ("system", "summary"):
                omitted.add(other.id)
                if other.role == "tool_call" and other.call is not None:
                    calls.add(other.call.call_id)
        for other in out:
            if other.role == "tool_result" and other.call_id in calls:
                omitted.add(other.id)
    first = next(i for i, it in enumerate(out) if it.id in omitted)
    note = Item(f"omitted-{out[first].id}", "user", out[first].seq, out[first].task_id, omitted_note(len(omitted)))
    kept = [it for it in out if it.id not in omitted]
    before = sum(1 for it in out[:first] if it.id not in omitted)
    kept.insert(before, note)
    return SummaryInput(kept, [i for i in cut if i not in omitted], [it.id for it in out if it.id in omitted])
