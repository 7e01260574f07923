"""Pure decisions of a session: what the agent loop does next, and what commands produce.

Nothing here does I/O, reads a clock or makes ids: ids arrive as arguments. The actor calls
these with its folded :class:`SessionState` and performs the effects they name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence, Union

from events import types as t
from projections.session_state import EMPTY_ANSWER, MAIN_AGENT, AgentState, QueuedInput, SessionState, SkillDue

from .errors import shortened
from .providers.base import CONTENT_FILTER, INCOMPLETE, MESSAGE_LIMIT, OUTPUT_LIMIT, REFUSAL

# --------------------------------------------------------------------------- loop steps


@dataclass(frozen=True)
class StartTask:
    input: QueuedInput


@dataclass(frozen=True)
class PlaceSteer:
    """Place every queued steer (in submission order) before the agent's next model request."""

    inputs: tuple[QueuedInput, ...]


@dataclass(frozen=True)
class RunCall:
    call: t.ToolCall
    restart: bool = False  # tool.started exists already (a crash interrupted it)


@dataclass(frozen=True)
class InterruptCall:
    call: t.ToolCall


@dataclass(frozen=True)
class SkipCalls:
    calls: tuple[t.ToolCall, ...]


@dataclass(frozen=True)
class AppendSkills:
    """Record the ``skill.loaded`` of the round's skill calls, now that its tool results are in."""

    due: tuple[SkillDue, ...]


@dataclass(frozen=True)
class RequestModel:
    pass


@dataclass(frozen=True)
class FinishTask:
    status: Literal["completed", "failed"]
    reason: str = ""


@dataclass(frozen=True)
class FinishAgent:
    status: Literal["completed", "failed"]
    result: str


Step = Union[StartTask, PlaceSteer, RunCall, InterruptCall, SkipCalls, AppendSkills, RequestModel, FinishTask,
             FinishAgent]


def queued_steers(state: SessionState) -> tuple[QueuedInput, ...]:
    """The queued steers, in submission order (follow-ups between them stay queued)."""
    return tuple(q for q in state.queue if q.when_busy == "steer")


def run_order(state: SessionState) -> list[QueuedInput]:
    """The queued inputs in the order :func:`next_step` places them, the next first. While a task
    runs, every steer goes in at its next tool round or answer, before the follow-ups, which wait
    for the task to finish; with no task running, the first queued input starts the next task and
    the steers go in right after it. Each kind keeps submission order."""
    head = state.queue[:1] if state.running_task is None else []
    rest = state.queue[len(head):]
    return [*head, *(q for q in rest if q.when_busy == "steer"), *(q for q in rest if q.when_busy != "steer")]


def next_step(state: SessionState, agent_id: str, replay_safe: frozenset[str] = frozenset()) -> Step | None:
    """What ``agent_id``'s loop does next, or ``None`` when it has nothing to do.

    Main agent: starts tasks from the queue (in submission order), places steers after a tool
    round (skipping the round's remaining calls) or after a final answer, and finishes tasks.
    Steers go in together: every steer queued when the agent is about to ask the model is placed
    by one :class:`PlaceSteer`, so the next request sees them all (one request, not one each).
    Subagents: run until a final answer, then finish with its text.
    """
    if state.deleted or state.quarantined:
        return None
    main = agent_id == MAIN_AGENT
    agent = state.agents.get(agent_id)
    if main:
        if state.questions:
            return None  # queued inputs wait until the question is settled
        if state.running_task is None:
            if not state.queue:
                return None
            if agent is not None and agent.skills_due and not agent.pending_calls:
                # A fork made inside a round whose skill calls had their results: the fork runs
                # nothing of that round, which ends there, so the instructions due after it go
                # in before the fork's first input, as an abort puts them (never after it).
                return AppendSkills(tuple(agent.skills_due))
            return StartTask(state.queue[0])
    if agent is None:
        return None
    if not main and agent.status == "finished":
        return None
    steers = queued_steers(state) if main else ()
    if agent.running_call is not None:
        call = next((c for c in agent.pending_calls if c.call_id == agent.running_call), None)
        if call is not None:
            if call.name in replay_safe or _answered(state, call) or cut_by_provider(agent, call):
                return RunCall(call, restart=True)
            return InterruptCall(call)
    if agent.pending_calls:
        if steers and agent.round_results > 0:
            return SkipCalls(tuple(agent.pending_calls))
        return RunCall(agent.pending_calls[0])
    if agent.skills_due:
        # Skill instructions go after the whole batch of tool results (a message between two
        # results would split the batch), before anything else enters the context.
        return AppendSkills(tuple(agent.skills_due))
    if agent.open_request_seq is not None:
        return RequestModel()  # a stream cut by a crash: ask again
    if agent.last_error is not None:
        if main:
            return FinishTask("failed", agent.last_error)
        return FinishAgent("failed", agent.last_error)
    if agent.last_response_final:
        if steers:
            return PlaceSteer(steers)
        if main:
            return FinishTask("completed", refusal_reason(agent))
        return FinishAgent("completed", refusal_reason(agent) or _last_text(agent))
    if steers:
        # About to ask the model (a round just ended, a steer was just placed, a task just
        # started): whatever steers are queued now go in first, so the request sees them all.
        # (Placing only after a tool result let a steer queued after another one's placement,
        # or two queued at once, wait for a request of its own.)
        return PlaceSteer(steers)
    return RequestModel()


# What cut an answer, by the stop reason its result records (as the providers normalize it), in
# the words the model is told: its last tool call may have been cut while it was written.
CUT_BY = {
    OUTPUT_LIMIT: "at the model's output limit",
    CONTENT_FILTER: "by the provider's content filter",
    REFUSAL: "by the provider's content filter (stop reason refusal)",
    MESSAGE_LIMIT: "at the provider's limit on messages (max_messages)",
    INCOMPLETE: "before the provider finished it (an incomplete response that gave no reason)",
}


def cut_by_provider(agent: AgentState, call: t.ToolCall) -> bool:
    """Whether ``call`` is the last call of an answer the provider cut (:data:`CUT_BY`: at the
    model's output limit, by its content filter, at a Responses limit on messages, or in a
    Responses ``incomplete`` response that gave no reason): the model
    was writing it when its answer
    stopped, so its arguments may be incomplete (a call cut before any argument arrived reads as
    ``{}``, which a tool whose arguments are all optional would run on its defaults). Such a call
    is not run: it is answered with :func:`cut_call_message`, and the calls before it run as
    usual; a refused answer (``refusal``) runs none of its calls. (A restart that finds it
    started runs it again, which answers it the same: nothing of it ran.)"""
    pending = agent.pending_calls
    if agent.stop_reason == REFUSAL:
        # A refused answer runs none of its calls: the turn is not sent back (Anthropic asks for
        # it to be left out, runtime.providers.compile), so what a call of it did would be done
        # behind the model's back; and the classifier stopped it for what it was writing.
        return any(c.call_id == call.call_id for c in pending)
    return agent.stop_reason in CUT_BY and bool(pending) and pending[-1].call_id == call.call_id


def refusal_reason(agent: AgentState) -> str:
    """What a task that ended on a refused answer says of it (``task.finished``'s ``reason``): the
    provider refused, and its category and explanation when it gave them; ``""`` for a task that
    ended otherwise."""
    if agent.stop_reason != REFUSAL:
        return ""
    details = agent.stop_details or {}
    category = f" (category {details['category']})" if details.get("category") else ""
    explanation = f": {details['explanation']}" if details.get("explanation") else ""
    return f"the provider refused the answer{category}{explanation}"


CUT_CALL_CODE = "INVALID_ARGUMENT"


def cut_call_message(agent: AgentState, call: t.ToolCall) -> str:
    """What the model is told of a call :func:`cut_by_provider` keeps from running."""
    if agent.stop_reason == REFUSAL:
        return f"the provider refused this answer, so its {call.name} call was not run"
    return (f"the answer was cut {CUT_BY[agent.stop_reason or '']} while this {call.name} call was being written: "
            "its arguments may be incomplete, so it was not run; call it again")


QUESTION_PREFIX = "q_"  # a question's id is this and the id of the call that asked it


def question_id(call_id: str) -> str:
    """The id of the question the call ``call_id`` asks (``q_<call id>``)."""
    return f"{QUESTION_PREFIX}{call_id}"


def question_status(state: SessionState, call: t.ToolCall) -> str | None:
    """How the question ``call`` asked was settled (``answered``, ``cancelled``), or ``None``:
    it asked none, or it is still open."""
    return state.settled_questions.get(question_id(call.call_id), {}).get("status")


def _answered(state: SessionState, call: t.ToolCall) -> bool:
    """Whether ``call`` asked a question that the user answered: a restart that cut the call off
    after the answer was recorded finishes the call with that answer (running it again reads the
    answer from the state and asks nothing), instead of reporting it interrupted and losing an
    answer the user was told was taken."""
    return question_status(state, call) == "answered"


def question_cancelled(state: SessionState, call: t.ToolCall) -> bool:
    """Whether ``call`` asked a question that was cancelled (a restart cancels the questions open
    at it): an interrupted call then tells the model so."""
    return question_status(state, call) == "cancelled"


def _last_text(agent: AgentState) -> str:
    for it in reversed(agent.items):
        if it.role == "assistant" and it.status != EMPTY_ANSWER:  # (an empty answer says nothing)
            return it.text
    return ""


# --------------------------------------------------------------------------- commands

WithdrawAnswer = Literal["withdrawn", "placed", "settled", "unknown"]


def withdraw(state: SessionState, request_id: str) -> tuple[WithdrawAnswer, str | None, list[t._Event]]:
    """Answer to ``withdraw(request_id)``: (answer, original text when withdrawn, events)."""
    rec = state.inputs.get(request_id)
    if rec is None:
        return "unknown", None, []
    if rec.status == "queued":
        return "withdrawn", rec.text, [t.InputWithdrawn(input_request_id=request_id, reason="user")]
    if rec.status == "withdrawn":
        return "withdrawn", rec.text, []
    if rec.status == "placed":
        return "placed", None, []
    return "settled", None, []


def requeue_as_steer(state: SessionState, request_id: str) -> tuple[str, list[t._Event]]:
    """``steer(request_id)``: ("steer", events) when queued, else the input's status."""
    rec = state.inputs.get(request_id)
    if rec is None:
        return "unknown", []
    if rec.status != "queued":
        return rec.status, []
    q = next(q for q in state.queue if q.request_id == request_id)
    if q.when_busy == "steer":
        return "steer", []
    return "steer", [t.InputRequeued(input_request_id=request_id, when_busy="steer")]


@dataclass(frozen=True)
class Scoped:
    """An event with the agent (and task) it belongs to."""

    event: t._Event
    agent_id: str = MAIN_AGENT
    task_id: str | None = None


ABORTED_TEXT = "The run was aborted by the user before this tool call finished."


@dataclass(frozen=True)
class CutRequest:
    """What a model request cut off while its answer streamed had given by then: the usage the
    provider had reported (``None``: none yet) and the visible text that had gone out to viewers,
    scrubbed (``""``: none)."""

    usage: t.Usage | None = None
    text: str = ""


@dataclass(frozen=True)
class CutCall:
    """What a running call the abort cut off had produced (``run_command``: the output printed
    before the abort, after the scrub and the cap) and whether the cap had cut it."""

    output: str
    truncated: bool = False
    # How the command ended, from its exit (None: no exit came within the abort's wait):
    # its exit code (-N: signal N), the signal's name, and whether the abort's stop ended it.
    exit_code: int | None = None
    signal: str | None = None
    stopped: bool = False


def command_end_note(got: CutCall) -> str:
    """How an aborted command ended, as its result's note says it: killed (or stopped) by the
    abort, with the signal or exit code when its exit came; or its own exit, when it ended by
    itself before the abort's stop reached it."""
    truncated = ", output truncated" if got.truncated else ""
    if got.exit_code is None:
        return f"[killed by the abort{truncated}]"
    how = (f"signal {-got.exit_code} ({got.signal})" if got.signal is not None else f"exit {got.exit_code}")
    if got.stopped:
        verb = "killed" if got.signal is not None else "stopped"
        return f"[{verb} by the abort: {how}{truncated}]"
    ended = f"killed by {how}" if got.signal is not None else how
    return f"[{ended}: the command ended by itself during the abort{truncated}]"


@dataclass(frozen=True)
class CutProgram:
    """What a ``programmatic_tool_run`` program the abort cut off had done: what it had printed
    (``output``, ``truncated``: cut at the program's output limit), one line per call (its
    result's ``calls``; the call it was in ``ok: false``, ``ABORTED``) and, when that call was a
    ``run_command``, its id and what the command had printed and how it ended (``command``)."""

    output: str
    truncated: bool
    calls: tuple[Mapping[str, Any], ...]
    command_call_id: str | None = None
    command: CutCall | None = None


def _command_fields(got: CutCall) -> dict[str, Any]:
    known = got.exit_code is not None
    return {"truncated": got.truncated, "exit_code": got.exit_code, "signal": got.signal,
            "killed_by_abort": got.stopped if known else None}


def _program_content(got: CutProgram) -> tuple[list[t.ContentPart], Any]:
    """A program's interrupted result: what it printed (as its result would show it), then, for
    the ``run_command`` it was in, a line naming that call, the command's output and how it
    ended, then the abort's note. Its ``calls`` line of that command gains the command's fields."""
    lines = [got.output if got.output or got.truncated else "(the program printed nothing)"]
    if got.truncated:  # (at the program's output limit, or to fit the event: see the actor)
        lines.append("[the program's output was cut]")
    calls = [dict(entry) for entry in got.calls]
    if got.command is not None and got.command_call_id is not None:
        cmd = got.command
        said = "its output:" if cmd.output else "it printed nothing"
        lines.append(f"[call {got.command_call_id} (run_command) was running at the abort; {said}]")
        if cmd.output:
            lines.append(cmd.output)
        lines.append(command_end_note(cmd))
        for entry in calls:
            if entry.get("call_id") == got.command_call_id:
                entry.update(_command_fields(cmd))
    lines.append(ABORTED_TEXT)
    return [t.TextPart("\n".join(lines))], {"aborted": True, "calls": calls, "output_truncated": got.truncated}


def aborted_call_content(got: CutCall | CutProgram | None) -> tuple[list[t.ContentPart], Any]:
    """The content and structured content of the running call an abort interrupts: the abort's
    note alone, or, for a call that had produced output, that output, how it ended and the note
    (``structured_content``: ``exit_code``, ``signal`` and ``killed_by_abort`` are null when no
    exit came); for a program, what it printed and its cut command (:func:`_program_content`)."""
    if got is None:
        return [t.TextPart(ABORTED_TEXT)], None
    if isinstance(got, CutProgram):
        return _program_content(got)
    note = command_end_note(got)
    text = f"{got.output}\n{note}\n{ABORTED_TEXT}" if got.output else f"{note}\n{ABORTED_TEXT}"
    return [t.TextPart(text)], {"aborted": True, **_command_fields(got)}


# Characters of the paths an applied-edits note lists, cut past them: the note is one more copy of
# paths the record it joins holds already (a long one, or a program's many, must not push the
# abort's or the result's record past the log's event size limit).
NOTE_PATHS_MAX = 300


@dataclass
class CutEdits:
    """What a call cut off (an abort, a program's time limit) did all the same, handed over by
    its tool as it is cancelled: ``events``, an edit that completed on the executor (its
    ``artifact.stored`` copies and ``file.edited``), recorded right after the call's
    ``tool.finished``; ``unrecorded``, the paths of completed edits whose copies could not be
    stored (a full disk: no ``file.edited`` without them), which the note alone says. A
    ``revert_call`` cut off after restores completed hands its ``file.reverted`` of them the same
    way (``partial`` when some of the call's edits were not restored)."""
    events: list[t._Event] = field(default_factory=list)
    unrecorded: list[str] = field(default_factory=list)


def applied_edits_note(cut: CutEdits | None) -> str | None:
    """The line a cut-off call's result says its completed edits with (``cut``: what it did all the
    same), so that the model knows them done and does not make them again, and whether
    revert_call can undo them; and the line of a revert's completed restores, which says what
    is left of the reverted call when it stopped part way. None when it changed nothing. Each
    list of paths is cut past :data:`NOTE_PATHS_MAX` characters."""
    if cut is None:
        return None
    lines = [line for line in (_edits_line(cut), *map(_revert_line, cut.events)) if line is not None]
    return "\n".join(lines) or None


def _revert_line(event: t._Event) -> str | None:
    if not isinstance(event, t.FileReverted):
        return None
    restored = shortened(", ".join(dict.fromkeys(event.paths)), NOTE_PATHS_MAX)
    if not event.partial:
        return f"[the revert was applied all the same before the call was cut off: {restored} restored]"
    return (f"[the revert was applied in part before the call was cut off: {restored} restored; revert_call "
            f"of call {shortened(event.reverted_call_id, 100)} again restores the rest]")


def _edits_line(cut: CutEdits) -> str | None:
    recorded = list(dict.fromkeys(e.path for e in cut.events if isinstance(e, t.FileEdited)))
    unrecorded = [p for p in dict.fromkeys(cut.unrecorded) if p not in recorded]
    said: list[str] = []
    if recorded:
        said.append(f"{shortened(', '.join(recorded), NOTE_PATHS_MAX)} changed; revert_call can undo it")
    if unrecorded:  # (the words of an edit's ARTIFACT_WRITE_FAILED)
        said.append(f"{shortened(', '.join(unrecorded), NOTE_PATHS_MAX)} changed, but the copies revert_call "
                    f"restores from could not be stored; revert_call cannot undo it")
    if not said:
        return None
    return f"[the edit was applied all the same before the call was cut off: {'; '.join(said)}]"


def with_note(content: list[t.ContentPart], note: str | None, *, last: bool = False) -> list[t.ContentPart]:
    """``content`` with ``note`` as a line of its first text part (its last line when ``last``, else
    its first), or as a text part of its own when it has none."""
    if note is None:
        return content
    for i, part in enumerate(content):
        if isinstance(part, t.TextPart):
            text = f"{part.text}\n{note}" if last else f"{note}\n{part.text}"
            return [*content[:i], t.TextPart(text), *content[i + 1:]]
    return [*content, t.TextPart(note)]


# The reason a deletion's abort gives (``run.aborted``, ``task.finished``, a cancelled question's).
SESSION_DELETED = "session deleted"


def abort_events(state: SessionState, reason: str = "user",
                 skill_loads: dict[str, tuple[tuple[SkillDue, ...], list[t._Event]]] | None = None,
                 cut: Mapping[str, CutRequest] | None = None,
                 cut_calls: Mapping[str, CutCall | CutProgram] | None = None, *,
                 deleted: bool = False, cut_events: Mapping[str, CutEdits] | None = None) -> list[Scoped]:
    """Events that stop the current run and withdraw everything queued.

    ``deleted``: the abort is a deletion's; its queued inputs are withdrawn ``session_deleted``
    and its questions cancelled :data:`SESSION_DELETED` (a user's abort: ``abort``, "run
    aborted"). A flag, not the reason's text: a reason is free text.

    ``skill_loads``: by agent, the skill loads due in its round and what records them (the actor's
    snapshots, :meth:`runtime.skill_loads.SkillLoads.due_events`). An aborted round ends with its
    interrupted and skipped results, so a skill call's instructions go right after them; left due,
    they were appended after the next input. They are left out unless exactly those loads are due.

    ``cut``: by agent, what the model request the abort cut off had given (it had begun
    answering): that request's ``model.failed`` records the usage the provider had reported, as
    it counts, and keeps the visible text it had streamed (what the user saw of the answer) as
    ``partial_text`` when it is more than white space, so the answer's beginning stays in the
    conversation (see :func:`kept_partial_text`).

    ``cut_calls``: by call id, what a running call the abort cut off had produced (a command's
    output so far, a program's output and its cut command): its ``tool.finished`` keeps it before
    the abort's note (:func:`aborted_call_content`), as a timed-out command's result keeps its
    output.

    ``cut_events``: by call id, what a running call the abort cut off did all the same
    (:class:`CutEdits`: an edit that completed while the abort waited for its end), its events
    recorded right after its ``tool.finished``, as a result's events are."""
    out: list[Scoped] = []
    task = state.running_task
    # Subagents end first, then the main agent: a subagent's call (the parent's) is settled after
    # the subagent ended, as in a run that was not aborted.
    agents = sorted(state.agents.values(), key=lambda a: a.agent_id == MAIN_AGENT)
    for agent in agents:
        if agent.agent_id != MAIN_AGENT and agent.status != "running":
            continue
        tid = agent.task_id
        for call in agent.pending_calls:
            running = call.call_id == agent.running_call
            content, structured = (aborted_call_content((cut_calls or {}).get(call.call_id)) if running
                                   else ([t.TextPart("Skipped: the run was aborted.")], None))
            if running:  # (an edit it made all the same is said first: the abort's note would deny it)
                content = with_note(content, applied_edits_note((cut_events or {}).get(call.call_id)))
            out.append(Scoped(t.ToolFinished(
                call_id=call.call_id, name=call.name,
                status="interrupted" if running else "skipped", is_error=True,
                content=content, structured_content=structured,
                error_code="ABORTED"), agent.agent_id, tid))
            if running:
                done = (cut_events or {}).get(call.call_id, CutEdits())
                out.extend(Scoped(e, agent.agent_id, tid) for e in done.events)
        due, loads = (skill_loads or {}).get(agent.agent_id, ((), []))
        if agent.skills_due and tuple(agent.skills_due) == due and (task is not None or agent.agent_id != MAIN_AGENT):
            out.extend(Scoped(e, agent.agent_id, tid) for e in loads)
        if agent.open_request_seq is not None:
            got = (cut or {}).get(agent.agent_id, CutRequest())
            out.append(Scoped(t.ModelFailed(code="ABORTED", message="aborted by the user", usage=got.usage,
                                            partial_text=kept_partial_text(got.text)),
                              agent.agent_id, tid))
        if agent.agent_id != MAIN_AGENT:
            out.append(Scoped(t.AgentFinished(status="aborted", result=""), agent.agent_id, tid))
    if task is not None:
        out.append(Scoped(t.RunAborted(reason=reason), MAIN_AGENT, task))
        out.append(Scoped(t.TaskFinished(status="aborted", reason=reason), MAIN_AGENT, task))
    # (a deletion says so: its inputs are withdrawn `session_deleted`, its questions cancelled
    # "session deleted", where a user's abort says `abort` and "run aborted")
    for q in state.queue:
        out.append(Scoped(t.InputWithdrawn(input_request_id=q.request_id,
                                           reason="session_deleted" if deleted else "abort")))
    for qid, q in state.questions.items():
        agent_id = q.agent_id or MAIN_AGENT
        out.append(Scoped(t.QuestionCancelled(question_id=qid, reason=SESSION_DELETED if deleted else "run aborted"),
                          agent_id, question_task(state, agent_id)))
    return out


def kept_partial_text(text: str) -> str:
    """What an aborted request keeps of the ``text`` its answer had streamed: all of it when some
    of it is visible, nothing when it is empty or white space alone (no provider takes an
    assistant message of white space, and the user saw nothing)."""
    return text if text.strip() else ""


def question_task(state: SessionState, agent_id: str) -> str | None:
    """The task an open question of ``agent_id`` belongs to (its asking call's): the events that
    settle it carry it, as ``question.asked`` does, so a task's events include its answers."""
    agent = state.agents.get(agent_id)
    return agent.task_id if agent is not None else None


def answer_question(state: SessionState, question_id: str, answer: Any) -> tuple[dict[str, Any], list[Scoped]]:
    """``answer`` to question ``question_id``: (the route's answer, events).

    The order is the rule: an unknown question is ``QUESTION_NOT_FOUND``; then the body is
    validated against what the question asked, open or settled alike (``ANSWER_INVALID``: an
    invalid body is never accepted, not even as a repeat); then the question's state decides —
    open: the answer is recorded; answered: ``duplicate: true`` with the answer that won (the
    first valid answer wins, a retry learns it); cancelled: ``QUESTION_SETTLED`` (nothing was or
    will be answered).
    """
    from .errors import QuestionNotFound, QuestionSettled

    q = state.questions.get(question_id)
    asked = q.questions if q is not None else state.settled_asks.get(question_id)
    if asked is None:
        raise QuestionNotFound(f"session {state.session_id!r} has no question {question_id!r}")
    normalized = normalize_answer(asked, answer)
    if q is None:
        settled = state.settled_questions[question_id]
        if settled.get("status") == "cancelled":
            raise QuestionSettled(f"question {question_id!r} was cancelled ({settled.get('reason', '')}): "
                                  "it takes no answer any more")
        return {"duplicate": True, **settled}, []
    return ({"duplicate": False, "status": "answered", "answer": normalized},
            [Scoped(t.QuestionAnswered(question_id=question_id, answer=normalized), q.agent_id or MAIN_AGENT,
                    question_task(state, q.agent_id or MAIN_AGENT))])


def _whole_ids(ids: list[str], limit: int) -> str:
    """``ids`` quoted and joined with commas, as many whole ones as fit in ``limit`` characters
    (the first one always), then ``…``. Never cut inside one: an id is the model's text, stored
    as it was (before a key was configured, it may hold one), and what a cut leaves of a key is
    no whole key, which the answer's scrub of whole keys would not find."""
    shown: list[str] = []
    for quoted in map(repr, ids):
        if shown and len(", ".join([*shown, quoted])) > limit:
            return ", ".join(shown) + "…"
        shown.append(quoted)
    return ", ".join(shown)


def normalize_answer(questions: list[t.Question], answer: Any) -> dict[str, Any]:
    """Validate an answer and put its option ids in the questions' option order (duplicates dropped).

    ``{"kind": "answer", "optionIds"?: [...], "text"?: "..."}`` (at least one of the two) or
    ``{"kind": "skip"}``. Raises ``ANSWER_INVALID`` naming the problem.
    """
    from .errors import MAX_QUOTED, AnswerInvalid, shortened_names

    if not isinstance(answer, dict) or answer.get("kind") not in ("answer", "skip"):
        raise AnswerInvalid('an answer is {"kind": "answer", "optionIds"?, "text"?} or {"kind": "skip"}')
    if answer["kind"] == "skip":
        if set(answer) != {"kind"}:
            raise AnswerInvalid("a skip carries nothing else")
        return {"kind": "skip"}
    extra = set(answer) - {"kind", "optionIds", "text"}
    if extra:
        raise AnswerInvalid(f"unknown answer fields: {shortened_names(extra)}")
    option_ids, text = answer.get("optionIds"), answer.get("text")
    if option_ids is None and text is None:
        raise AnswerInvalid("an answer needs optionIds, text or both")
    order = [o.id for q in questions for o in q.options]
    out: dict[str, Any] = {"kind": "answer"}
    if option_ids is not None:
        if not isinstance(option_ids, list) or not all(isinstance(x, str) for x in option_ids):
            raise AnswerInvalid("optionIds must be a list of option ids")
        unknown = set(option_ids) - set(order)
        if unknown:  # (quoted, so an empty id shows; cut, so thousands of ids are not echoed back)
            named = shortened_names(unknown)
            count = f" ({len(unknown)} in all)" if named.endswith("…") and len(unknown) > 1 else ""
            known = (f"the options are {_whole_ids(list(dict.fromkeys(order)), MAX_QUOTED)}" if order
                     else "these questions have no options (answer with text)")
            raise AnswerInvalid(f"unknown option ids: {named}{count}; {known}")
        chosen = set(option_ids)
        if chosen:
            out["optionIds"] = [o for o in dict.fromkeys(order) if o in chosen]
    if text is not None:
        if not isinstance(text, str) or len(text) > 20_000:
            raise AnswerInvalid("text must be a string of at most 20000 characters")
        if not any(q.allow_text for q in questions):
            raise AnswerInvalid("these questions take options only, no text")
        if text.strip():
            out["text"] = text
    if len(out) == 1:  # an empty list and blank text say nothing (the model was told "The user .")
        raise AnswerInvalid("an answer needs at least one option id or some text (or answer with a skip)")
    return out
