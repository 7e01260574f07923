"""``programmatic_tool_run`` — the PTC entry (F-TOOL-3).

The model passes a program in a small subset of Python (:mod:`tools.ptc.interpreter`, described
in ``docs/ptc.md``) that calls the agent's other tools as functions, loops over and filters what
they return and prints what the model should see. Only the printed output, the images the calls
returned and one line per call come back as the result: the intermediate results never enter the
context, and the program runs inside the daemon without ``exec`` (the interpreter walks the
syntax tree over plain data).

Each call goes through the actor (``ToolContext.call_tool``): the same registry, catalog planes
(a deferred tool must be loaded first) and execution policy as a native call, with its own call
id ``<call_id>.<n>``. What the calls record is recorded under this call's id, so ``revert_call``
of the program's call reverts every edit its calls made, last first: file edits, reverts and
the artifacts they keep as each call returns (an abort or a crash mid-program loses none), the rest
(a loaded capability) with this call's ``tool.finished``. The tool is not replay-safe: a crash
while a program runs reports the call interrupted, as for any other such tool.

An abort while a program runs hands the actor (``ToolContext.cut_output``) what the program had
printed, its calls' lines and, when the call it was in was a ``run_command``, what that command
printed and how it ended (the command is stopped through the executor's ``Stop`` as a direct one
is): the abort's ``tool.finished`` of this call keeps them (``runtime.decide.aborted_call_content``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import msgspec
import trio

from events import types as t

from ..base import ToolContext, ToolError, ToolResult, ToolSpec
from ..catalog import NOT_FROM_PROGRAMS, PTC, ToolCatalog
from ..command_output import CommandEnd
from ..workspace_tools import int_arg
from .interpreter import Limits, Outcome, ToolCallFailed, run_program

DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
MAX_IMAGES = 20  # images the calls returned that go along with the result (each costs ~4k tokens)
WARNING_PREFIX = "[policy warning:"


@dataclass(frozen=True)
class ProgramCut:
    """What a program the abort cut off had done besides printing (the printed text goes as
    ``cut_output``'s text): one line per call (as its result's ``calls``; the call it was in
    is ``ok: false``, ``ABORTED``), and, when that call was a ``run_command``, the call's id,
    the output it printed, whether it was truncated, and how the command ended (None: no exit
    came within the abort's wait)."""

    calls: list[dict[str, Any]]
    command_call_id: str | None = None
    command_output: str = ""
    command_truncated: bool = False
    command_end: CommandEnd | None = None


def _text_of(result: ToolResult) -> str:
    return "\n".join(p.text for p in result.content if isinstance(p, t.TextPart))


def _value_of(result: ToolResult) -> Any:
    """What a call gives the program: its structured content, else its text."""
    if result.structured_content is not None:
        # (plain data for the interpreter: tuples become lists, structs dicts)
        return msgspec.to_builtins(result.structured_content)
    return _text_of(result)


def _failure_of(result: ToolResult) -> ToolCallFailed:
    message = result.error_message
    if message is None:  # (an error result not made by ToolResult.error: its text, less its code)
        message = _text_of(result)
        prefix = f"{result.error_code}: "
        if result.error_code and message.startswith(prefix):
            message = message[len(prefix):]
    return ToolCallFailed(result.error_code or "TOOL_FAILED", message)


async def _run(catalog: ToolCatalog, args: dict[str, Any], ctx: ToolContext,
               checking: trio.CapacityLimiter) -> ToolResult:
    extra = set(args) - {"code", "timeout_ms"}
    code = args.get("code")
    if extra or not isinstance(code, str):
        raise ToolError("INVALID_ARGUMENT", f"{PTC} takes {{code, timeout_ms?}}"
                        + (f" (unknown: {', '.join(sorted(extra))[:200]})" if extra else ""))
    timeout = int_arg(args, "timeout_ms", DEFAULT_TIMEOUT_MS, 1, MAX_TIMEOUT_MS)  # (null: the default)
    if ctx.call_tool is None:
        raise ToolError("PTC_UNAVAILABLE", f"{PTC} cannot run here (no tool runner was given to it)")
    # Every tool the catalog knows is a function of the program: the registry's, also one the
    # agent cannot call (a main-only tool in a subagent's program, say), and the tools a down MCP
    # server listed last. Calls are checked as they run, so such a call fails with the typed error
    # call_tool("name", ...) gets, not as a name never defined. The same ids are those an alias is
    # mapped back to, so a call of a down tool's alias is listed under its id, as the model's own
    # calls are.
    names = sorted(catalog.names.known_names())
    limits = Limits()  # (run_program checks the program before it runs: parsed once)

    calls: list[dict[str, Any]] = []
    images: list[t.ImagePart] = []
    events: list[t._Event] = []
    warnings: list[str] = []
    call_tool = ctx.call_tool
    # (the command an abort cut off: its call id, output, truncation and end, as run_command
    # hands them to its context's cut_output)
    cut_command: list[tuple[str, str, bool, Any]] = []

    async def call(name: str, arguments: dict[str, Any]) -> Any:
        name = catalog.names.ids_for([name])[0]  # (a tool's alias, as the model is offered it, is that tool)
        sub_id = f"{ctx.call_id}.{len(calls) + 1}"
        entry: dict[str, Any] = {"call_id": sub_id, "name": name}
        calls.append(entry)

        def cut(text: str, truncated: bool, ended: Any = None) -> None:
            cut_command[:] = [(sub_id, text, truncated, ended)]

        result = await call_tool(sub_id, name, arguments, cut if ctx.cut_output is not None else None)
        entry["ok"] = not result.is_error
        if result.is_error:
            entry["error_code"] = result.error_code
        if result.rerun_after is not None:  # (ran twice: its executor died under the first run)
            entry["rerun_after"] = result.rerun_after
        for part in result.content:
            if isinstance(part, t.ImagePart) and len(images) < MAX_IMAGES:
                images.append(part)
            elif isinstance(part, t.TextPart) and part.text.startswith(WARNING_PREFIX) and part.text not in warnings:
                warnings.append(part.text)
        events.extend(result.events)  # (already under this call's id: ToolContext.call_tool)
        # What the program sees is scrubbed first: its output and its messages are cut to
        # limits (Limits.max_output_bytes, a repr's 200 characters) that could split a key.
        if ctx.secrets:
            result = dataclasses.replace(result, content=ctx.secrets.scrub_structs(result.content, t.ContentPart),
                                         structured_content=ctx.secrets.scrub(msgspec.to_builtins(result.structured_content)))
        if result.is_error:
            raise _failure_of(result)
        return _value_of(result)

    def cut_off(so_far: Outcome) -> None:
        if ctx.cut_output is None:
            return
        lines = [dict(entry) for entry in calls]
        for entry in lines:  # (the call the abort cut off: it never returned)
            if "ok" not in entry:
                entry.update(ok=False, error_code="ABORTED")
        cut = ProgramCut(lines)
        if cut_command:
            sub_id, text, truncated, ended = cut_command[0]
            cut = ProgramCut(lines, sub_id, text, truncated, ended)
        ctx.cut_output(so_far.output, so_far.truncated, cut)

    outcome = await run_program(code, call, names, limits, deadline=trio.current_time() + timeout / 1000,
                                limiter=checking, on_cancelled=cut_off)
    error = (outcome.error.code, outcome.error.message) if outcome.error is not None else None
    for entry in calls:  # (a call the run's end cut off, its time limit: it never returned)
        if "ok" not in entry:
            entry.update(ok=False, error_code=error[0] if error is not None else "CANCELLED")
    structured: dict[str, Any] = {"calls": calls, "steps": outcome.steps, "output_truncated": outcome.truncated}
    if error is not None and error[0] == "PTC_TIMEOUT":
        error = (error[0], f"{error[1]} (timeout_ms {timeout})")
    lines = [outcome.output if outcome.output else "(the program printed nothing)"]
    if outcome.truncated:
        lines.append(f"[output cut at {limits.max_output_bytes} bytes]")
    if error is not None:
        structured["error"] = {"code": error[0], "message": error[1]}
        lines.append(f"{error[0]}: {error[1]}")
    lines.extend(warnings)
    if len(images) == MAX_IMAGES:
        lines.append(f"[at most {MAX_IMAGES} images of the calls are shown]")
    return ToolResult([t.TextPart("\n".join(lines)), *images], structured, is_error=error is not None,
                      error_code=error[0] if error is not None else None, events=events)


def ptc_tool(catalog: ToolCatalog) -> ToolSpec:
    """The PTC entry over ``catalog`` (registered when config ``localPtc`` turns it on)."""
    checking = trio.CapacityLimiter(1)  # programs are checked off the trio thread, one at a time

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await _run(catalog, args, ctx, checking)

    return ToolSpec(
        PTC,
        "Run a program that calls your tools: a small subset of Python (assignments, if/for/while, "
        "try/except, comprehensions, f-strings, print; no imports, def, lambda or attributes but common "
        "str/list/dict methods). Each tool is a function taking keyword arguments — read_file(path=\"a.py\") "
        "— or call_tool(\"name\", {...}); it returns the tool's structured result (else its text) and "
        "raises on failure (catch with `except ToolError as e:`, e.code, e.message). Only what the program "
        "print()s comes back to you, so filter there. Deferred tools must be loaded first "
        "(capability_search). Not callable from a program: " + ", ".join(sorted(NOT_FROM_PROGRAMS - {PTC})) + ".",
        {"type": "object", "properties": {
            "code": {"type": "string", "description": "the program"},
            "timeout_ms": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_MS,
                           "description": f"default {DEFAULT_TIMEOUT_MS}"}},
         "required": ["code"], "additionalProperties": False},
        run, read_only=False,
        input_examples=({"code": "for m in history_search(query=\"flaky test\")[\"results\"][:3]:\n    print(m)"},))
