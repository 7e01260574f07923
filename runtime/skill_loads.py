"""How a session actor loads skills (F-TOOL-6): the part of the agent loop that is skill-specific.

* A ``skill`` call's ``skill.loaded`` goes after the round's last tool result: :meth:`SkillLoads.hold`
  keeps it (in memory) while other calls of the round are left; the state remembers the due load
  (``AgentState.skills_due``), and :func:`runtime.decide.next_step` asks for it with
  ``AppendSkills`` once the results are in. :meth:`SkillLoads.due_events` gives what to record
  then: the kept snapshot, or after a restart (memory lost) a fresh read of the skill. An abort
  reads nothing (:meth:`SkillLoads.due_at_abort`): a load whose snapshot is lost is dropped.
* ``/skill:<name> args`` inputs: :meth:`SkillLoads.check_input` refuses one naming no loadable
  skill, or one the tool policy would refuse the model's ``skill`` call of, at submit;
  :meth:`SkillLoads.placing` / :meth:`SkillLoads.before_placing` give the ``skill.loaded`` that
  goes right before the input's ``input.placed`` (or the note saying why it was not loaded).

The skill is read through the session's ``skill`` tool, so discovery has one implementation.
"""

from __future__ import annotations

import json
from typing import Callable, Sequence

import msgspec

from events import types as t
from events.errors import AppendRejected
from events.secrets import Secrets
from projections.session_state import (
    MAIN_AGENT,
    SKILL_COMMAND,
    QueuedInput,
    SessionState,
    SkillDue,
    loaded_skill_states,
    skill_command,
    skill_name_on_its_line,
    text_of,
)
from tools.base import ToolContext, ToolRegistry
from tools.catalog import ToolCatalog

from .agent_tools import session_tool_policy
from .errors import InvalidCommand, SkillUnavailable

SKILL_ERROR_CODES = frozenset({"SKILL_NOT_FOUND", "SKILL_INVALID", "NO_WORKSPACE"})
# What a /skill: input is told after the policy's own refusal of the skill tool's call.
POLICY_REFUSED = "a /skill: command is held to the tool policy as the model's skill calls are"


def load_failed(name: str, call_id: str | None, reason: str) -> list[t._Event]:
    """What is recorded instead of a due load that cannot be made: the model is told, and the
    load is dropped (``skill.unloaded`` for that call)."""
    return [t.InstructionAppended(text=f"Skill \"{name}\" could not be loaded after all ({reason}); its "
                                       "instructions are not in the context.", source=f"skill-load-failed:{name}"),
            t.SkillUnloaded(name=name, call_id=call_id)]


class SkillLoads:
    """``recordable``: raises ``AppendRejected`` for an event the log cannot hold (its codec's
    ``pack_checked``): instructions under the SKILL.md cap may still be over ``log.maxEventBytes``.
    The ``skill`` tool is given it too (``ToolContext.recordable``), so a skill the log could never
    hold is one it cannot load; the check here is for what that leaves (a call id longer than
    ``tools.skills.CALL_ID_ROOM``).

    ``catalog``: the policy planes over ``tools``, whose execution policy a ``/skill:`` input is
    held to as the model's ``skill`` call is (:meth:`ToolCatalog.policy_refusal`)."""

    def __init__(self, tools: ToolRegistry, session_id: str, recordable: Callable[[t._Event], object],
                 secrets: Secrets | None = None, catalog: ToolCatalog | None = None) -> None:
        self._tools = tools
        self._catalog = catalog
        self._secrets = secrets or Secrets()  # (the store's message is cut after they are replaced)
        self._session_id = session_id
        self._recordable = recordable
        self._held: dict[str, t.SkillLoaded] = {}  # call id -> its snapshot, until its round ends

    def _unrecordable(self, ev: t.SkillLoaded) -> str | None:
        """Why ``ev`` cannot be recorded (None: it can)."""
        try:
            self._recordable(ev)
        except AppendRejected as exc:
            return f"its instructions could not be recorded: {self._secrets.cut(exc.message, 300)}"
        return None

    def hold(self, state: SessionState, agent_id: str, call_id: str, events: list[t._Event]) -> list[t._Event]:
        """The events to record with call ``call_id``'s ``tool.finished``: its ``skill.loaded``
        only when the call is the last of its round; otherwise it is held for AppendSkills."""
        pending = [c.call_id for c in state.agents[agent_id].pending_calls]
        if pending == [call_id]:
            out: list[t._Event] = []
            for e in events:
                if isinstance(e, t.SkillLoaded) and (why := self._unrecordable(e)) is not None:
                    out += load_failed(e.name, e.call_id, why)  # (told now, not a result "not recorded")
                else:
                    out.append(e)
            return out
        for e in events:
            if isinstance(e, t.SkillLoaded):
                self._held[call_id] = e
        return [e for e in events if not isinstance(e, t.SkillLoaded)]

    async def due_events(self, state: SessionState, agent_id: str, task_id: str | None,
                         due: Sequence[SkillDue]) -> list[t._Event]:
        """What AppendSkills records for ``due``: each held snapshot, or the skill read again."""
        out: list[t._Event] = []
        for d in due:
            ev = self._held.pop(d.call_id, None)
            if ev is None:
                loaded = loaded_skill_states(state.agents[agent_id], due=False)
                ctx = ToolContext(state.project_id, self._session_id, agent_id, task_id, d.call_id,
                                  agent_id == MAIN_AGENT, loaded_skills=lambda: loaded, recordable=self._recordable)
                result = await self._tools.run("skill", json.dumps({"name": d.name}), ctx)
                found = [e for e in result.events if isinstance(e, t.SkillLoaded)]
                if not found:
                    out += load_failed(d.name, d.call_id, text_of(result.content) or "no instructions")
                    continue
                ev = found[0]
            why = self._unrecordable(ev)
            out += [ev] if why is None else load_failed(d.name, d.call_id, why)
        return out

    def due_at_abort(self, due: Sequence[SkillDue]) -> list[t._Event]:
        """What an abort records for ``due``: each held snapshot; a load whose snapshot is gone
        (a restart since the call) is dropped with a note to the model (:func:`load_failed`).
        Nothing is read: an abort must not wait for the workspace (a slow or unreachable
        executor, or the execution-domain lock held by a long command)."""
        out: list[t._Event] = []
        for d in due:
            ev = self._held.pop(d.call_id, None)
            out += [ev] if ev is not None else load_failed(
                d.name, d.call_id, "the run was aborted before its instructions were read again after a restart")
        return out

    def _policy_refusal(self, state: SessionState, name: str) -> tuple[str, str] | None:
        """The session's tool policy's refusal of a ``skill`` call loading ``name`` (the config's
        policy under the session's ``toolPolicy``), as its code (``TOOL_DISABLED``,
        ``PARAM_NOT_ALLOWED``) and its message alone: an HTTP error carries the code in a field of
        its own, and a note to the model needs none."""
        spec = self._tools.get("skill")
        if self._catalog is None or spec is None:
            return None
        refused = self._catalog.policy_refusal(spec, {"name": name}, session_tool_policy(state))
        if refused is None:
            return None
        return refused.error_code or "TOOL_DISABLED", refused.error_message or text_of(refused.content)

    def _refuse_by_policy(self, state: SessionState, name: str) -> None:
        """Raise the policy's refusal (:meth:`_policy_refusal`) as a ``/skill:`` input's error (422)."""
        refused = self._policy_refusal(state, name)
        if refused is not None:
            raise SkillUnavailable(refused[0], f"{refused[1]} ({POLICY_REFUSED})")

    async def _for_input(self, state: SessionState, name: str, request_id: str, *, refuse: bool) -> t._Event:
        """A fresh ``skill.loaded`` for a ``/skill:<name>`` input. When the skill cannot be loaded:
        ``refuse`` raises ``SKILL_NOT_FOUND`` / ``SKILL_INVALID`` / ``NO_WORKSPACE`` (422) or
        ``SKILL_UNAVAILABLE`` (503); otherwise an instruction telling the model so. The tool
        policy comes first (:meth:`_policy_refusal`): when it refuses, nothing is read."""
        if refuse:
            self._refuse_by_policy(state, name)
        elif (refused := self._policy_refusal(state, name)) is not None:
            return load_failed(name, None, refused[1])[0]  # (a note, no load to drop)
        ctx = ToolContext(state.project_id, self._session_id, MAIN_AGENT, None, f"input:{request_id}", True,
                          loaded_skills=dict, recordable=self._recordable)
        result = await self._tools.run("skill", json.dumps({"name": name}), ctx)
        for e in result.events:
            if isinstance(e, t.SkillLoaded):
                why = self._unrecordable(e)
                if why is None:
                    return msgspec.structs.replace(e, call_id=None)
                if refuse:
                    raise SkillUnavailable("SKILL_INVALID", f"skill {name!r} ({e.base_dir}/) cannot be loaded: {why}")
                return load_failed(name, None, why)[0]
        message = text_of(result.content) or f"skill {name!r} cannot be loaded"
        if refuse:
            code = result.error_code or "SKILL_NOT_FOUND"
            raise SkillUnavailable(code if code in SKILL_ERROR_CODES else "SKILL_UNAVAILABLE",
                                   result.error_message or message)
        return load_failed(name, None, message)[0]

    @staticmethod
    def command_name(content: list[t.ContentPart]) -> str | None:
        """The skill a ``/skill:`` input names (``None`` for other inputs): the first word of its
        line, blanks after the colon skipped (``/skill: review`` names ``review``), the line ended by any
        line break ``str.splitlines`` reads; ``INVALID_ARGUMENT`` for ``/skill:`` without a name on
        its line. Reads nothing."""
        first = content[0] if content else None
        if not isinstance(first, t.TextPart) or not first.text.startswith(SKILL_COMMAND):
            return None
        command = skill_command(content)
        # (a new input is held to the stricter line: any line break str.splitlines reads ends it;
        # inputs already in the log are still folded by skill_command, whose reading they got)
        if command is None or skill_name_on_its_line(first.text) is None:
            raise InvalidCommand("/skill: needs a skill name after it, on its line: /skill:<name> [text]")
        return command[0]

    async def check_input(self, state: SessionState, request_id: str, name: str) -> None:
        """Refuse a ``/skill:<name>`` input that names no loadable skill (it reads the workspace
        under the execution-domain read lock: the actor runs it in a task of its own), or that the
        tool policy refuses as it would the model's ``skill`` call (``TOOL_DISABLED``,
        ``PARAM_NOT_ALLOWED``; for a loaded skill too, as the model's call is). A skill the
        main agent has loaded is not read: placing the input loads nothing (:meth:`placing`), so
        what its SKILL.md holds now (broken, gone) does not matter; its snapshot stands."""
        self._refuse_by_policy(state, name)
        if name in loaded_skill_states(state.agent(MAIN_AGENT)):
            return
        await self._for_input(state, name, request_id, refuse=True)

    async def placing(self, state: SessionState, agent_id: str, inputs: Sequence[QueuedInput]) -> dict[str, t._Event]:
        """The skill loads that go right before placing ``inputs`` (``/skill:`` ones), by request id.

        Only the first input naming a skill not loaded gets its load: inputs placed together (the
        steers of one ``PlaceSteer``) naming the same skill load it once, before the first of them."""
        out: dict[str, t._Event] = {}
        loading: set[str] = set()
        for q in inputs:
            command = skill_command(q.content)
            if command is None or command[0] in loading or command[0] in loaded_skill_states(state.agent(agent_id)):
                continue
            loading.add(command[0])
            out[q.request_id] = await self._for_input(state, command[0], q.request_id, refuse=False)
        return out

    def before_placing(self, state: SessionState, agent_id: str, q: QueuedInput,
                       loads: dict[str, t._Event]) -> list[t._Event]:
        """``loads[q]`` unless the skill got loaded meanwhile, or the note saying why it is not
        loaded when ``state``'s policy refuses it now (called under the write lock: :meth:`placing`
        checked the policy before it waited to read the skill, and a ``toolPolicy`` change may
        have been recorded in that wait). Pure: reads ``state`` and the catalog only."""
        ev = loads.get(q.request_id)
        if isinstance(ev, t.SkillLoaded):
            if ev.name in loaded_skill_states(state.agent(agent_id)):
                return []
            if (refused := self._policy_refusal(state, ev.name)) is not None:
                return load_failed(ev.name, None, refused[1])[:1]
        return [ev] if ev is not None else []

