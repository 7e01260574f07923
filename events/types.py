"""The one tagged union of Lens events.

Every event kind is declared here exactly once, as a frozen msgspec Struct whose ``kind`` tag is
its stable, dotted name. The same declaration drives encoding, decoding, replay, projections,
``lens log decode`` and the SSE stream.

Rules that keep old logs decodable forever (see docs/storage-format.md):

* a tag never changes and is never reused for another shape;
* a field is never removed or retyped; new fields are added with a default;
* identity lives in the row's envelope (``project_id``, ``session_id``, ``agent_id``,
  ``task_id``, ``request_id``), not in the body.

A kind this build does not know (written by a newer Lens) decodes as :class:`Opaque`.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Union

import msgspec

# --------------------------------------------------------------------------- building blocks


class TextPart(msgspec.Struct, frozen=True, gc=False, tag="text", tag_field="type"):
    text: str


class ImagePart(msgspec.Struct, frozen=True, gc=False, tag="image", tag_field="type"):
    """An image by artifact id; bytes never enter the log."""

    artifact_id: str
    mime: str


ContentPart = Union[TextPart, ImagePart]


class ToolCall(msgspec.Struct, frozen=True, gc=False):
    call_id: str
    name: str  # the internal tool id, never a provider alias
    arguments: str  # JSON text exactly as the model produced it


class Usage(msgspec.Struct, frozen=True, gc=False):
    """Provider-reported token counts; ``None`` means the provider did not report it.

    ``input_tokens`` keeps the protocol's own meaning (OpenAI's includes cached tokens,
    Anthropic's excludes cache reads and writes); ``total_input_tokens`` is every input token of
    the request, cached or not, in one meaning for every protocol (added later: a row written
    before it decodes it as ``None``, unknown)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None
    total_input_tokens: int | None = None


TodoStatus = Literal["pending", "in_progress", "done", "cancelled"]


class TodoItem(msgspec.Struct, frozen=True, gc=False):
    id: str
    text: str
    status: TodoStatus = "pending"


class QuestionOption(msgspec.Struct, frozen=True, gc=False):
    id: str
    label: str


class Question(msgspec.Struct, frozen=True, gc=False):
    id: str
    text: str
    options: list[QuestionOption] = []
    allow_text: bool = True


WhenBusy = Literal["followUp", "steer"]


class _Event(msgspec.Struct, frozen=True, gc=False, kw_only=True, tag_field="kind", omit_defaults=True):
    """Base of every event body. Subclasses set ``tag=`` to their stable kind."""


# --------------------------------------------------------------------------- projects & sessions


class ProjectCreated(_Event, tag="project.created"):
    name: str
    workspace: str
    executor: dict[str, Any] = {}


class SessionCreated(_Event, tag="session.created"):
    model: str | None = None
    thinking_level: str | None = None
    name: str | None = None
    forked_from_session: str | None = None
    forked_from_seq: int | None = None


class SessionConfigured(_Event, tag="session.configured"):
    """Applies from the next model request; ``None`` leaves a setting unchanged."""

    model: str | None = None
    thinking_level: str | None = None
    settings: dict[str, Any] = {}
    # Set back to the default (added later): ``model`` (the session follows the default model
    # chain again), ``thinking_level`` (none: the provider's default), ``name`` (none), and saved
    # ``settings`` keys (dropped: the config's value, else the built-in one, applies again).
    reset: list[str] = []


class SessionNamed(_Event, tag="session.named"):
    name: str


class SessionDeleted(_Event, tag="session.deleted"):
    """Soft delete: the session's events stay; views hide it."""

    reason: str = ""


class SessionQuarantined(_Event, tag="session.quarantined"):
    reason: str


# --------------------------------------------------------------------------- agents & tasks


class AgentStarted(_Event, tag="agent.started"):
    """A subagent (or the main agent) with its own contexts; ``agent_id`` is in the envelope."""

    parent_agent_id: str | None = None
    parent_call_id: str | None = None
    role: Literal["main", "subagent"] = "subagent"
    prompt: str = ""
    tools: list[str] = []


class AgentFinished(_Event, tag="agent.finished"):
    status: Literal["completed", "failed", "aborted", "interrupted"] = "completed"
    result: str = ""


class TaskStarted(_Event, tag="task.started"):
    """A run started by one placed input (or a subagent's assignment)."""

    input_request_id: str | None = None


class TaskFinished(_Event, tag="task.finished"):
    status: Literal["completed", "failed", "aborted", "interrupted"] = "completed"
    reason: str = ""


# --------------------------------------------------------------------------- inputs & queue


class InputSubmitted(_Event, tag="input.submitted"):
    """A user input, durably queued; the envelope's ``request_id`` makes it idempotent."""

    content: list[ContentPart]
    when_busy: WhenBusy = "followUp"


class InputPlaced(_Event, tag="input.placed"):
    """The queued input entered the agent's context."""

    input_request_id: str


class InputWithdrawn(_Event, tag="input.withdrawn"):
    input_request_id: str
    reason: Literal["user", "abort", "session_deleted"] = "user"


class InputRequeued(_Event, tag="input.requeued"):
    """A queued follow-up moved to another lane (``steer``)."""

    input_request_id: str
    when_busy: WhenBusy = "steer"


class RunAborted(_Event, tag="run.aborted"):
    reason: str = "user"


# --------------------------------------------------------------------------- model


class ModelRequested(_Event, tag="model.requested"):
    provider: str
    model: str
    attempt: int = 1
    thinking_level: str | None = None
    # Declared from the first version and left empty by every producer (see "What the context
    # audit left, done" in docs/decisions.md): which items a request was compiled from is the
    # agent's Working Context as of this event, which replay rebuilds exactly; ``diagnostics``
    # holds their count. Kept so rows that carry it decode as they did.
    context_item_ids: list[str] = []
    diagnostics: dict[str, Any] = {}


class ModelResponded(_Event, tag="model.responded"):
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = []
    stop_reason: str | None = None
    usage: Usage = Usage()
    provider_response_id: str | None = None
    diagnostics: dict[str, Any] = {}  # e.g. the cache breakpoints actually sent
    # Provider-native opaque reasoning (signed thinking blocks, encrypted reasoning items) as
    # received, ``{"protocol": ..., "block": {...}}`` each; sent back unchanged on later requests
    # to the same protocol (see runtime/providers/compile.py).
    reasoning_blocks: list[dict[str, Any]] = []
    # Why the provider stopped the answer, beyond ``stop_reason``: Anthropic's ``stop_details`` of
    # a ``refusal`` (``type``, ``category``, ``explanation``: the text fields it sent, bounded).
    # ``None`` for rows written before it was read, and when nothing more was said.
    stop_details: dict[str, str] | None = None


class ModelFailed(_Event, tag="model.failed"):
    code: str
    message: str
    retryable: bool = False
    status: int | None = None
    # What the failed request used, when the provider answered in full (an answer the log could
    # not hold: RESPONSE_NOT_RECORDED) or in part (a stream cut or failed after it began: the
    # counts reported by then, the others unknown); it counts in the session's usage.
    usage: Usage | None = None
    # A request the user aborted (code ABORTED), or that failed (the provider's error, a stream
    # dropped or stalled, any ProviderError), while its answer streamed, or whose whole answer the
    # log refused (RESPONSE_NOT_RECORDED): the answer's visible text streamed by then, as the user
    # saw it ("": none, or only white space, reasoning or tool calls had streamed; and for a
    # failure before the answer began), cut to fit the event. The fold keeps it as an
    # assistant item marked ``aborted`` (ABORTED) or ``failed`` (any other code): it stays in
    # the conversation and the next request sends it.
    partial_text: str = ""


class ModelCutOff(_Event, tag="model.cut_off"):
    """A model request that a graceful stop of the daemon cut off after the provider had begun
    answering: what the provider had reported by then (that much was paid for; the counts not
    reported are unknown). The request stays open: the next start asks it again, as after any
    restart. It counts in the session's usage and changes nothing else."""

    usage: Usage
    reason: str = "Lens was stopped while the model answered"


# --------------------------------------------------------------------------- tools


class ToolStarted(_Event, tag="tool.started"):
    call_id: str
    name: str
    arguments: str  # JSON text
    replay_safe: bool = False


class ToolFinished(_Event, tag="tool.finished"):
    call_id: str
    name: str
    status: Literal["ok", "error", "interrupted", "skipped", "denied"] = "ok"
    is_error: bool = False
    content: list[ContentPart] = []
    structured_content: Any = None
    error_code: str | None = None
    # Set when the call ran twice: the code its first run ended with (a replay-safe workspace
    # call whose executor child died before it answered, run again on the child spawned in its
    # place: EXECUTOR_UNAVAILABLE). This event holds the second run's result. None: ran once.
    rerun_after: str | None = None


class FileEdited(_Event, tag="file.edited"):
    """What an editing call changed, so ``revert_call`` can restore it exactly."""

    call_id: str
    path: str
    before_artifact_id: str | None = None  # None: the file did not exist
    after_artifact_id: str | None = None  # None: the file was removed
    before_sha256: str | None = None
    after_sha256: str | None = None
    # The tool that made the edit (edit_file, patch_file; a program's call of one names it too),
    # whose workspace allowlist also judges a revert of it. None in logs from before it was kept.
    tool: str | None = None
    # The file the edit wrote: the canonical workspace-relative path ``path`` led to, through the
    # symlinks on its way (``path`` stays as given). revert_call restores this file; through
    # ``path`` only when this is None: in logs from before it was kept, or when the executor
    # could not tell.
    written_path: str | None = None


class FileReverted(_Event, tag="file.reverted"):
    """What ``revert_call`` restored of call ``reverted_call_id``'s edits: ``paths``, one per
    restore, in the order restored (the call's edits last first)."""

    call_id: str
    reverted_call_id: str
    paths: list[str] = []
    # False: the whole call was reverted; the state drops every edit of it (every file.reverted
    # recorded before this was kept is one). True: the revert stopped part way (a restore refused,
    # the call cut off) and restored ``paths`` alone, the call's last ``len(paths)`` edits; the
    # state keeps the others (``projections.session_state.take_reverted``).
    partial: bool = False


class ArtifactStored(_Event, tag="artifact.stored"):
    artifact_id: str
    sha256: str
    mime: str
    size: int
    source: str = ""


# --------------------------------------------------------------------------- skills & capabilities


class SkillLoaded(_Event, tag="skill.loaded"):
    """A snapshot of the skill's instructions, appended after the tool-result batch."""

    name: str
    instructions: str
    base_dir: str = ""
    digest: str = ""
    call_id: str | None = None


class SkillUnloaded(_Event, tag="skill.unloaded"):
    name: str
    call_id: str | None = None


class CapabilityLoaded(_Event, tag="capability.loaded"):
    capability_ids: list[str]
    call_id: str | None = None


class InstructionAppended(_Event, tag="instruction.appended"):
    """A system instruction added later in history; it keeps its real position."""

    text: str
    source: str = ""


# --------------------------------------------------------------------------- context edits


class ContextEdited(_Event, tag="context.edited"):
    """A Working Context edit; the Full Context is never rewritten."""

    op: Literal["snip", "include_result", "unsnip", "prune", "hide", "unhide"]
    item_ids: list[str]
    reason: str = ""


class ContextCompacted(_Event, tag="context.compacted"):
    """A summary that replaces ``replaced_item_ids`` in the Working Context (the Full Context keeps
    them). The ids include the items the user hid or snipped that stand among the rest, which stay
    replaced when put back (older events may name only the Working Context's). ``usage`` is the
    summarizing request's, counted in the session's usage."""

    summary: str
    replaced_item_ids: list[str]
    trigger: Literal["manual", "auto"] = "manual"
    usage: Usage = Usage()
    provider: str = ""  # the summarizing request's provider and model ("": not recorded)
    model: str = ""


class ContextCompactionFailed(_Event, tag="context.compaction_failed"):
    """A summarizing request the provider answered whose answer did not become a compaction (no
    text, cut off at the output limit, refused, or the context moved on meanwhile), or one that
    failed before any answer (manual or automatic): the Working Context is unchanged; ``usage`` is
    what the request used, counted in the session's usage (``None``: no answer, nothing counted)."""

    code: str
    message: str
    trigger: Literal["manual", "auto"] = "manual"
    usage: Usage | None = Usage()
    provider: str = ""
    model: str = ""


# --------------------------------------------------------------------------- harness


class TodoUpdated(_Event, tag="todo.updated"):
    items: list[TodoItem]
    call_id: str | None = None


class QuestionAsked(_Event, tag="question.asked"):
    question_id: str
    questions: list[Question]
    call_id: str | None = None


class QuestionAnswered(_Event, tag="question.answered"):
    question_id: str
    answer: dict[str, Any]


class QuestionCancelled(_Event, tag="question.cancelled"):
    question_id: str
    reason: str = ""


class JobStarted(_Event, tag="job.started"):
    job_id: str
    command: str
    call_id: str | None = None


class JobFinished(_Event, tag="job.finished"):
    """A background job ended: ``exited`` by itself (any exit code), ``crashed`` (killed by a
    signal it did not get from Lens, or its executor stream failed), ``stopped`` (by a stop or its
    timeout) or ``lost`` (Lens restarted while it ran; how its command ended was not recorded)."""

    job_id: str
    status: Literal["exited", "crashed", "stopped", "lost"] = "exited"
    exit_code: int | None = None
    output_tail: str = ""
    reason: str = ""  # why it was stopped, crashed or lost (empty when it exited by itself)
    # A job a graceful stop ended: its output as the daemon held it (at most the last 1 MiB,
    # scrubbed, UTF-8), saved as an artifact when it is longer than the tail; and how many bytes
    # of output came before what was saved (no longer held by then).
    output_artifact_id: str | None = None
    output_dropped: int = 0
    # Where ``output_tail`` begins in the whole output, in bytes the job printed (None: not known —
    # a job recorded lost, or an event written before Lens recorded it). A read once the daemon
    # holds the output no longer places the tail there: offsets of the whole output.
    output_tail_start: int | None = None


class ConfigChanged(_Event, tag="config.changed"):
    """A config file written through the API; only its name and digest, never its text."""

    name: str
    digest: str


class DefaultModelSet(_Event, tag="default_model.set"):
    """The saved default model (F-MOD-5: between ``--model`` and config ``defaultModel``), set
    by a client (``PUT /models/default``) as ``"<provider id>/<model id>"``, or cleared
    (``None``). No project, session or agent: the daemon's own. The latest one is in effect."""

    model: str | None


# --------------------------------------------------------------------------- the union

Event = Union[
    ProjectCreated,
    SessionCreated,
    SessionConfigured,
    SessionNamed,
    SessionDeleted,
    SessionQuarantined,
    AgentStarted,
    AgentFinished,
    TaskStarted,
    TaskFinished,
    InputSubmitted,
    InputPlaced,
    InputWithdrawn,
    InputRequeued,
    RunAborted,
    ModelRequested,
    ModelResponded,
    ModelFailed,
    ModelCutOff,
    ToolStarted,
    ToolFinished,
    FileEdited,
    FileReverted,
    ArtifactStored,
    SkillLoaded,
    SkillUnloaded,
    CapabilityLoaded,
    InstructionAppended,
    ContextEdited,
    ContextCompacted,
    ContextCompactionFailed,
    TodoUpdated,
    QuestionAsked,
    QuestionAnswered,
    QuestionCancelled,
    JobStarted,
    JobFinished,
    ConfigChanged,
    DefaultModelSet,
]

EVENT_TYPES: tuple[type[_Event], ...] = Event.__args__  # type: ignore[attr-defined]

KIND_TO_TYPE: dict[str, type[_Event]] = {t.__struct_config__.tag: t for t in EVENT_TYPES}

# What a kind a newer Lens writes can be: a short dotted tag (ours are lowercase snake words
# joined by dots), never whitespace or a control character. A kind goes out as it is (the SSE
# ``event:`` line), so a row whose kind is anything else is damaged, not an event of the
# future: a line break in it wrote fields of its own into every stream replaying it.
KIND_MAX = 128  # characters
KIND_NAME_RE = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.:-]{{0,{KIND_MAX - 1}}}")


class Opaque(msgspec.Struct, frozen=True, gc=False):
    """An event of a kind this build does not know; its body is kept as plain data."""

    kind: str
    data: Any


def kind_of(event: _Event | Opaque) -> str:
    """The stable tag of ``event``."""
    if isinstance(event, Opaque):
        return event.kind
    return type(event).__struct_config__.tag  # type: ignore[return-value]


def body_of(event: _Event | Opaque) -> Any:
    """The event body as plain JSON-able data, without the ``kind`` tag."""
    if isinstance(event, Opaque):
        data = event.data
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if k != "kind"}
        return data
    # Every field, defaults included: storage omits defaults, readers should not have to know them.
    fields = {name: getattr(event, name) for name in event.__struct_fields__}
    try:
        return msgspec.to_builtins(fields, str_keys=True)
    except (TypeError, ValueError):
        # An `Any` field of a hand-made or damaged row can hold what JSON has no form for (an
        # extension value, a map key that is an array or nil): shown as in an opaque body.
        from .codec import _jsonable

        return msgspec.to_builtins(_jsonable(fields), str_keys=True)
