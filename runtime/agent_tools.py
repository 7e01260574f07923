"""An agent's tools: what its model requests offer and what it can still search for.

One computation for both places that need it: the actor building an agent's request
(:meth:`runtime.actor.SessionActor._tool_schemas`) and the tool inventory describing that agent
(:mod:`runtime.tool_inventory`), so under the same policy and config the two cannot disagree; and
which loaded tools the request a call answers offered (:func:`offered_capabilities`), which the
actor checks the call against. Pure: reads the session's folded state and the catalog, changes
nothing.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from projections.session_state import MAIN_AGENT, AgentState, SessionState
from tools.base import ToolSpec
from tools.catalog import ToolCatalog

SKILL = "skill"


def agent_scope(state: SessionState | None, agent_id: str) -> tuple[AgentState | None, list[str] | None, bool]:
    """``agent_id``'s state in ``state`` (None: not there, or no session), its tool list (a
    subagent's ``tools``; None: every tool its kind may have) and whether it is the main agent."""
    agent = state.agents.get(agent_id) if state is not None else None
    allowed = (agent.tools or None) if agent is not None else None
    return agent, allowed, agent_id == MAIN_AGENT


def session_tool_policy(state: SessionState | None) -> dict[str, Any] | None:
    """The session's saved ``toolPolicy`` (runtime overrides), if any."""
    if state is None:
        return None
    policy = state.settings.get("toolPolicy")
    return policy if isinstance(policy, dict) and policy else None


def agent_planes(catalog: ToolCatalog, state: SessionState | None, agent_id: str = MAIN_AGENT, *,
                 loaded: Sequence[str] | None = None) -> tuple[list[ToolSpec], list[ToolSpec]]:
    """(offered, searchable) for ``agent_id`` of the session ``state`` (``None``: a main agent that
    loaded nothing): its tool list (a subagent's ``tools``), its loads (``loaded``: in their place)
    and the session's saved ``toolPolicy``. The one call that builds the agent's model requests'
    tool list (runtime/actor.py) and the inventory's ``offered`` and ``searchable``."""
    agent, allowed, is_main = agent_scope(state, agent_id)
    if loaded is None:
        loaded = agent.capabilities if agent is not None else ()
    return catalog.planes(is_main_agent=is_main, allowed=allowed, loaded=loaded, session=session_tool_policy(state))


def offered_capabilities(agent: AgentState) -> tuple[list[str], list[str]]:
    """The deferred tools ``agent``'s last model request offered (a call of its answer, direct or
    from a program, may call them), and those a call of that answer loaded since (callable from the
    next request: the request did not offer them, F-TOOL-3). ``AgentState.capabilities`` only
    grows, in load order, so its first ``capabilities_offered`` are the ones that request had."""
    n = agent.capabilities_offered
    return list(agent.capabilities[:n]), list(agent.capabilities[n:])


def can_load_skills(catalog: ToolCatalog, state: SessionState | None, agent_id: str = MAIN_AGENT) -> bool:
    """Whether ``agent_id`` can load a skill: its requests offer ``skill``, or it is deferred and
    the agent can load it with ``capability_search`` and then call it (searchable). Not so for a
    subagent whose ``tools`` leave it out, under a policy that disables it, or with PTC's fixed
    native list without it (:func:`tools.catalog.callable_from_nowhere`: not searchable either).
    Which form of the system prompt the agent is sent (``runtime.prompt.SystemPrompt``) follows
    from it (:func:`skills_listed`)."""
    offered, searchable = agent_planes(catalog, state, agent_id)
    return any(s.name == SKILL for s in (*offered, *searchable))


def skills_listed(catalog: ToolCatalog, state: SessionState | None,
                  agent_id: str = MAIN_AGENT) -> bool | Callable[[str], bool]:
    """Which skills ``agent_id``'s system prompt lists (``runtime.prompt.SystemPrompt.for_agent``):
    none (False) when it cannot load a skill (:func:`can_load_skills`); else every one (True), or,
    under a ``paramRestrictions`` on ``skill``, a test of a skill's name: those the policy lets it
    load (:meth:`ToolCatalog.policy_refusal` of ``skill({"name"})``, as the model's call and the
    user's ``/skill:`` are checked). Read from ``state`` now: a later change of it does not apply."""
    if not can_load_skills(catalog, state, agent_id):
        return False
    spec = catalog.registry.get(SKILL)
    session = session_tool_policy(state)
    if spec is None or not catalog.profile(SKILL, session)["paramRestrictions"]["value"]:
        return True
    return lambda name: catalog.policy_refusal(spec, {"name": name}, session) is None
