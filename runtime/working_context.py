"""Working Context operations of a session actor (F-CTX-2, F-CTX-3): compaction (manual and
automatic), tool-result pruning, Snip and Include Result, and the context settings.

Every operation is recorded, so replay rebuilds the same Working Context
(``projections.session_state.working_context`` folds them):

* **Compaction** asks the session's model to summarize the agent's Working Context (the request
  sees the items as the agent's next request would, then :data:`COMPACTION_INSTRUCTION`; a
  context that would not fit the model's window with room for the summary is cut to fit in that
  request only, see :func:`projections.context_budget.fit_summary_input`, and a context-length
  refusal is asked once more at half the size) and records one ``context.compacted`` {summary,
  replaced item ids, trigger, usage}: every Working Context item but system instructions, the
  newest rounds up to ``keepRecentTokens`` (or, when the newest round is over it, that round's
  input and newest steps) and the inputs not answered yet is replaced by the summary (with the
  items the user hid or snipped among them, :func:`projections.context_budget.replaced_ids`), which stands
  where the first of them stood: instructions added later keep their place after it, and the kept
  items follow it as written (but a cut round's input that was the conversation's first item, which
  stays before it). The summarizing request does not see the kept items but a cut round's input,
  and its instruction says newer messages follow (:func:`kept_note`: that they may have done the
  last steps only when the model's steps are kept, not when the user's unanswered inputs alone
  are). It is not a ``model.requested`` / ``model.responded`` pair (its answer is no assistant
  message of the conversation); its usage is in the event and counts in the session's usage. A
  compaction that fails or is cut off changes nothing; when the provider answered (no text, a
  summary cut off at the output limit or refused, or the context moved on meanwhile) one
  ``context.compaction_failed`` records why and what the request used; one that failed before
  any answer (manual or automatic) records it too, its usage ``None`` (no request counted).
* **Automatic compaction**: before a model request, when the estimated request
  (:func:`projections.context_budget.request_tokens`) reaches ``triggerPercent`` of the model's
  ``contextWindow``, the agent's context is compacted first. A context that is a summary already
  is not compacted again, so it cannot loop; a failed automatic compaction lets the request go
  as it is (recorded as ``context.compaction_failed``), and none is tried again automatically in
  the same task for :data:`AUTO_COMPACTION_RETRY_AFTER` model answers (``AgentState.compaction_failure``,
  folded from that event: replay decides the same); the next task, or a compaction the user asks
  for, tries at once.
* **Pruning** (off by default): before a model request, old large tool results are pruned with
  one ``context.edited`` {op: prune}.
* **Snip** / **Include Result**: ``context.edited`` {op: snip | include_result} from the HTTP
  routes (runtime/context_api.py).

Settings resolve per session: a value saved on the session (``session.configured`` settings,
``PATCH /sessions/{id}``) > config (``context``) > built-in default.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Literal, Mapping, Sequence

import trio

from events import types as t
from events.secrets import Secrets
from projections.context_budget import (
    SummaryInput,
    compaction_threshold,
    fit_summary_input,
    item_marks,
    keep_recent_budget,
    kept_items,
    prunable_results,
    recent_rounds,
    replaced_ids,
    request_tokens,
    summarized,
    summary_budget,
    unanswered_inputs,
    worth_compacting,
)
from projections.session_state import MAIN_AGENT, Item, SessionState, item_parts, working_context

from .config import ContextConfig
from .errors import AgentNotFound, LensError
from .decide import CUT_BY
from .providers.base import REFUSAL, ModelRequest, ProviderError, UsageMeter
from .providers.catalog import ProviderCatalog

log = logging.getLogger("lens.context")

COMPACTION_SYSTEM = (
    "You write the summary that replaces an agent's conversation in its context. Do not call tools."
)
COMPACTION_INSTRUCTION = (
    "Summarize the conversation so far for the agent that will continue it: the user's requests "
    "and the current goal, decisions made, what was done (files read or changed, commands run and "
    "their outcomes), open questions, and what remains to do next. Keep identifiers, paths and "
    "error messages exact. Answer with the summary only."
)
# Added to the instruction when a compaction keeps its newest steps (whole rounds, or a round cut
# inside) as written after the summary.
COMPACTION_KEPT = (
    " The newest messages are not shown here: they stay after your summary as written. Do not "
    "restate the last steps above as things still to do; the newer messages may have done them."
)
# Added instead when it keeps only the inputs not answered yet: they did nothing, so the last
# steps above are still what was about to be done.
COMPACTION_KEPT_INPUTS = (
    " The user's newest messages are not shown here: they stay after your summary as written."
)
# Added to the instruction when the Working Context did not fit the summarizing request.
COMPACTION_PARTIAL = (
    " Parts of the conversation were too large for this request: they are marked as cut or left "
    "out. Say in the summary what it could not cover."
)
MAX_EDIT_IDS = 1000
# Stop reasons (as the providers normalize them) of an answer that ended whole, its last word
# written: Anthropic's ``end_turn`` and ``stop_sequence``, Chat's ``stop`` and a completed
# Responses response (both ``end_turn``), an answer that ends in tool calls (``tool_use``, Chat's
# ``tool_calls`` and ``function_call`` too), and a Responses ``steered`` stop (at a safe boundary,
# a whole answer for runtime/decide.py too; Lens never steers a request). Only such an answer is a
# summary: any other reason, one this build does not know included, leaves it no summary.
FINISHED_ANSWER = frozenset({"end_turn", "stop_sequence", "tool_use", "steered"})
PAUSE_TURN = "pause_turn"  # Anthropic: the turn was paused, to be continued by another request
# Why an answer that did not end so is no complete summary, for the reasons known: every reason
# runtime/decide.py's CUT_BY takes as a cut (in its words; built from it, so the two cannot drift
# apart), a refusal in compaction's own words, and Anthropic's pause.
UNFINISHED_SUMMARY = {
    **{reason: f"cut {why}" for reason, why in CUT_BY.items()},
    REFUSAL: "the model or the provider's filter refused it",
    PAUSE_TURN: "the provider paused the turn, to be continued in another request",
}


def unfinished_summary(stop_reason: str | None) -> str | None:
    """Why an answer that stopped for ``stop_reason`` is no complete summary; None: it is one."""
    if stop_reason in FINISHED_ANSWER:
        return None
    if stop_reason is None:
        return "the provider gave no stop reason"
    return UNFINISHED_SUMMARY.get(stop_reason, "not a stop reason known to end a whole answer")


def _not_a_result(item: Any, mark: str) -> str:
    """What an item named to include (which takes tool results only) is, by its mark, and what
    brings it back where something can: unsnip for a snipped item, its result's include for a
    snipped call, unhide for a hidden one."""
    if mark == "snipped":
        return ("a snipped tool call: it comes back with its result's include" if item.role == "tool_call"
                else "snipped: unsnip brings it back")
    if mark == "hidden":
        return "hidden by the user: unhide brings it back"
    if mark == "compacted":
        return "replaced by a summary"
    if mark == "removed":
        return "gone with its tool call or result"
    return "in the Working Context already: nothing to bring back"


# The ``item_marks`` of the items the next model request sees (a pruned result as its placeholder).
IN_CONTEXT = ("visible", "included", "pruned")

# (session.configured ``settings`` key, HTTP field, type, lowest, highest)
SETTINGS: tuple[tuple[str, str, type, int, int], ...] = (
    ("auto_compaction", "autoCompaction", bool, 0, 1),
    ("compaction_trigger_percent", "compactionTriggerPercent", int, 1, 100),
    ("prune_tool_results", "pruneToolResults", bool, 0, 1),
)

# How many model answers of a task come after an automatic compaction that failed in it before
# one is tried again: a summarizer that keeps failing is not asked before every request, and a
# long task whose context keeps growing is still compacted once the summarizer answers again.
AUTO_COMPACTION_RETRY_AFTER = 4


def backing_off(agent: Any, task_id: str | None) -> bool:
    """Whether ``agent``'s last automatic compaction failed in task ``task_id`` fewer than
    :data:`AUTO_COMPACTION_RETRY_AFTER` model answers ago (counted as the state folds,
    ``CompactionFailure.answers``, so replay decides the same; a compaction that succeeds, by hand
    too, clears it)."""
    failed = agent.compaction_failure
    if failed is None or failed.trigger != "auto" or task_id is None or failed.task_id != task_id:
        return False
    return failed.answers < AUTO_COMPACTION_RETRY_AFTER


class ContextError(LensError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[misc]


# HTTP status of each code (added to runtime.http_parts.STATUS).
ERROR_STATUS = {
    "CONTEXT_ITEM_NOT_FOUND": 404, "CONTEXT_ITEM_HIDDEN": 409, "CONTEXT_EDIT_INVALID": 400,
    "SESSION_BUSY": 409, "NOTHING_TO_COMPACT": 409, "COMPACTION_FAILED": 502, "ABORTED": 409,
    "CONTEXT_CALL_PENDING": 409,
}


@dataclass(frozen=True)
class ContextSettings:
    auto_compaction: bool
    trigger_percent: int
    prune_tool_results: bool
    keep_recent_rounds: int
    min_tokens: int
    sources: dict[str, str]  # HTTP field -> saved | config | default

    def to_json(self) -> dict[str, Any]:
        return {"autoCompaction": self.auto_compaction, "compactionTriggerPercent": self.trigger_percent,
                "pruneToolResults": self.prune_tool_results, "pruneKeepRecentRounds": self.keep_recent_rounds,
                "pruneMinTokens": self.min_tokens, "sources": dict(self.sources)}


def check_setting(key: str, value: Any) -> None:
    """Raise ``ValueError`` naming the HTTP field when ``value`` is not a valid saved value for
    settings ``key`` (bools for switches, integers in range for numbers; JSON true is no 1)."""
    for name, field, kind, lo, hi in SETTINGS:
        if name == key:
            if kind is bool:
                if not isinstance(value, bool):
                    raise ValueError(f"{field} must be true or false")
            elif isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ValueError(f"{field} must be an integer from {lo} to {hi}")
            return
    raise ValueError(f"unknown setting {key!r}")


def resolve_settings(saved: dict[str, Any], cfg: ContextConfig) -> ContextSettings:
    """saved value > config > default, per setting (a saved value of the wrong shape, which the
    routes never record, is skipped)."""
    default = ContextConfig()
    configured = {
        "auto_compaction": (cfg.compaction.auto, default.compaction.auto),
        "compaction_trigger_percent": (cfg.compaction.trigger_percent, default.compaction.trigger_percent),
        "prune_tool_results": (cfg.prune_tool_results.enabled, default.prune_tool_results.enabled),
    }
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, field, _kind, _lo, _hi in SETTINGS:
        conf, dflt = configured[key]
        if key in saved:
            try:
                check_setting(key, saved[key])
                values[key], sources[field] = saved[key], "saved"
                continue
            except ValueError:
                pass
        values[key], sources[field] = conf, ("config" if conf != dflt else "default")
    p = cfg.prune_tool_results
    return ContextSettings(values["auto_compaction"], values["compaction_trigger_percent"],
                           values["prune_tool_results"], p.keep_recent_rounds, p.min_tokens, sources)


def changed_settings(state: SessionState, settings: dict[str, Any]) -> dict[str, Any]:
    """The part of ``settings`` that differs from what the session has saved."""
    return {k: v for k, v in settings.items() if k not in state.settings or state.settings[k] != v
            or type(state.settings[k]) is not type(v)}


def kept_note(agent: Any, keep: frozenset[str]) -> str:
    """What the summarizing instruction adds of the items a compaction ``keep``s after its
    summary: nothing when none is kept; :data:`COMPACTION_KEPT` when the model's newest steps
    are (they may have done what the last summarized steps set out to do);
    :data:`COMPACTION_KEPT_INPUTS` when only the inputs not answered yet are (nothing was done
    since the summarized steps: what they set out to do is still to do)."""
    if not keep:
        return ""
    return COMPACTION_KEPT if keep - {it.id for it in unanswered_inputs(agent)} else COMPACTION_KEPT_INPUTS


def partial_note(fit: SummaryInput) -> str:
    """The line added to a summary written from part of the Working Context."""
    parts = []
    if fit.omitted:
        parts.append(f"{len(fit.omitted)} earlier item(s) ({fit.omitted[0]} … {fit.omitted[-1]}) were left out "
                     "of its request entirely")
    if fit.cut:
        parts.append(f"{len(fit.cut)} large item(s) were cut to their beginning ({', '.join(fit.cut[:10])}"
                     + (", …" if len(fit.cut) > 10 else "") + ")")
    return ("[Lens: this summary was written from part of the context, which was larger than the model's window: "
            + "; ".join(parts) + ". The session's history keeps them in full.]")


# --------------------------------------------------------------------------- actor commands


@dataclass(frozen=True)
class Compact:
    """Compact the main agent's Working Context now (the session must be idle). ``stop``: set
    when the caller is going away with the daemon (its shutdown): the compaction is cut off then,
    records nothing, and is answered ``SESSION_UNAVAILABLE``."""

    stop: trio.Event | None = None


@dataclass(frozen=True)
class EditContext:
    """Snip items (``item_ids``, and/or ``older_images``: image-bearing tool results but the
    newest ``keep_images``), include a tool result (``call_id`` or its result's ``item_ids``),
    unsnip, hide or unhide items (``item_ids``)."""

    op: Literal["snip", "include", "unsnip", "hide", "unhide"]
    item_ids: tuple[str, ...] = ()
    call_id: str | None = None
    older_images: bool = False
    keep_images: int = 1
    agent_id: str = MAIN_AGENT


@dataclass(frozen=True)
class DescribeContext:
    agent_id: str = MAIN_AGENT


ContextCommand = Compact | EditContext | DescribeContext

Emit = Callable[..., Awaitable[Any]]
Guard = Callable[[Callable[[], Sequence[Any]]], Callable[[], Sequence[Any]]]


class WorkingContextOps:
    """The Working Context side of one session actor (see the module docstring)."""

    def __init__(self, session_id: str, *, emit: Emit, state: Callable[[], SessionState], catalog: ProviderCatalog,
                 config: ContextConfig, system_prompt: Callable[[str], Awaitable[list[str]]],
                 tool_schemas: Callable[[str], list[dict[str, Any]]], scoped: Callable[..., Any],
                 secrets: Secrets | None = None, tool_aliases: Callable[[], Mapping[str, str]] = dict) -> None:
        """``tool_aliases``: the catalog's further tool aliases (``ModelRequest.tool_aliases``)."""
        self._session_id = session_id
        self._secrets = secrets or Secrets()  # (the summarizing request, as every model request)
        self._emit = emit
        self._state = state
        self._catalog = catalog
        self._config = config
        self._system_prompt = system_prompt
        self._tool_schemas = tool_schemas
        self._tool_aliases = tool_aliases
        self._scoped = scoped  # runtime.decide.Scoped

    def settings(self) -> ContextSettings:
        return resolve_settings(self._state().settings, self._config)

    # ------------------------------------------------------------------ before a model request

    async def before_request(self, agent_id: str, task_id: str | None, guard: Guard) -> bool:
        """Prune and compact as the settings say before ``agent_id``'s next model request.
        ``guard(make)`` wraps the pruning's decision so it is dropped when the step went stale.
        True when something was recorded (the loop then decides again)."""
        state = self._state()
        agent = state.agents[agent_id]
        if agent.open_request_seq is not None:
            return False  # a request cut off by a restart is asked again as it was
        settings = self.settings()
        if settings.prune_tool_results:
            ids = prunable_results(agent, settings.keep_recent_rounds, settings.min_tokens)
            if ids:
                res = await self._emit(guard(lambda: [self._scoped(
                    t.ContextEdited(op="prune", item_ids=ids, reason="auto"), agent_id, task_id)]))
                if res is not None:
                    return True
        if not settings.auto_compaction or not worth_compacting(agent):
            return False
        if backing_off(agent, task_id):
            return False  # failed in this task a few answers ago: later, or the next input, tries again
        try:
            model = self._catalog.model_config(state.model)
            system = await self._system_prompt(agent_id)
        except LensError:
            return False  # the request itself records why it cannot be made
        window = model.context_window
        items, schemas = working_context(agent), self._tool_schemas(agent_id)
        threshold = compaction_threshold(window, settings.trigger_percent)
        if request_tokens(system, items, schemas) < threshold:
            return False  # (the common case, judged first: what a compaction would keep is not asked)
        if not worth_compacting(agent, self._kept(agent, system, schemas, model)):
            return False
        kept = request_tokens(system, [it for it in items if it.role == "system"], schemas)
        if kept >= threshold:
            # What a compaction keeps (system prompt, system instructions, tool schemas) reaches
            # the threshold alone (the inputs not answered yet, kept too, are not counted: a large
            # input is answered after this request and can be summarized with the rest next
            # time): compacting cannot bring the request below it, and would summarize the
            # conversation away before every request.
            log.info("session %s: not compacting automatically: the system prompt, instructions and tool "
                        "schemas alone are estimated at %d tokens, the threshold is %d", self._session_id,
                        kept, threshold)
            return False
        try:
            # (Not under ``guard``: a step gone stale meanwhile, a steer queued to go in next, leaves
            # the summary good; it is dropped only if the Working Context it summarized changed.)
            return await self.compact(agent_id, task_id, "auto") is not None
        except LensError as exc:  # (COMPACTION_FAILED, or the model cannot be used: the request says so)
            log.warning("session %s: automatic compaction failed: %s", self._session_id, exc.message)
            return False

    # ------------------------------------------------------------------ compaction

    def _kept(self, agent: Any, system: Sequence[str], schemas: Sequence[dict[str, Any]], model: Any) -> frozenset[str]:
        """The ids of the Working Context items a compaction keeps as written after its summary:
        the newest rounds up to the keep budget (:func:`projections.context_budget.recent_rounds`,
        ``context.compaction.keepRecentTokens`` at most half the threshold; when the newest round
        is over it, that round's input and newest steps,
        :func:`projections.context_budget.turn_tail`) and, whatever that budget, the inputs not
        answered yet; all of them only while they fit, with the system prompt, instructions and
        tool schemas, in the window less the room for a summary (what a summarizing request may
        use). Past that the newest rounds are not kept, and past it with the unanswered inputs
        alone nothing is: they are summarized with the rest (an input larger than the window could
        not be sent as written)."""
        threshold = compaction_threshold(model.context_window, self.settings().trigger_percent)
        rounds = recent_rounds(agent, keep_recent_budget(self._config.compaction.keep_recent_tokens, threshold))
        return kept_items(agent, system, schemas, summary_budget(model.context_window, model.max_output_tokens),
                          rounds)

    async def compact(self, agent_id: str, task_id: str | None,
                      trigger: Literal["manual", "auto"]) -> dict[str, Any] | None:
        """Summarize ``agent_id``'s Working Context and record ``context.compacted``; its answer,
        or ``None`` when the context changed meanwhile. An answer not used (then, or no text, or
        cut off) is recorded as ``context.compaction_failed`` with its usage. Raises
        ``NOTHING_TO_COMPACT``, ``COMPACTION_FAILED``, or the model's ``ModelUnavailable``."""
        state = self._state()
        agent = state.agents.get(agent_id)
        if agent is None or not worth_compacting(agent):
            raise ContextError("NOTHING_TO_COMPACT", "the working context holds nothing to compact")
        provider, model_id, _ref = self._catalog.resolve(state.model)
        model = self._catalog.model_config(state.model)
        items = working_context(agent)
        schemas = self._tool_schemas(agent_id)
        try:
            system = await self._system_prompt(agent_id)
        except LensError:
            system = []  # (the next request says why it cannot be made; the inputs are judged without it)
        # The inputs not answered yet stay as written after the summary, which is of the rest.
        keep = self._kept(agent, system, schemas, model)
        if not worth_compacting(agent, keep):
            raise ContextError("NOTHING_TO_COMPACT", "the working context holds nothing to compact but the "
                               "inputs not answered yet, which a compaction keeps as written")
        # Scrubbed before fit_summary_input cuts large items to their heads: a key stored before
        # the daemon knew it goes to no provider, whole or as the first characters of a cut.
        # (A kept input whose round is cut inside is shown too: the steps summarized answer it.)
        shown = self._secrets.scrub_structs(summarized(items, keep), Item)
        # (items stays what decide() compares)
        replaced = replaced_ids(agent, keep)  # (with the hidden and snipped items among them: see there)
        size = len(agent.items)

        def summarizing(budget: int) -> tuple[ModelRequest, SummaryInput]:
            # The Working Context as it is when it fits the budget; else cut to fit, with the
            # instruction saying so (see projections.context_budget.fit_summary_input).
            def ask(text: str) -> Item:
                return Item(f"compaction-{state.last_seq + 1}", "user", state.last_seq + 1, task_id, text)

            instruction = COMPACTION_INSTRUCTION + kept_note(agent, keep)
            plain = ask(instruction)
            fit = fit_summary_input(shown, request_tokens([COMPACTION_SYSTEM], [plain], schemas), budget)
            last = plain
            if fit.cut or fit.omitted:
                last = ask(instruction + COMPACTION_PARTIAL)
                fit = fit_summary_input(shown, request_tokens([COMPACTION_SYSTEM], [last], schemas), budget)
            return ModelRequest(model_id, [COMPACTION_SYSTEM], [*fit.items, last], schemas, None, agent_id,
                                tool_aliases=self._tool_aliases()), fit

        request, fit = summarizing(summary_budget(model.context_window, model.max_output_tokens))
        meter = UsageMeter()
        try:
            try:
                result = (await provider.stream(request, lambda _delta: None, meter)).well_formed()
            except ProviderError as exc:
                if exc.code != "CONTEXT_TOO_LONG":
                    raise
                # The estimate ran short of the provider's count: once more at half of what was
                # refused (when that changes the request at all).
                smaller, smaller_fit = summarizing(request_tokens(request.system, request.items, request.tools) // 2)
                if smaller_fit.items == fit.items:
                    raise
                log.info("session %s: the summarizing request was too long for the model; retrying with less of "
                         "the context", self._session_id)
                request, fit = smaller, smaller_fit
                result = (await provider.stream(request, lambda _delta: None, meter)).well_formed()
        except trio.Cancelled:
            # Cut off (an abort, a stop) after the provider began answering: nothing of the
            # summary is used, and what the request used is recorded all the same.
            if meter.usage is not None:
                await self._emit([self._scoped(t.ContextCompactionFailed(
                    code="COMPACTION_CUT_OFF", message="the summarizing request was cut off before it ended",
                    trigger=trigger, usage=meter.usage, provider=provider.id, model=model_id), agent_id, task_id)])
            raise
        except ProviderError as exc:
            message = f"the summarizing request failed: {exc.code}: {exc.message}"
            # Failed part-way: what it had reported is recorded all the same. One that failed
            # before any answer is recorded too (no usage, no request counted): an automatic one
            # has no other way to be seen, and a manual one's HTTP answer reaches only its caller
            # (the log, the timeline and the Context panel say it too).
            await self._emit([self._scoped(t.ContextCompactionFailed(
                code="COMPACTION_FAILED", message=self._secrets.cut(message, 2000), trigger=trigger, usage=exc.usage,
                provider=provider.id, model=model_id), agent_id, task_id)])
            raise ContextError("COMPACTION_FAILED", message) from None
        summary = result.text.strip()

        async def unused(message: str) -> None:
            # The provider answered (and counted what the request used): the answer is not used,
            # the Working Context stays as it is, and the usage is recorded all the same.
            await self._emit([self._scoped(t.ContextCompactionFailed(
                code="COMPACTION_FAILED", message=message, trigger=trigger, usage=result.usage,
                provider=provider.id, model=model_id), agent_id, task_id)])

        if not summary:
            message = "the model answered the summarizing request with no text"
            await unused(message)
            raise ContextError("COMPACTION_FAILED", message)
        unfinished = unfinished_summary(result.stop_reason)
        if unfinished is not None:
            # A summary cut off at the output limit (or a refusal, a pause, a stop for a reason
            # not known) would replace the conversation with part of what it should say.
            message = self._secrets.cut(f"the summary is not complete (stop reason {result.stop_reason}: "
                                        f"{unfinished})", 2000)
            await unused(message)
            raise ContextError("COMPACTION_FAILED", message)
        if fit.cut or fit.omitted:
            # What the summary could not see, in the summary itself (the agent reads it; replay
            # needs nothing more): the Full Context keeps all of it.
            summary += "\n\n" + partial_note(fit)

        def decide() -> list[Any]:
            now = self._state().agents[agent_id]
            if len(now.items) != size or working_context(now) != items:
                # The conversation moved on, or the user snipped or included something, while it
                # was summarized: the summary is of another context (decide again).
                return []
            return [self._scoped(t.ContextCompacted(
                summary=summary, replaced_item_ids=replaced, trigger=trigger, usage=result.usage,
                provider=provider.id, model=model_id), agent_id, task_id)]

        res = await self._emit(decide)
        if res is None:
            await unused("the context changed while it was summarized; the summary was not used")
            return None
        return {"agentId": agent_id, "itemId": f"c{res.seq}", "seq": res.seq, "trigger": trigger,
                "replacedItemIds": replaced, "summary": summary}

    # ------------------------------------------------------------------ snip / include / hide

    async def edit(self, cmd: EditContext) -> dict[str, Any]:
        """Record a snip, include, unsnip, hide or unhide (nothing when it changes nothing).
        Raises ``AGENT_NOT_FOUND``, ``CONTEXT_ITEM_NOT_FOUND``, ``CONTEXT_ITEM_HIDDEN``,
        ``CONTEXT_EDIT_INVALID``, ``CONTEXT_CALL_PENDING``."""
        out: dict[str, Any] = {}

        def decide() -> list[Any]:
            ids, also_snip = self._edit_ids(cmd), []
            if cmd.op == "unhide":
                agent = self._agent(cmd.agent_id)
                also_snip = [i for i in self._stale_skill_copies(agent, ids) if i not in agent.snipped]
            out["itemIds"] = ids
            if not ids:
                return []
            op = "include_result" if cmd.op == "include" else cmd.op
            events = [self._scoped(t.ContextEdited(op=op, item_ids=ids, reason="user"), cmd.agent_id, None)]
            if also_snip:
                events.append(self._scoped(t.ContextEdited(op="snip", item_ids=also_snip, reason="user"), cmd.agent_id, None))
            return events

        res = await self._emit(decide)
        agent = self._state().agents[cmd.agent_id]
        marks = item_marks(agent)
        return {"op": cmd.op, "agentId": cmd.agent_id, "changed": res is not None,
                "seq": res.seq if res is not None else None, "itemIds": out["itemIds"],
                "items": [{"id": i, "context": marks.get(i)} for i in out["itemIds"]]}

    def _edit_ids(self, cmd: EditContext) -> list[str]:
        if cmd.op == "snip":
            return self._snip_ids(cmd)
        if cmd.op == "include":
            return self._include_ids(cmd)
        return self._pair_ids(cmd)

    def _pair_ids(self, cmd: EditContext) -> list[str]:
        """The ids an unsnip, hide or unhide changes: the items named and, for a tool call, its
        result (a call and its result go together), in Full Context order. A hide of a result
        alone leaves its call with a placeholder result; a hidden call takes its result out of
        the Working Context and of history with it."""
        agent = self._agent(cmd.agent_id)
        wanted = list(dict.fromkeys(cmd.item_ids))
        by_id = self._items_by_id(agent, cmd.agent_id, wanted)
        calls = {by_id[i].call.call_id for i in wanted if by_id[i].role == "tool_call" and by_id[i].call is not None}
        if cmd.op == "unsnip":
            # A result comes back with its call too (a lone result would be left out).
            calls |= {by_id[i].call_id for i in wanted if by_id[i].role == "tool_result" and by_id[i].call_id}
        if cmd.op == "hide":
            self._refuse_pending(agent, wanted, by_id)
        want = set(wanted)
        ids = [it.id for it in agent.items if it.id in want or (
            it.role == "tool_result" and it.call_id in calls) or (
            cmd.op == "unsnip" and it.role == "tool_call" and it.call is not None and it.call.call_id in calls)]
        if cmd.op == "hide":
            return [i for i in ids if i not in agent.hidden]
        if cmd.op == "unhide":
            return [i for i in ids if i in agent.hidden]
        # unsnip: only what was snipped; what the user hid stays out until unhidden, and the
        # instructions of a skill unloaded (or loaded again since) are not put back twice.
        self._refuse_hidden(agent, wanted)
        stale = self._stale_skill_copies(agent, wanted)
        if stale:
            raise ContextError("CONTEXT_EDIT_INVALID", f"{', '.join(stale[:10])} holds the instructions of a skill "
                                                       "unloaded or loaded again since; load the skill to use them")
        return [i for i in ids if i in agent.snipped]

    @staticmethod
    def _refuse_pending(agent: Any, ids: Sequence[str], by_id: dict[str, Item]) -> None:
        """``CONTEXT_CALL_PENDING`` when a snip or hide names a tool call that has no result yet
        (running, or an ``ask_user`` awaiting its answer): taken out now, its result would come
        in with its call gone and be left out with it, so the model would not see it."""
        pending = {c.call_id for c in agent.pending_calls}
        named = [i for i in ids if by_id[i].role == "tool_call" and by_id[i].call is not None
                 and by_id[i].call.call_id in pending]
        if named:
            raise ContextError("CONTEXT_CALL_PENDING", f"the tool call {', '.join(named[:10])} has no result yet "
                                                       "(it runs or awaits an answer); snip or hide it once it has one")

    @staticmethod
    def _refuse_hidden(agent: Any, ids: Sequence[str]) -> None:
        """``CONTEXT_ITEM_HIDDEN`` when an include or unsnip of ``ids`` would bring back what the
        user hid: one of them, or the call of a tool result among them (a result cannot be in the
        Working Context without its call, so the edit would change nothing there)."""
        hidden = set(agent.hidden)
        named = [i for i in ids if i in hidden]
        if named:
            raise ContextError("CONTEXT_ITEM_HIDDEN", f"{', '.join(named[:10])} was hidden by the user; unhide it first")
        wanted = set(ids)
        results = {it.call_id: it.id for it in agent.items if it.id in wanted and it.role == "tool_result" and it.call_id}
        calls = [(it.id, results[it.call.call_id]) for it in agent.items if it.role == "tool_call" and it.id in hidden
                 and it.call is not None and it.call.call_id in results]
        if calls:
            raise ContextError("CONTEXT_ITEM_HIDDEN", "; ".join(
                f"the call {call} of {result} was hidden by the user; unhide it first" for call, result in calls[:10]))

    @staticmethod
    def _stale_skill_copies(agent: Any, ids: Sequence[str]) -> list[str]:
        """Of ``ids``, the skill instruction items that are not their skill's loaded copy any more
        (the skill was unloaded, or loaded again after a snip or hide): back in the Working
        Context they would repeat (or outlive) the skill's instructions."""
        by_id = {it.id: it for it in agent.items}
        out = []
        for i in ids:
            it = by_id.get(i)
            if it is None or it.role != "system" or not (it.source or "").startswith("skill:"):
                continue
            loaded = agent.skills.get(it.source[len("skill:"):])
            if loaded is None or loaded.item_id != i:
                out.append(i)
        return out

    def _agent(self, agent_id: str) -> Any:
        """The agent; :class:`AgentNotFound` (``AGENT_NOT_FOUND``, as the session view answers)
        when the session has none of that id."""
        agent = self._state().agents.get(agent_id)
        if agent is None:
            raise AgentNotFound(f"session {self._session_id!r} has no agent {agent_id!r}")
        return agent

    def _items_by_id(self, agent: Any, agent_id: str, ids: Sequence[str]) -> dict[str, Item]:
        """The agent's Full Context items by id; ``CONTEXT_ITEM_NOT_FOUND`` names (the first ten
        of) ``ids`` it does not hold, each once, and says how many more there are."""
        by_id = {it.id: it for it in agent.items}
        missing = list(dict.fromkeys(i for i in ids if i not in by_id))
        if missing:
            more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
            raise ContextError("CONTEXT_ITEM_NOT_FOUND", f"no context item {', '.join(missing[:10])}{more} in agent "
                                                         f"{agent_id!r}")
        return by_id

    def _snip_ids(self, cmd: EditContext) -> list[str]:
        agent = self._agent(cmd.agent_id)
        by_id = self._items_by_id(agent, cmd.agent_id, cmd.item_ids)
        wanted = list(dict.fromkeys(cmd.item_ids))
        self._refuse_pending(agent, wanted, by_id)
        marks = item_marks(agent)
        if cmd.older_images:
            # Older images: the image-bearing tool results the next request sends whole (``visible``,
            # or ``included``: re-attached after a snip or a compaction; not one whose placeholder
            # stands for it), but the newest ``keep_images`` (a user's own input keeps its images:
            # it is their message).
            with_images = [it.id for it in working_context(agent) if it.role == "tool_result"
                           and marks.get(it.id) in ("visible", "included")
                           and any(isinstance(p, t.ImagePart) for p in item_parts(it))]
            older = with_images[:max(len(with_images) - cmd.keep_images, 0)]
            wanted += [i for i in older if i not in wanted]
        # Only what the next request sees can be taken out of it: an item already out (snipped,
        # replaced by a summary, hidden, gone with its call) records nothing (``changed: false``).
        ids = [i for i in wanted if marks.get(i) in IN_CONTEXT]
        # A call whose result was re-attached (Include Result) stays in the Working Context for
        # that result's sake: snipping the call alone would change nothing. Its result goes too.
        calls = {by_id[i].call.call_id for i in ids if by_id[i].role == "tool_call" and by_id[i].call is not None}
        if calls:
            ids += [it.id for it in agent.items if it.role == "tool_result" and it.call_id in calls
                    and it.id in agent.included and it.id not in ids]
        return ids

    def _include_ids(self, cmd: EditContext) -> list[str]:
        agent = self._agent(cmd.agent_id)
        results = [it for it in agent.items if it.role == "tool_result"]
        if cmd.call_id is not None:
            found = [it for it in results if it.call_id == cmd.call_id]
            if not found:
                raise ContextError("CONTEXT_ITEM_NOT_FOUND", f"no tool result of call {cmd.call_id!r} in agent "
                                                             f"{cmd.agent_id!r}")
            ids = [found[0].id]
        else:
            ids = list(dict.fromkeys(cmd.item_ids))
            by_id = self._items_by_id(agent, cmd.agent_id, ids)
            wrong = [i for i in ids if by_id[i].role != "tool_result"]
            if wrong:
                marks = item_marks(agent)
                said = "; ".join(f"{i} ({by_id[i].role}) is {_not_a_result(by_id[i], marks.get(i, 'visible'))}"
                                 for i in wrong[:10])
                raise ContextError("CONTEXT_EDIT_INVALID", f"include re-attaches tool results only; {said}")
        self._refuse_hidden(agent, ids)
        marks = item_marks(agent)
        return [i for i in ids if marks.get(i) != "visible" and i not in agent.included]

    # ------------------------------------------------------------------ describe

    async def describe(self, agent_id: str) -> dict[str, Any]:
        """The agent's Working Context as the next request would see it, with the estimate."""
        state = self._state()
        agent = self._agent(agent_id)
        settings = self.settings()
        window = self._catalog.model_config(state.model).context_window
        try:
            system = await self._system_prompt(agent_id)
        except LensError:
            system = []
        items = working_context(agent)
        tokens = request_tokens(system, items, self._tool_schemas(agent_id))
        marks = item_marks(agent)
        return {
            "agentId": agent_id,
            "estimatedTokens": tokens,
            "contextWindow": window,
            "compactionThreshold": compaction_threshold(window, settings.trigger_percent),
            "settings": settings.to_json(),
            "workingItemIds": [it.id for it in items],
            "items": [{"id": it.id, "role": it.role, "context": marks[it.id]} for it in agent.items],
            "compactions": sum(1 for it in agent.items if it.role == "summary"),
            "compactionFailed": None if (f := agent.compaction_failure) is None else {
                "seq": f.seq, "trigger": f.trigger, "code": f.code, "message": f.message},
        }
