"""A session's state as a fold over its events: agents, Full/Working Context, queue, usage.

``apply(state, event)`` is deterministic and does no I/O, reads no clock and makes no ids: the
same events always give the same state, so replaying in chunks equals replaying at once and a
snapshot plus its tail equals a full replay. For speed it updates ``state`` in place and
returns it; a caller that needs the old state keeps a copy (``snapshot_bytes``).

Context items get ids derived from the event that created them (``c<seq>`` or ``c<seq>.<n>``),
so they are stable across replays, rebuilds and restarts.
"""

from __future__ import annotations

import gc
from typing import Any, Iterable, Literal, TypeVar

import msgspec

from events import types as t
from events.ids import unnamed_input_id
from events.reader import StoredEvent

Role = Literal["user", "assistant", "tool_call", "tool_result", "system", "summary"]
SessionStatus = Literal["idle", "running", "awaiting_answer", "quarantined", "deleted"]
InputStatus = Literal["queued", "placed", "settled", "withdrawn"]
_T = TypeVar("_T")


class Item(msgspec.Struct, omit_defaults=True, array_like=True, gc=False):
    """One entry of an agent's Full Context.

    A pure-text item carries its text once, in ``text``, and an empty ``parts`` (read the parts
    through :func:`item_parts`, never ``Item.parts`` directly); ``parts`` is set only when the
    content is not exactly one non-empty text part of ``text`` (images, several parts).

    Encoded as a MessagePack array (``array_like``) so snapshots carry no field names, and not
    tracked by the cycle collector (``gc=False``: an item never takes part in a cycle); ``parts``
    and ``replaced_ids`` are tuples, so an item without them shares the empty tuple instead of
    owning two empty lists. Tens of thousands of items then cost little to decode and no
    collector time.
    """

    id: str
    role: Role
    seq: int
    task_id: str | None = None
    text: str = ""
    parts: tuple[t.ContentPart, ...] = ()  # empty: one TextPart of ``text`` (none if ``text`` is empty)
    call: t.ToolCall | None = None  # tool_call items
    call_id: str | None = None  # tool_result items
    # tool_result items: ok / error / interrupted / skipped / denied; assistant items: ``aborted``
    # for the text an answer had streamed when the user aborted it, ``failed`` when the request
    # failed (the provider's error, a dropped stream) after it began (``ModelFailed.partial_text``);
    # assistant and tool_call items: ``refused`` for each item of a response whose stop reason is
    # ``refusal`` (:data:`REFUSED`: Anthropic's requests leave such a turn out); ``empty`` for the
    # text-less item of an answer with neither text nor calls (:data:`EMPTY_ANSWER`)
    status: str | None = None
    is_error: bool = False
    structured: Any = None
    replaced_ids: tuple[str, ...] = ()  # summary items: what the compaction replaced
    source: str = ""  # system items: where the instruction came from
    # The first item of a model response (its assistant text, else its first tool call): the
    # response's provider-native reasoning blocks (``ModelResponded.reasoning_blocks``), which
    # request compilation sends back unchanged to the protocol they came from.
    reasoning_blocks: list[dict[str, Any]] = []
    rerun_after: str | None = None  # tool_result items: ``ToolFinished.rerun_after`` (the call ran twice)
    # The first item of a refused response: its ``ModelResponded.stop_details`` (why it was refused)
    stop_details: dict[str, str] | None = None
    # The last item of a model response (its last tool call, else its text): the response's
    # ``ModelResponded.stop_reason``, where the answer stopped (a view says which stops cut it).
    stop_reason: str | None = None


class LoadedSkill(msgspec.Struct, array_like=True, gc=False):
    """A skill loaded for an agent: its instruction item, the SKILL.md digest it snapshotted and
    the workspace-relative directory it was loaded from (``skill.loaded``'s ``base_dir``; ""
    when the event has none)."""

    item_id: str
    digest: str = ""
    base_dir: str = ""


class CompactionFailure(msgspec.Struct, array_like=True, gc=False):
    """An agent's last compaction that failed (``context.compaction_failed``) since its last
    compaction: its seq, trigger, task, code and message, and how many of the agent's model
    answers (a response or a streamed part of one that added an item) came after it."""

    seq: int
    trigger: str
    task_id: str | None
    code: str
    message: str
    answers: int = 0


class SkillDue(msgspec.Struct, array_like=True, gc=False):
    """A ``skill`` call of the round under way that loaded ``name``: its ``skill.loaded`` is
    recorded once the round's tool results are all in (see runtime.decide.AppendSkills)."""

    call_id: str
    name: str
    base_dir: str = ""  # the directory the call loaded (its result's ``base_dir``)


class HeldSkill(msgspec.Struct, frozen=True, gc=False):
    """A skill an agent holds, as the ``skill`` tool sees it: the SHA-256 of the SKILL.md loaded
    ("" for a load due this round) and the workspace-relative directory it was loaded from (""
    when not known: an event or tool result that did not say)."""

    digest: str = ""
    base_dir: str = ""


USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
                "total_input_tokens")
# The largest total a count sums to (a reported count is at most this too): a sum past it is not
# added (the request counts as not reporting it, so the total stays a lower bound) — the log and a
# snapshot hold 64-bit integers, and a sum past 2**64 - 1 could not be written.
MAX_USAGE_TOTAL = 2**63 - 1


class UsageTotals(msgspec.Struct):
    """Sums of provider-reported counts; a field stays ``None`` until some request reports it.

    ``unreported`` counts, per field, the answered requests whose provider did not report that
    count: a sum is complete only while its field is absent there (an unreported count is
    unknown, never taken as 0)."""

    requests: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    total_input_tokens: int | None = None  # every input token, cached or not (see t.Usage)
    unreported: dict[str, int] = {}


class AgentState(msgspec.Struct):
    agent_id: str
    role: Literal["main", "subagent"] = "main"
    parent_agent_id: str | None = None
    parent_call_id: str | None = None
    tools: list[str] = []
    status: Literal["idle", "running", "finished"] = "idle"
    # How a finished subagent ended, as its agent.finished says: completed / failed / aborted /
    # interrupted (None while it runs; a fork's subagent under way at the fork point: interrupted).
    outcome: str | None = None
    result: str = ""
    items: list[Item] = []
    snipped: list[str] = []
    hidden: list[str] = []  # hidden by the user: out of the Working Context and of history search
    included: list[str] = []
    pruned: list[str] = []
    # The last model response's tool calls that have no tool.finished yet, in order.
    pending_calls: list[t.ToolCall] = []
    running_call: str | None = None  # tool.started without tool.finished
    open_request_seq: int | None = None  # model.requested without a response or failure
    last_response_final: bool = False  # the last response had no tool calls (or was refused)
    stop_reason: str | None = None  # the last response's (``ModelResponded.stop_reason``)
    stop_details: dict[str, str] | None = None  # the last response's (``ModelResponded.stop_details``)
    round_results: int = 0  # tool results since the last response (its round under way)
    last_error: str | None = None  # the last model request failed (cleared by the next one)
    request_attempt: int = 0  # ``attempt`` of the last model.requested
    task_id: str | None = None
    requests: int = 0
    # What this agent's own requests cost (its model requests and compactions); the session's
    # ``usage`` is the sum over its agents, subagents included.
    usage: UsageTotals = msgspec.field(default_factory=UsageTotals)
    skills: dict[str, LoadedSkill] = {}  # loaded skills by name
    skills_due: list[SkillDue] = []
    # Deferred tools this agent loaded with capability_search (``capability.loaded``), in order.
    # Append-only: no event removes or reorders one (a load of one loaded already adds nothing),
    # which is what makes the count below name them; the fold's property tests check it.
    capabilities: list[str] = []
    # How many of ``capabilities`` its last model request offered (those loaded before its
    # ``model.requested``): the calls of that request's answer may call these; one loaded later in
    # the answer is callable from the next request (F-TOOL-3). A count, not the names: it is
    # right only while ``capabilities`` is append-only (above).
    capabilities_offered: int = 0
    # The last compaction that failed (``context.compaction_failed``), cleared by one that
    # succeeds (a manual one too): after an automatic one failed none is tried again
    # automatically in that task; the context view and the dashboard say why it failed.
    compaction_failure: CompactionFailure | None = None
    # The images its last answered request did not send (artifact id -> why), as that
    # ``model.responded`` says (``diagnostics.images_withheld``, see runtime/providers/compile.py):
    # the view marks them where they are shown.
    images_not_sent: dict[str, str] = {}


def loaded_skill_states(agent: AgentState, *, due: bool = True) -> dict[str, HeldSkill]:
    """name -> SKILL.md digest and directory of the agent's loaded skills, and (``due``) of those
    due this round (digest "").

    A skill whose instructions the user took out of the Working Context (a snip, a hide) is not
    loaded any more: its load must append them again rather than answer "already loaded"."""
    gone = set(agent.snipped) | set(agent.hidden)
    out = {name: HeldSkill(s.digest, s.base_dir) for name, s in agent.skills.items() if s.item_id not in gone}
    for d in agent.skills_due if due else ():
        out.setdefault(d.name, HeldSkill("", d.base_dir))
    return out


class QueuedInput(msgspec.Struct):
    request_id: str
    content: list[t.ContentPart]
    when_busy: t.WhenBusy
    seq: int


class InputRecord(msgspec.Struct, array_like=True, gc=False):  # one per input: compact, untracked
    status: InputStatus
    text: str
    task_id: str | None = None


class Question(msgspec.Struct):
    question_id: str
    questions: list[t.Question]
    agent_id: str | None
    call_id: str | None


class JobRecord(msgspec.Struct):
    """A background job as the log says (``job.started``, ``job.finished``); its output while it
    runs lives in the session actor's memory only (runtime/jobs.py)."""

    job_id: str
    command: str = ""
    call_id: str | None = None
    agent_id: str | None = None
    started_seq: int | None = None
    status: str = "running"  # running | exited | crashed | stopped | lost
    exit_code: int | None = None
    reason: str = ""
    output_tail: str = ""
    finished_seq: int | None = None
    output_artifact_id: str | None = None  # the output a graceful stop saved (job.finished)
    output_dropped: int = 0
    output_tail_start: int | None = None  # where output_tail begins in the whole output (job.finished)


class SessionState(msgspec.Struct):
    session_id: str
    project_id: str | None = None
    created: bool = False
    name: str | None = None
    model: str | None = None
    thinking_level: str | None = None
    settings: dict[str, Any] = {}
    deleted: bool = False
    quarantined: str | None = None
    forked_from_session: str | None = None
    forked_from_seq: int | None = None
    agents: dict[str, AgentState] = {}
    queue: list[QueuedInput] = []
    inputs: dict[str, InputRecord] = {}
    # Request ids of the inputs whose record is "placed" (a superset; task.finished settles them
    # without scanning every input the session ever had).
    placed_inputs: list[str] = []
    running_task: str | None = None
    running_agent: str | None = None
    todos: list[t.TodoItem] = []
    questions: dict[str, Question] = {}  # open ones
    settled_questions: dict[str, dict[str, Any]] = {}  # {"status": answered|cancelled, ...}
    # What each settled question asked: a later answer is validated against it as an open
    # question's would be (an invalid body is refused in every state).
    settled_asks: dict[str, list[t.Question]] = {}
    usage: UsageTotals = msgspec.field(default_factory=UsageTotals)
    file_edits: dict[str, list[t.FileEdited]] = {}  # call_id -> what it changed (until reverted)
    jobs: dict[str, JobRecord] = {}  # background jobs, in start order
    last_seq: int = 0
    last_session_seq: int = 0
    # ``ts`` of the last event folded: with ``last_seq`` and ``last_session_seq``, what a wake-up
    # checks the log still holds before it trusts a snapshot (see SessionActor._log_holds).
    last_ts: int = 0
    events: int = 0

    @property
    def status(self) -> SessionStatus:
        if self.deleted:
            return "deleted"
        if self.quarantined:
            return "quarantined"
        if self.questions:
            return "awaiting_answer"
        if self.running_task is not None or self.queue:
            return "running"  # (queued work is started next: a client polling for idle must wait)
        return "idle"

    def agent(self, agent_id: str) -> AgentState:
        a = self.agents.get(agent_id)
        if a is None:
            a = self.agents[agent_id] = AgentState(agent_id=agent_id)
        return a


MAIN_AGENT = "main"
# The stop reason of an answer the provider refused (Anthropic's streaming classifiers: its
# ``refusal``, runtime.providers.base.REFUSAL), and the status each item of such an answer gets.
REFUSED_STOP = "refusal"
REFUSED = "refused"
# The status of the item an answer with neither text nor tool calls leaves (reasoning alone, or
# nothing at all): an assistant item with no text, so the turn is seen (its stop reason on it).
# Requests leave it out (runtime.providers.compile): the providers refuse an empty assistant
# message, and it says nothing to the model.
EMPTY_ANSWER = "empty"


# Between the text parts of one content (an input of several parts, a tool result of several):
# wherever such content is shown or sent as one string — an item's ``text``, the session view,
# the history index and ``history_read``, a tool result or instruction in a model request — its
# non-empty text parts are joined with this, so words at part boundaries stay apart and every
# reader sees the same text. (A user input's parts still go to providers as separate blocks.)
TEXT_PART_SEPARATOR = "\n"


def text_of(parts: Iterable[t.ContentPart]) -> str:
    """The text of ``parts``: the non-empty text parts joined by :data:`TEXT_PART_SEPARATOR`."""
    return TEXT_PART_SEPARATOR.join(p.text for p in parts if isinstance(p, t.TextPart) and p.text)


def item_parts(item: Item) -> list[t.ContentPart]:
    """The content parts of ``item``: ``parts`` if set, else one TextPart of ``text`` (if any)."""
    if item.parts:
        return list(item.parts)
    return [t.TextPart(item.text)] if item.text else []


def _own_parts(text: str, parts: list[t.ContentPart]) -> tuple[t.ContentPart, ...]:
    """What ``Item.parts`` stores for content ``parts`` whose text is ``text``: nothing when
    :func:`item_parts` rebuilds them exactly from ``text`` (one non-empty TextPart)."""
    if len(parts) == 1 and type(parts[0]) is t.TextPart and parts[0].text and parts[0].text == text:
        return ()
    return tuple(parts)


SKILL_COMMAND = "/skill:"


def skill_command(content: list[t.ContentPart]) -> tuple[str, list[t.ContentPart]] | None:
    """An input ``/skill:<name> args`` (its first part a text starting so): (name, the content the
    model sees: the args, then any further parts; a short default text when that is empty). The
    name is the first word of the command's line (cut at ``\\n``), blanks after the colon skipped
    (``/skill: rev`` names ``rev``); a line with no word names none (``None``, which the actor
    refuses). ``None`` for any other input. The input is recorded as submitted; the actor refuses a
    command naming no loadable skill, and loads the skill when placing the input.

    This is how inputs already in the log are folded (the reducer, the history projection), so
    it must not change: a new input is held to a stricter rule where it is accepted
    (:func:`skill_name_on_its_line`), and every input that rule accepts gets from this one the
    same name."""
    first = content[0] if content else None
    if not isinstance(first, t.TextPart) or not first.text.startswith(SKILL_COMMAND):
        return None
    line, newline, rest = first.text[len(SKILL_COMMAND):].partition("\n")
    words = line.split(None, 1)
    if not words:
        return None
    name = words[0]
    args = ((words[1].strip() if len(words) > 1 else "") + newline + rest).strip()
    parts: list[t.ContentPart] = [*([t.TextPart(args)] if args else []), *content[1:]]
    if not any(isinstance(p, t.ImagePart) or p.text.strip() for p in parts):
        parts = [t.TextPart(f"Use the skill \"{name}\".")]
    return name, parts


def skill_name_on_its_line(text: str) -> str | None:
    """The name a NEW ``/skill:`` input (``text``, its first part) gives on the command's line as
    any line break ``str.splitlines`` reads ends it (``\\r``, ``\\r\\n``, U+2028 as ``\\n``): the
    first word of that line, ``None`` when it has none. Where it gives one, it is the name
    :func:`skill_command` reads (every line break is a blank to ``str.split``)."""
    command = text[len(SKILL_COMMAND):] if text.startswith(SKILL_COMMAND) else ""
    words = command.splitlines()[0].split(None, 1) if command else []
    return words[0] if words else None


def merge_tool_policy(saved: Any, patch: Any) -> dict[str, Any]:
    """A session's ``toolPolicy`` override after a ``session.configured`` carrying ``patch``:
    each entry replaces that tool's (or pattern's) entry; a null entry removes it."""
    out = dict(saved) if isinstance(saved, dict) else {}
    if isinstance(patch, dict):
        for name, value in patch.items():
            if value is None:
                out.pop(name, None)
            else:
                out[name] = value
    return out


def _item_id(seq: int, n: int = 0) -> str:
    return f"c{seq}" if n == 0 else f"c{seq}.{n}"


def _add_usage(state: SessionState, agent_id: str, u: t.Usage) -> None:
    """Count one answered (or cut-off) request's usage in its agent's totals and the session's;
    a count that would take a total past :data:`MAX_USAGE_TOTAL` is counted as not reported."""
    for total in (state.usage, state.agent(agent_id).usage):
        total.requests += 1
        for name in USAGE_FIELDS:
            v = getattr(u, name)
            summed = (getattr(total, name) or 0) + v if v is not None else None
            if summed is not None and summed <= MAX_USAGE_TOTAL:
                setattr(total, name, summed)
            else:
                total.unreported[name] = total.unreported.get(name, 0) + 1


def apply(state: SessionState, se: StoredEvent) -> SessionState:
    """Fold one stored event of this session into ``state`` (in place) and return it."""
    ev = se.event
    state.last_seq = se.seq
    state.last_ts = se.ts
    state.events += 1
    if se.session_seq is not None:
        state.last_session_seq = se.session_seq
    agent_id = se.agent_id or MAIN_AGENT
    seq = se.seq

    if isinstance(ev, t.SessionCreated):
        state.created = True
        state.project_id = se.project_id
        state.model = ev.model
        state.thinking_level = ev.thinking_level
        state.name = ev.name
        state.forked_from_session = ev.forked_from_session
        state.forked_from_seq = ev.forked_from_seq
        state.agent(MAIN_AGENT).role = "main"
    elif isinstance(ev, t.SessionConfigured):
        if ev.model is not None:
            state.model = ev.model
        if ev.thinking_level is not None:
            state.thinking_level = ev.thinking_level
        if "model" in ev.reset:
            state.model = None
        if "thinking_level" in ev.reset:
            state.thinking_level = None
        if "name" in ev.reset:
            state.name = None
        if ev.settings:
            merged = {**state.settings, **ev.settings}
            if "toolPolicy" in ev.settings:  # (per tool: an entry replaces that tool's, null removes it)
                merged["toolPolicy"] = merge_tool_policy(state.settings.get("toolPolicy"), ev.settings["toolPolicy"])
            state.settings = merged
        if any(key in state.settings for key in ev.reset):  # (a saved setting back to the default)
            state.settings = {k: v for k, v in state.settings.items() if k not in ev.reset}
    elif isinstance(ev, t.SessionNamed):
        state.name = ev.name
    elif isinstance(ev, t.SessionDeleted):
        state.deleted = True
    elif isinstance(ev, t.SessionQuarantined):
        state.quarantined = ev.reason
    elif isinstance(ev, t.AgentStarted):
        a = state.agent(agent_id)
        a.role = ev.role
        a.parent_agent_id = ev.parent_agent_id
        a.parent_call_id = ev.parent_call_id
        a.tools = list(ev.tools)
        a.status = "running"
        a.task_id = se.task_id
        if ev.prompt:
            a.items.append(Item(_item_id(seq), "user", seq, se.task_id, ev.prompt))
    elif isinstance(ev, t.AgentFinished):
        a = state.agent(agent_id)
        a.status = "finished"
        a.outcome = ev.status
        a.result = ev.result
    elif isinstance(ev, t.TaskStarted):
        if agent_id == MAIN_AGENT:
            state.running_task = se.task_id
            state.running_agent = agent_id
        a = state.agent(agent_id)
        a.status = "running"
        a.task_id = se.task_id
        a.last_response_final = False
        a.last_error = None
    elif isinstance(ev, t.TaskFinished):
        a = state.agent(agent_id)
        a.status = "idle"
        a.pending_calls = []
        a.running_call = None
        a.open_request_seq = None
        if agent_id == MAIN_AGENT and state.running_task == se.task_id:
            state.running_task = None
            state.running_agent = None
        if state.placed_inputs:
            still: list[str] = []
            for rid in state.placed_inputs:
                rec = state.inputs.get(rid)
                if rec is None or rec.status != "placed":
                    continue
                if rec.task_id == se.task_id:
                    rec.status = "settled"
                else:
                    still.append(rid)
            state.placed_inputs = still
    elif isinstance(ev, t.InputSubmitted):
        rid = se.request_id or unnamed_input_id(seq)
        state.queue.append(QueuedInput(rid, list(ev.content), ev.when_busy, seq))
        state.inputs[rid] = InputRecord("queued", text_of(ev.content))
    elif isinstance(ev, t.InputPlaced):
        rid = ev.input_request_id
        placed = None
        for i, q in enumerate(state.queue):
            if q.request_id == rid:
                placed = state.queue.pop(i)
                break
        rec = state.inputs.get(rid)
        if rec is not None:
            rec.status = "placed"
            rec.task_id = se.task_id
            if rid not in state.placed_inputs:
                state.placed_inputs.append(rid)
        if placed is not None:
            content = placed.content
            command = skill_command(content)
            if command is not None:
                content = command[1]  # the skill was loaded by the event before this one
            text = text_of(content)
            state.agent(agent_id).items.append(
                Item(_item_id(seq), "user", seq, se.task_id, text, _own_parts(text, content))
            )
            state.agent(agent_id).last_response_final = False
    elif isinstance(ev, t.InputWithdrawn):
        state.queue = [q for q in state.queue if q.request_id != ev.input_request_id]
        rec = state.inputs.get(ev.input_request_id)
        if rec is not None:
            rec.status = "withdrawn"
    elif isinstance(ev, t.InputRequeued):
        for q in state.queue:
            if q.request_id == ev.input_request_id:
                q.when_busy = ev.when_busy
    elif isinstance(ev, t.ModelRequested):
        a = state.agent(agent_id)
        a.open_request_seq = seq
        a.request_attempt = ev.attempt
        a.capabilities_offered = len(a.capabilities)
        a.requests += 1
        a.last_error = None
    elif isinstance(ev, t.ModelResponded):
        a = state.agent(agent_id)
        a.open_request_seq = None
        n = 0
        first = len(a.items)
        if ev.text:
            a.items.append(Item(_item_id(seq), "assistant", seq, se.task_id, ev.text))
            n += 1
        for call in ev.tool_calls:
            a.items.append(Item(_item_id(seq, n), "tool_call", seq, se.task_id, call=call))
            n += 1
        empty = not n
        if empty:
            a.items.append(Item(_item_id(seq), "assistant", seq, se.task_id, status=EMPTY_ANSWER))
        if ev.reasoning_blocks and len(a.items) > first:
            a.items[first].reasoning_blocks = list(ev.reasoning_blocks)
        if ev.stop_reason == REFUSED_STOP:
            if not empty:  # (an empty answer's item stays ``empty``: it holds nothing refused)
                for it in a.items[first:]:
                    it.status = REFUSED
            a.items[first].stop_details = ev.stop_details
        if ev.stop_reason and len(a.items) > first:
            a.items[-1].stop_reason = ev.stop_reason
        if len(a.items) > first:
            _answered_since_failure(a)
        a.pending_calls = list(ev.tool_calls)
        # (A refused answer ends the round whatever it called: its calls are answered, none run,
        # and asking again would send what was refused, less the refused turn, to be refused
        # again: the task ends with the refusal's reason, and the user's next input goes on.)
        a.last_response_final = not ev.tool_calls or ev.stop_reason == REFUSED_STOP
        a.stop_reason = ev.stop_reason
        a.stop_details = ev.stop_details
        a.images_not_sent = images_not_sent(ev.diagnostics)
        a.round_results = 0
        _add_usage(state, agent_id, ev.usage)
    elif isinstance(ev, t.ModelFailed):
        a = state.agent(agent_id)
        a.open_request_seq = None
        a.last_error = f"{ev.code}: {ev.message}"
        if ev.partial_text:
            # What the user saw of an answer that was aborted, or failed, while it streamed stays
            # in the conversation: the next request sends it as the assistant's (its reasoning and
            # unfinished calls are not kept). Its status says which ended it.
            a.items.append(Item(_item_id(seq), "assistant", seq, se.task_id, ev.partial_text,
                                status="aborted" if ev.code == "ABORTED" else "failed"))
            _answered_since_failure(a)
        if ev.usage is not None:
            _add_usage(state, agent_id, ev.usage)
    elif isinstance(ev, t.ModelCutOff):
        _add_usage(state, agent_id, ev.usage)  # (the request stays open: asked again at the next start)
    elif isinstance(ev, t.ToolStarted):
        state.agent(agent_id).running_call = ev.call_id
    elif isinstance(ev, t.ToolFinished):
        a = state.agent(agent_id)
        if a.running_call == ev.call_id:
            a.running_call = None
        a.pending_calls = [c for c in a.pending_calls if c.call_id != ev.call_id]
        a.round_results += 1
        text = text_of(ev.content)
        a.items.append(
            Item(
                _item_id(seq), "tool_result", seq, se.task_id, text, _own_parts(text, ev.content),
                call_id=ev.call_id, status=ev.status, is_error=ev.is_error,
                structured=ev.structured_content, rerun_after=ev.rerun_after,
            )
        )
        sc = ev.structured_content
        if (ev.name == "skill" and ev.status == "ok" and isinstance(sc, dict) and sc.get("instructions_follow") is True
                and isinstance(sc.get("name"), str)):
            base_dir = sc.get("base_dir")
            base_dir = base_dir if isinstance(base_dir, str) else ""
            a.skills_due = [*a.skills_due, SkillDue(ev.call_id, sc["name"], base_dir)]
    elif isinstance(ev, (t.SkillLoaded, t.InstructionAppended)):
        text = ev.instructions if isinstance(ev, t.SkillLoaded) else ev.text
        source = f"skill:{ev.name}" if isinstance(ev, t.SkillLoaded) else ev.source
        a = state.agent(agent_id)
        a.items.append(
            Item(_item_id(seq), "system", seq, se.task_id, text, _own_parts(text, [t.TextPart(text)]), source=source)
        )
        if isinstance(ev, t.SkillLoaded):
            a.skills = {**a.skills, ev.name: LoadedSkill(_item_id(seq), ev.digest, ev.base_dir)}
            a.skills_due = [d for d in a.skills_due if d.call_id != ev.call_id and d.name != ev.name]
    elif isinstance(ev, t.SkillUnloaded):
        # The instructions leave the Working Context (as a snip; the Full Context keeps them);
        # a load due this round is dropped too.
        a = state.agent(agent_id)
        gone = a.skills.get(ev.name)
        if gone is not None:
            a.skills = {k: v for k, v in a.skills.items() if k != ev.name}
            if gone.item_id not in a.snipped:
                a.snipped = a.snipped + [gone.item_id]
        a.skills_due = [d for d in a.skills_due if d.name != ev.name]
    elif isinstance(ev, t.CapabilityLoaded):
        a = state.agent(agent_id)
        new = [c for c in dict.fromkeys(ev.capability_ids) if c not in a.capabilities]
        if new:
            a.capabilities = a.capabilities + new
    elif isinstance(ev, t.ContextEdited):
        a = state.agent(agent_id)
        ids = list(ev.item_ids)
        if ev.op == "snip":
            a.snipped = a.snipped + [i for i in ids if i not in a.snipped]
            a.included = [i for i in a.included if i not in ids]
        elif ev.op == "unsnip":
            a.snipped = [i for i in a.snipped if i not in ids]
        elif ev.op == "include_result":
            a.included = a.included + [i for i in ids if i not in a.included]
        elif ev.op == "hide":
            a.hidden = a.hidden + [i for i in ids if i not in a.hidden]
        elif ev.op == "unhide":
            a.hidden = [i for i in a.hidden if i not in ids]
        elif ev.op == "prune":
            a.pruned = a.pruned + [i for i in ids if i not in a.pruned]
    elif isinstance(ev, t.ContextCompacted):
        a = state.agent(agent_id)
        a.items.append(
            Item(_item_id(seq), "summary", seq, se.task_id, ev.summary, _own_parts(ev.summary, [t.TextPart(ev.summary)]),
                 replaced_ids=tuple(ev.replaced_item_ids))
        )
        # A re-attached result the summary replaced is replaced with the rest (Include Result
        # brings it back again); the summarizing request counts in the session's usage.
        if a.included:
            replaced = set(ev.replaced_item_ids)
            a.included = [i for i in a.included if i not in replaced]
        _add_usage(state, agent_id, ev.usage)
        a.compaction_failure = None
    elif isinstance(ev, t.ContextCompactionFailed):
        if ev.usage is not None:  # (a request answered and not used still counts)
            _add_usage(state, agent_id, ev.usage)
        state.agent(agent_id).compaction_failure = CompactionFailure(seq, ev.trigger, se.task_id, ev.code, ev.message)
    elif isinstance(ev, t.FileEdited):
        state.file_edits.setdefault(ev.call_id, []).append(ev)
    elif isinstance(ev, t.FileReverted):
        take_reverted(state.file_edits, ev)
    elif isinstance(ev, t.TodoUpdated):
        state.todos = list(ev.items)
    elif isinstance(ev, t.QuestionAsked):
        state.questions[ev.question_id] = Question(ev.question_id, list(ev.questions), agent_id, ev.call_id)
    elif isinstance(ev, t.QuestionAnswered):
        if (q := state.questions.pop(ev.question_id, None)) is not None:
            state.settled_questions[ev.question_id] = {"status": "answered", "answer": ev.answer}
            state.settled_asks[ev.question_id] = q.questions
    elif isinstance(ev, t.QuestionCancelled):
        if (q := state.questions.pop(ev.question_id, None)) is not None:
            state.settled_questions[ev.question_id] = {"status": "cancelled", "reason": ev.reason}
            state.settled_asks[ev.question_id] = q.questions
    elif isinstance(ev, t.JobStarted):
        state.jobs[ev.job_id] = JobRecord(ev.job_id, ev.command, ev.call_id, agent_id, seq)
    elif isinstance(ev, t.JobFinished):
        job = state.jobs.get(ev.job_id)
        if job is None:  # (a finish without its start: shown as it is recorded)
            job = state.jobs[ev.job_id] = JobRecord(ev.job_id, agent_id=agent_id)
        job.status = ev.status
        job.exit_code = ev.exit_code
        job.reason = ev.reason
        job.output_tail = ev.output_tail
        job.finished_seq = seq
        job.output_artifact_id = ev.output_artifact_id
        job.output_dropped = ev.output_dropped
        job.output_tail_start = ev.output_tail_start
    return state


def running_jobs(state: SessionState) -> list[JobRecord]:
    """The jobs started and not finished, in start order."""
    return [j for j in state.jobs.values() if j.status == "running"]


def _answered_since_failure(a: AgentState) -> None:
    """One more model answer since ``a``'s last failed compaction (if any)."""
    if a.compaction_failure is not None:
        a.compaction_failure = msgspec.structs.replace(a.compaction_failure, answers=a.compaction_failure.answers + 1)


def take_reverted(edits: dict[str, list[_T]], revert: t.FileReverted) -> list[_T]:
    """Take what ``revert`` restored out of ``edits`` (by call id, each call's edits not reverted
    yet, in the order made) and return it, in that order: every edit of the reverted call for a
    whole revert (every ``file.reverted`` recorded before ``partial`` was kept is one); for a
    partial one, which restored those alone, its last ``len(revert.paths)`` (``revert_call``
    restores a call's edits last first), the others left in ``edits``."""
    standing = edits.pop(revert.reverted_call_id, [])
    if not revert.partial:
        return standing
    kept = max(len(standing) - len(revert.paths), 0)
    if kept:
        edits[revert.reverted_call_id] = standing[:kept]
    return standing[kept:]


def fold(state: SessionState, events: Iterable[StoredEvent]) -> SessionState:
    for e in events:
        apply(state, e)
    return state


# --------------------------------------------------------------------------- Working Context


REMOVED_PLACEHOLDER = "[tool result removed from the working context]"


def pruned_placeholder(item_id: str) -> str:
    """What a pruned tool result becomes in the Working Context: a note naming the call that reads
    it back. Every agent has ``history_read`` unless a tool policy takes it away, and the result
    stays in history; Include Result, the other way back, is the user's, not the model's."""
    return ("[tool result pruned from the working context; history_read "
            f'{{"context_item_id": "{item_id}"}} reads it again]')


def working_context(agent: AgentState) -> list[Item]:
    """The items the next model request sees, derived from the Full Context and its edits.

    Snipped items and items replaced by a compaction are left out, pruned tool results become a
    placeholder, and ``include_result`` re-attaches a tool result (with its call) whatever hid
    it, except a user's ``hide``. A tool call whose result is hidden keeps a placeholder result and
    a result whose call is hidden is left out, so the conversation stays well formed.

    Items keep the Full Context's order, except summaries: a summary stands where the first item
    it replaced stood (see :func:`_summary_anchors`), so system instructions that came later in
    history than that item (a skill loaded mid-conversation) stay after it, at their real
    position, instead of joining the leading system prompt (F-CTX-4).
    """
    included = set(agent.included)
    hidden = set(agent.snipped)
    for it in agent.items:
        if it.role == "summary":
            hidden.update(it.replaced_ids)
    hidden -= included
    user_hidden = set(agent.hidden)
    hidden |= user_hidden  # a user's hide wins over include_result
    pruned = set(agent.pruned) - included
    # include_result re-attaches a result with its call (a compaction usually replaced both):
    # a result without its call would be malformed, so the call comes back with it.
    reattached = {it.call_id for it in agent.items
                  if it.role == "tool_result" and it.id in included and it.id not in user_hidden}
    visible_calls = {it.call.call_id for it in agent.items
                     if it.role == "tool_call" and it.call is not None
                     and (it.id not in hidden or (it.call.call_id in reattached and it.id not in user_hidden))}
    out: list[Item] = []
    # A response's reasoning blocks ride on its first item; if that item is hidden, they move to
    # the response's next visible item (its calls still need them): (seq, blocks).
    carried: tuple[int, list[dict[str, Any]]] | None = None
    for it in agent.items:
        if carried is not None and it.seq == carried[0] and not it.reasoning_blocks and (
                (it.role == "tool_call" and it.call is not None and it.call.call_id in visible_calls)
                or (it.role == "assistant" and it.id not in hidden)):
            it = msgspec.structs.replace(it, reasoning_blocks=carried[1])
            carried = None
        if it.role == "tool_result" and it.call_id not in visible_calls:
            continue  # its call is gone from the Working Context: a lone result would be malformed
        if it.role == "tool_call" and it.call is not None and it.call.call_id in visible_calls:
            out.append(it)
            continue
        if it.id in hidden:
            if it.reasoning_blocks:
                carried = (it.seq, it.reasoning_blocks)
            if it.role == "tool_result":
                out.append(msgspec.structs.replace(it, text=REMOVED_PLACEHOLDER, parts=(), structured=None))
            continue
        if it.id in pruned and it.role == "tool_result":
            out.append(msgspec.structs.replace(it, text=pruned_placeholder(it.id), parts=(), structured=None))
            continue
        out.append(it)
    if len(out) > 1 and any(it.role == "summary" for it in out):
        index = {it.id: i for i, it in enumerate(agent.items)}
        anchors = _summary_anchors(agent.items, index)
        if anchors:

            def place(it: Item) -> tuple[int, int, int]:
                i = index[it.id]
                anchor = anchors.get(i)
                return (i, 1, i) if anchor is None else (anchor, 0, i)

            out.sort(key=place)  # (stable, and nearly sorted: only summaries move)
    return out


def _summary_anchors(items: list[Item], index: dict[str, int]) -> dict[int, int]:
    """Full Context index of each summary that moves -> the index of the item it stands before.

    A summary stands where the first item it replaced stood: before every item from that one on
    (the system instructions it did not replace, a result re-attached later) and after every item
    before it (so the leading system prompt stays leading). A summary of a summary stands where
    that one stood. Ids it names that are not in the Full Context are ignored (``index``: item id
    -> Full Context index); a summary never moves later than its own place."""
    anchors: dict[int, int] = {}
    for i, it in enumerate(items):
        if it.role != "summary":
            continue
        anchor = i
        for rid in it.replaced_ids:
            j = index.get(rid)
            if j is not None:
                anchor = min(anchor, anchors.get(j, j))
        if anchor != i:
            anchors[i] = anchor
    return anchors


# --------------------------------------------------------------------------- snapshots

_snap_encoder = msgspec.msgpack.Encoder()
_snap_decoder = msgspec.msgpack.Decoder(SessionState)
# 2: items carry their text once (``parts`` empty for pure text), items and input records are
# MessagePack arrays, ``AgentState.request_attempt``, ``SessionState.placed_inputs``. Snapshots of another version are ignored (derived data).
# 3: the text of several text parts is joined by TEXT_PART_SEPARATOR (was: nothing).
# 4: ``SessionState.settled_asks`` (what settled questions asked).
# 5: ``AgentState.outcome`` (how a finished subagent ended).
# 6: the stored blob ends with a CRC-32 of the rest (projections/snapshots.py).
# 7: ``UsageTotals.unreported`` (per count, the answered requests that did not report it).
# 8: ``SessionState.jobs`` (background jobs).
# 9: ``AgentState.skills`` / ``skills_due`` (skill load state); placed ``/skill:`` inputs hold the args.
# 10: ``context.compacted`` counts in ``usage`` (its summarizing request) and drops the results it
#     replaced from ``AgentState.included``.
# 11: ``AgentState.capabilities`` (deferred tools loaded by capability_search).
# 12: ``Item.rerun_after`` (a tool result's call ran twice: its executor died under the first run).
# 13: a fork's subagent under way at the fork point is ``interrupted`` (``AgentState.outcome``).
# 14: ``AgentState.usage`` (each agent's own requests; the session's ``usage`` is their sum).
# 15: ``SessionState.last_ts`` (the last event's ts, checked against the log at wake-up).
# 16: a ``model.failed`` with ``partial_text`` (an answer aborted while it streamed) adds an
#     assistant item of status ``aborted``.
# 17: ... and of status ``failed`` when the request failed otherwise (an item an earlier build
#     folded from such a row says ``aborted``).
# 18: ``AgentState.stop_reason`` (an answer cut at the output limit: its last call is not run).
# 19: the items of a response stopped with ``refusal`` are ``refused`` (``Item.status``), its first
#     item and ``AgentState.stop_details`` hold its ``stop_details``; such a response is
#     ``last_response_final`` whatever it called. ``Item.stop_reason`` (an answer the provider
#     cut says so where it stopped).
# 20: ``AgentState.compaction_failure`` (no automatic compaction is tried again in the task where
#     one failed; the context view says why the last one failed).
# 21: an answer with neither text nor calls adds an assistant item of status ``empty``.
# 22: ``CompactionFailure.answers`` (the model answers since it failed; a snapshot of 21 would
#     decode it as 0).
# 23: ``AgentState.images_not_sent`` (the images its last answered request did not send).
# 24: ``UsageTotals.total_input_tokens`` (every input token, cached or not, in one meaning for
#     every protocol; a snapshot of 23 would decode it as unknown with nothing in ``unreported``);
#     a count that would take a total past ``MAX_USAGE_TOTAL`` counts as not reported.
# 25: ``LoadedSkill.base_dir`` and ``SkillDue.base_dir`` (the directory a skill was loaded from,
#     which the ``skill`` listing marks loaded; a snapshot of 24 would decode it as unknown).
# 26: ``AgentState.capabilities_offered`` (the loaded tools its last request offered; a snapshot of
#     25 would decode it as none).
SNAPSHOT_VERSION = 26


def images_not_sent(diagnostics: dict[str, Any]) -> dict[str, str]:
    """The images a request did not send, from its ``model.responded`` diagnostics
    (``images_withheld``: ``{"artifact_id", "why"}`` each); what has another shape (a log of
    another build) is passed over."""
    found = diagnostics.get("images_withheld")
    out: dict[str, str] = {}
    for w in found if isinstance(found, list) else ():
        if isinstance(w, dict) and isinstance(w.get("artifact_id"), str) and isinstance(w.get("why"), str):
            out.setdefault(w["artifact_id"], w["why"])
    return out


def snapshot_bytes(state: SessionState) -> bytes:
    return _snap_encoder.encode(state)


def state_from_snapshot(data: bytes) -> SessionState:
    """Decode a snapshot, with the cycle collector paused.

    A long session's snapshot holds tens of thousands of containers (each item's lists, tool
    calls); left on, the collector would run many times during the decode and walk the growing
    heap each time — most of the load's cost. None of the decoded objects can be garbage.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _snap_decoder.decode(data)
    finally:
        if enabled:
            gc.enable()
