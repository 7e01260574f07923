"""The tool-runner interface every tool family plugs into.

A tool is a :class:`ToolSpec` (name, JSON schema, who may call it, whether a replay is safe)
plus an async ``run(args, ctx) -> ToolResult``. Failures are results, not exceptions: a tool
raises :class:`ToolError` (stable code, message) and the runner turns it into an error result
the model sees. Tools never touch the log: a result may carry ``events`` (e.g. ``todo.updated``)
that the session actor records.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, ClassVar, Mapping, Sequence

from events import types as t
from events.secrets import Secrets
from projections.session_state import HeldSkill

from .integer_arguments import integers_as_int
from .json_values import json_kind, lone_surrogate, scalars


class ToolError(Exception):
    """A tool failure the model should see; ``code`` is stable (UPPER_SNAKE)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ToolContext:
    """Who is calling: the session, the agent (main or subagent) and the call."""

    project_id: str | None
    session_id: str
    agent_id: str
    task_id: str | None
    call_id: str
    is_main_agent: bool
    # Runs a subagent to completion; returns (status, final text). Provided by the actor.
    start_subagent: Callable[[str, Sequence[str] | None], Awaitable[tuple[str, str]]] | None = None
    # The file.edited records of an earlier call of this session not yet reverted (for revert_call).
    file_edits: Callable[[str], list[t.FileEdited]] | None = None
    # Whether a call of this session is still running (``tool.started`` without
    # ``tool.finished``), for revert_call: its edits are not all made yet. Provided by the actor.
    call_running: Callable[[str], bool] | None = None
    # Asks the user (ask_user); returns the settled record {question_id, status, answer | reason}.
    ask: Callable[[list[t.Question]], Awaitable[dict[str, Any]]] | None = None
    # The session's background jobs (runtime.jobs.SessionJobs), for the ``job`` tool.
    jobs: Any = None
    # The skills loaded for this agent (and those whose load waits for the end of the round):
    # name -> the SHA-256 of the SKILL.md loaded ("" when not known) and the directory it was
    # loaded from (``projections.session_state.HeldSkill``). Provided by the actor.
    loaded_skills: Callable[[], Mapping[str, HeldSkill]] | None = None
    # The tools assigned to this agent (a subagent's ``tools``; None: every tool it may see) and
    # the deferred capabilities it has loaded (``capability.loaded``). Provided by the actor.
    agent_tools: Sequence[str] | None = None
    loaded_capabilities: Callable[[], Sequence[str]] | None = None
    # Those of them loaded since the agent's last model request (by an earlier call of the answer
    # this call is part of, or of its program): that request did not offer them, they are callable
    # from the next one (F-TOOL-3). Provided by the actor.
    capabilities_loading: Callable[[], Sequence[str]] | None = None
    # Runs another of this agent's tools as a sub-call of this one (``programmatic_tool_run``):
    # ``call_tool(call_id, name, args)`` with the sub-call's own id (``<call_id>.<n>``), through
    # the same registry, catalog planes and policy as a native call; a failure comes back as an
    # error result. The result's events are filed under this call's id; the file edits and
    # artifacts among them are recorded by the actor as the sub-call returns and not passed back.
    # A fourth argument (None: nothing kept) is the sub-call's ``cut_output``, which takes what
    # it had produced when an abort cut it off. Provided by the actor.
    call_tool: Callable[..., Awaitable["ToolResult"]] | None = None
    # The session's saved ``toolPolicy`` (runtime overrides of the execution policy), so that
    # ``capability_search`` leaves out the tools it disables. Provided by the actor.
    tool_policy: Mapping[str, Any] | None = None
    # The workspace allowlist (F-TOOL-2) in effect for this call, None: no allowlist. The
    # execution plane checks a path's text before the call; a workspace tool also checks, under
    # the execution-domain lock, where the path leads once symlinks are followed. Provided by the
    # actor.
    workspace_allowlist: Sequence[str] | None = None
    # The workspace allowlist in effect for another tool of this session (None: none), so that
    # ``revert_call`` also applies the allowlist of the tool that made an edit. Provided by the actor.
    allowlist_of: Callable[[str], Sequence[str] | None] | None = None
    # The keys the daemon knows (F-MOD-6): text a tool cuts to a limit is scrubbed before the
    # cut (``Secrets.cut``), or, cut where no key is known (the executor), mended after it
    # (``Secrets.mend``). Provided by the actor.
    secrets: Secrets = field(default_factory=Secrets)
    # Takes what a call cut off by an abort had produced: ``run_command`` hands it the output
    # printed before the abort (its text, whether it was truncated, and how the command ended:
    # a ``tools.command_output.CommandEnd``, None when no exit came) as it is cancelled, and the
    # abort's ``tool.finished`` keeps it. ``programmatic_tool_run`` hands it what its program
    # printed, and a ``tools.ptc.tool.ProgramCut`` (its calls and the command it was in) in
    # place of the end. Provided by the actor; None: nothing is kept.
    cut_output: Callable[[str, bool, Any], None] | None = None
    # Takes what a call cut off (by an abort, a program's time limit) did all the same: an edit
    # that completed on the executor while its caller was being cancelled hands it its
    # ``artifact.stored`` copies and ``file.edited``, which whatever records the call's
    # ``tool.finished`` (the abort, the program's result) records after it, in the same write;
    # and the paths of such edits whose copies could not be stored (no event: the result says
    # them changed, not undoable). Provided by the actor; None: nothing is kept.
    cut_events: Callable[[list[t._Event], list[str]], None] | None = None
    # The log's check of an event it is to record (its codec's ``pack_checked``: raises
    # ``AppendRejected``), so that a tool can tell what the log could never hold (the ``skill``
    # tool: instructions past ``log.maxEventBytes``). Provided by the actor; None: not checked.
    recordable: Callable[[t._Event], object] | None = None
    # The Full Context item of the call (``c<seq>.<n>``), which ``history_search`` leaves out of
    # its results: the call holds the query and is in the Full Context before it runs. For a
    # program's sub-call, the program's call (a sub-call is no item of its own). Provided by the
    # actor; None: none known (nothing is left out).
    call_item_id: str | None = None
    # The call runs again under its id, on purpose: a replay-safe call the session's restart runs
    # once more (``decide.RunCall.restart``). Its executor calls say so, and the executor does not
    # refuse them for a ``Stop`` that gave up an earlier run of the call. Provided by the actor.
    rerun: bool = False


@dataclass(frozen=True)
class ToolResult:
    content: list[t.ContentPart] = field(default_factory=list)
    structured_content: Any = None
    is_error: bool = False
    error_code: str | None = None
    events: list[t._Event] = field(default_factory=list)
    # The code a first run of the call ended with before it ran once more (a replay-safe
    # workspace call whose executor child died under it: EXECUTOR_UNAVAILABLE); None: run once.
    rerun_after: str | None = None

    @classmethod
    def text(cls, text: str, structured: Any = None, **kw: Any) -> "ToolResult":
        return cls([t.TextPart(text)], structured, **kw)

    @classmethod
    def error(cls, code: str, message: str) -> "ToolResult":
        return cls([t.TextPart(f"{code}: {message}")], {"error": {"code": code, "message": message}},
                   is_error=True, error_code=code)

    @property
    def error_message(self) -> str | None:
        """An error result's message alone, without its code (the structured ``error`` whose
        ``code`` is the result's ``error_code``, as :meth:`error` makes it); None for any other
        result (a tool's own output holding an ``error`` key included)."""
        if not self.is_error or self.error_code is None:
            return None
        error = self.structured_content.get("error") if isinstance(self.structured_content, dict) else None
        if not isinstance(error, dict) or error.get("code") != self.error_code:
            return None
        message = error.get("message")
        return message if isinstance(message, str) else None

    def message_scrubbed(self, secrets: Secrets, sent: Secrets | None = None) -> "ToolResult":
        """This result, when it is an :meth:`error`'s, with its message without ``secrets``
        whole (``Secrets.scrub_text``), and without the pieces of ``sent`` (the keys the call's
        arguments hold whole, ``Secrets.sent_whole``): a message may quote the arguments cut to
        a limit. The pieces of any other key stay: the arguments are text a client may choose
        (``/tool``), and an error that changed as they agreed with a key for longer would tell
        it how far a guess matched. A tool that quotes the daemon's own text cut to a limit (a
        path the file system resolved, a SKILL.md's line) replaces whole keys before it cuts
        (``ToolContext.secrets``, ``Secrets.cut``). Any other result (a tool's output, which the
        store scrubs) is returned as it is."""
        message, code = self.error_message, self.error_code
        if not secrets or message is None or set(self.structured_content["error"]) != {"code", "message"}:
            return self
        if self.content != [t.TextPart(f"{code}: {message}")]:
            return self
        clean = secrets.scrub_text(message)
        if sent:
            clean = sent.scrub_message(clean)
        return self if clean == message else dataclasses.replace(ToolResult.error(code, clean), events=self.events,
                                                                 rerun_after=self.rerun_after)


ToolFn = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]
# What a call of a tool that is not replay-safe, cut off by the daemon's stop or a crash, did all
# the same: asked by the session's restart as it records the call interrupted (it never runs
# again), given the call's arguments as the model's JSON text; the events it returns (never
# raises for the executor's failures: it logs them) are recorded after the call's interrupted
# ``tool.finished``, in the same write.
CompletedFn = Callable[[str, ToolContext], Awaitable[list[t._Event]]]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]
    run: ToolFn
    main_only: bool = False  # withheld from subagents and re-checked at execution
    replay_safe: bool = False  # may be re-run after a crash interrupted it
    read_only: bool = True
    source: str = "native"  # where it comes from (tools/catalog.py SOURCES): "native" | "mcp"
    # The catalog plane (tools/catalog.py): current | compat | dead-candidate.
    lifecycle: str = "current"
    # The context plane: a deferred tool stays out of the model's tool list until the agent loads
    # it with ``capability_search`` (config ``tools.deferred`` / ``tools.eager`` can change this).
    deferred: bool = False
    # Example argument objects (the context plane's): sent to the model after the description
    # (:meth:`offered_description`), shown by ``capability_search`` and in the inventory.
    input_examples: tuple[dict[str, Any], ...] = ()
    # For a tool that is not replay-safe: what a call of it cut off before a restart completed
    # (:data:`CompletedFn`; ``revert_call``: its restores). None: nothing is asked.
    completed_when_interrupted: CompletedFn | None = None

    def schema(self) -> dict[str, Any]:
        """The tool as model requests offer it (providers send the name under its F-MOD-3 alias)."""
        return {"name": self.name, "description": self.offered_description(), "input_schema": self.input_schema}

    def offered_description(self) -> str:
        """The tool's description with its input examples after it, one JSON object a line (no
        protocol has a portable field for them): what :meth:`schema` offers. A provider sends it
        as it is for a tool under its own name; one sent under an F-MOD-3 alias is prefixed with
        its capability id (``runtime.providers.names.describe``, which the inventory's
        ``offeredDescription`` applies too)."""
        if not self.input_examples:
            return self.description
        examples = "\n".join(json.dumps(e, ensure_ascii=False) for e in self.input_examples)
        return f"{self.description}\n\nInput examples:\n{examples}"


class ToolRegistry:
    """The tools a session may use, by name."""

    # The bound on a call's arguments as the model's JSON text, before it is parsed. JSON may spell
    # one byte of text in six (`\u0001`; a newline in two): 16 MiB refused 8 MiB of newlines, an
    # input the file tools take (tools/files/errors.py MAX_TEXT_BYTES). 64 MiB holds the file
    # tools' 8 MiB however it is escaped (48 MiB at most), as the executor's messages do.
    MAX_ARGUMENT_BYTES: ClassVar[int] = 64 * 1024 * 1024

    def __init__(self, specs: Sequence[ToolSpec] = ()) -> None:
        self._specs: dict[str, ToolSpec] = {}
        self._version = 0  # (see :attr:`version`)
        # Asked about a call to a name the registry does not hold (an MCP server's tool while the
        # server is down): an error result to answer with, or None for TOOL_UNKNOWN.
        self.on_unknown: Callable[[str], ToolResult | None] | None = None
        for s in specs:
            self.add(s)

    def add(self, spec: ToolSpec) -> None:
        if spec.name in self._specs:
            raise ValueError(f"tool {spec.name!r} registered twice")
        self._specs[spec.name] = spec
        self._version += 1

    @property
    def version(self) -> int:
        """A number that changes whenever a tool is added or removed: what is worked out from the
        set of tools can be kept while it stays the same."""
        return self._version

    def remove(self, name: str) -> None:
        """Withdraw a tool added at run time (MCP). A call already running finishes; later calls
        and model requests no longer see it. Replay-safe tools are never removed: sessions cache
        that set when they start."""
        spec = self._specs.get(name)
        if spec is not None:
            if spec.replay_safe:
                raise ValueError(f"tool {name!r} is replay-safe: sessions cache that set, so it stays")
            del self._specs[name]
            self._version += 1

    def get(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def visible(self, *, is_main_agent: bool, allowed: Sequence[str] | None = None) -> list[ToolSpec]:
        """Tools offered to an agent: main-only tools are withheld from subagents."""
        out = [s for s in self._specs.values() if is_main_agent or not s.main_only]
        if allowed:
            out = [s for s in out if s.name in allowed]
        return out

    def all(self) -> list[ToolSpec]:
        """Every registered tool, in registration order."""
        return list(self._specs.values())

    async def run(self, name: str, arguments: str, ctx: ToolContext, *,
                  allowed: Sequence[str] | None = None,
                  check: Callable[[ToolSpec, dict[str, Any]], ToolResult | None] | None = None) -> ToolResult:
        """Run one call; every failure comes back as an error result, never as an exception.
        ``check`` (the context and execution planes, tools/catalog.py) sees the decoded arguments
        first and may answer with an error result instead of running the tool; its ``absent``
        (when it has one) judges a name ``on_unknown`` answers for (a down MCP server's tool)
        before that answer is given. An error's message
        leaves without ``ctx.secrets`` whole, and without pieces of those ``arguments`` hold whole
        (:meth:`ToolResult.message_scrubbed`)."""
        result = await self._run(name, arguments, ctx, allowed=allowed, check=check)
        if not result.is_error or not ctx.secrets:
            return result
        return result.message_scrubbed(ctx.secrets, ctx.secrets.sent_whole(arguments))

    async def _run(self, name: str, arguments: str, ctx: ToolContext, *, allowed: Sequence[str] | None,
                   check: Callable[[ToolSpec, dict[str, Any]], ToolResult | None] | None) -> ToolResult:
        spec = self._specs.get(name)
        if spec is None and self.on_unknown is not None and not (allowed and name not in allowed):
            answer = self.on_unknown(name)
            if answer is not None:
                # (the planes first, as for a tool that is there: a tool the policy disables, or
                # deferred and not loaded, is refused so whatever its server's state, which the
                # refusal adds)
                absent = getattr(check, "absent", None)
                refused = absent(name) if absent is not None else None
                if refused is not None and refused.error_code is not None:
                    return ToolResult.error(refused.error_code, f"{refused.error_message} ({answer.error_message})")
                return answer
        if spec is None or (allowed and name not in allowed):
            return ToolResult.error("TOOL_UNKNOWN", f"no tool named {name!r} is available to this agent")
        if spec.main_only and not ctx.is_main_agent:
            return ToolResult.error("TOOL_MAIN_ONLY", f"{name} is available to the main agent only")
        if len(arguments.encode("utf-8", "surrogatepass")) > self.MAX_ARGUMENT_BYTES:
            return ToolResult.error("TOOL_ARGUMENTS_TOO_LARGE", f"{name} arguments exceed {self.MAX_ARGUMENT_BYTES} bytes")
        # What is wrong with arguments that are no JSON object is said, and what the model sent is
        # quoted: later requests send such a call back with empty arguments (servers refuse
        # arguments that are not JSON), so this result is where the model sees its mistake.
        try:
            args = json.loads(arguments, parse_constant=_not_json) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return _invalid(name, arguments, f"are not valid JSON ({exc.msg} at character {exc.pos})", exc.pos)
        except ValueError as exc:  # e.g. an integer of more than 4300 digits, NaN
            return _invalid(name, arguments, f"are not usable JSON ({str(exc)[:200]})")
        except RecursionError:
            return _invalid(name, arguments, "are nested too deeply")
        if not isinstance(args, Mapping):
            return _invalid(name, arguments, f"must be a JSON object, not {json_kind(args)}")
        problem = _unrecordable(args)
        if problem is not None:
            return _invalid(name, arguments, problem)
        args = integers_as_int(spec.input_schema, args)
        if check is not None:
            refused = check(spec, dict(args))
            if refused is not None:
                return refused
        try:
            return await spec.run(dict(args), ctx)
        except ToolError as exc:
            return ToolResult.error(exc.code, exc.message)
        # Any other exception is a defect: it crashes the session's actor, which the supervisor
        # restarts from the log (the call is re-run if replay-safe, else reported interrupted).


INT64 = (-(2**63), 2**63 - 1)


QUOTE_CHARS = 300  # how many characters of unusable arguments an error result quotes


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _invalid(name: str, arguments: str, problem: str, pos: int | None = None) -> ToolResult:
    """``INVALID_ARGUMENT``: the problem, then the arguments quoted (at most
    :data:`QUOTE_CHARS` characters, around ``pos`` when given: where a parser stopped)."""
    n = len(arguments)
    if n <= QUOTE_CHARS:
        start, end, where = 0, n, ""
    else:
        start = 0 if pos is None else max(0, min(pos - QUOTE_CHARS * 2 // 3, n - QUOTE_CHARS))
        end = start + QUOTE_CHARS
        where = f" (characters {start} to {end} of {n})"
    # (a lone surrogate from a program's call cannot be recorded: it becomes U+FFFD here)
    piece = arguments[start:end].encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    quoted = ("…" if start else "") + json.dumps(piece, ensure_ascii=False) + ("…" if end < n else "")
    return ToolResult.error("INVALID_ARGUMENT", f"{name} arguments {problem}; received{where}: {quoted}")


def _unrecordable(value: Any) -> str | None:
    """What in decoded JSON arguments the event log cannot record, or ``None``: a lone UTF-16
    surrogate in a string or key (from a ``\\ud800`` escape: not encodable as UTF-8) or an integer
    outside 64 bits (MessagePack holds no more). Tools echo their arguments into results and
    events, so such a value would fail the append and crash the session's actor instead."""
    for v in scalars(value):
        if isinstance(v, str):
            at = lone_surrogate(v)
            if at is not None:
                return f"contain a lone surrogate ({v[at]!r}); send text as valid Unicode"
        elif isinstance(v, int) and not isinstance(v, bool) and not INT64[0] <= v <= INT64[1]:
            digits = str(v)
            return f"contain an integer outside 64 bits ({digits[:40]}{'…' if len(digits) > 40 else ''})"
    return None
