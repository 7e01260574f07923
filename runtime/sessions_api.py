"""HTTP routes of sessions (F-API-3, F-API-4, F-ACT-6, F-ACT-7), under ``/api/v1/sessions``.

* ``GET /sessions?project=&includeDeleted=&order=newest&limit=&after=`` — ``{sessions: [...]}``,
  newest first; with ``limit`` a page of them and ``nextAfter``.
* ``POST /sessions {projectId, model?, thinkingLevel?, name?}`` (strong trust) — 201, its view.
* ``GET /sessions/{id}?itemsLimit=&itemsBefore=&agentsStart=&agentsLimit=&agentId=&queuedStart=&queuedLimit=`` — its view,
  with a window of its items (and a page of its agents); with ``agentId`` the items are that
  agent's (a subagent's conversation; ``AGENT_NOT_FOUND``, 404, for an agent it does not have).
* ``POST /sessions/{id}/fork {seq, name?}`` (strong trust) — 201, the new session's view; a
  ``seq`` that is no event of the session (below 1, another session's, past its last) is 422
  ``VALIDATION_FAILED`` naming it, whichever check finds it, but for one it inherited as a fork
  (an event of a session in its chain of sources, at or before every link's fork point up to
  that session): the new session is made from the session that recorded it.
* ``PATCH /sessions/{id}`` (strong trust) — change its model, thinking level, name, context
  settings or tool policy (null: back to the default); answers its view.
* ``DELETE /sessions/{id}`` (strong trust) — soft-delete it.
* ``POST /sessions/{id}/inputs {requestId, content, whenBusy?}`` (strong trust) — 202; content is
  text or text and image parts (:func:`runtime.artifacts_api.check_image`).
* ``POST /sessions/{id}/inputs/{requestId}/withdraw`` and ``…/steer`` (strong trust) — a queued
  input withdrawn, or sent as a steer.
* ``POST /sessions/{id}/abort`` (strong trust) — abort its run.
* ``GET /sessions/{id}/events?after=&limit=`` — a page of its events and ``nextAfter``.
* ``POST /sessions/{id}/questions/{questionId}/answer {kind, optionIds?, text?}`` (strong trust).

Its jobs, Working Context, workspace and changes have route modules of their own
(``jobs_api.py``, ``context_api.py``, ``workspace_api.py``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from quart import Response
from quart_trio import QuartTrio

from events import types as t
from events.reader import SEQ_MAX
from tools.catalog_config import ToolPolicy
from tools.catalog_policy import PolicyError, check_policy_map, policy_json

from . import actor as a
from .artifacts_api import check_image
from .context_api import context_settings
from .errors import SessionNotFound
from .http_parts import (ApiError, Body, EmptyBody, bool_arg, check_id, check_name, check_not_past_end, check_session_settings,
                         id_arg, id_filter, int_arg, json_response, list_page_args, next_after, one_arg, optional_int,
                         parse_int, read_body, read_list, require_strong)
from .json_answer import json_answer
from .json_chars import page_chars, strings_chars
from .list_pages import SESSIONS
from .projects_api import project_exists
from .services import Services, before_stop
from .views import VIEW_AGENTS_MAX, VIEW_ITEMS_MAX, VIEW_QUEUED_MAX, session_row_view, session_view, view_texts

MAX_INPUT_IMAGES = 20  # image parts in one input (each up to MAX_IMAGE_BYTES; every request resends them)
MAX_EVENTS_PAGE = 1000


class SessionBody(Body):
    project_id: str
    model: str | None = None
    thinking_level: str | None = None
    name: str | None = None


class ForkBody(Body):
    """``POST /sessions/{id}/fork``: the event of the source session to start from."""

    seq: Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]
    name: str | None = None


class SessionPatchBody(Body):
    """``PATCH /sessions/{id}``: what to change; a field left out stays as it is, a field given
    as null goes back to the default: ``model`` (the default model chain), ``thinkingLevel``
    (the provider's default), ``name`` (none), the context settings (the config's, else the
    built-in value) and ``toolPolicy`` (every runtime override dropped: the config's policy)."""

    model: str | None | msgspec.UnsetType = msgspec.UNSET
    thinking_level: str | None | msgspec.UnsetType = msgspec.UNSET
    name: str | None | msgspec.UnsetType = msgspec.UNSET
    # Saved context settings (runtime/working_context.py): they win over the config's.
    auto_compaction: bool | None | msgspec.UnsetType = msgspec.UNSET
    compaction_trigger_percent: int | None | msgspec.UnsetType = msgspec.UNSET
    prune_tool_results: bool | None | msgspec.UnsetType = msgspec.UNSET
    # Runtime overrides of the tool execution policy (tools/catalog.py), by tool name or pattern:
    # an entry replaces that tool's override, null removes it. (Typed, so that a refused entry is
    # named by its tool and told what an entry takes, as any other place of a body is.)
    tool_policy: dict[str, ToolPolicy | None] | None | msgspec.UnsetType = msgspec.UNSET


# ``session.configured`` ``reset`` key of each ``PATCH /sessions/{id}`` field null sets back to
# its default (the context settings' keys are those of runtime.working_context.SETTINGS).
PATCH_RESETS: tuple[tuple[str, str], ...] = (
    ("model", "model"), ("thinking_level", "thinking_level"), ("name", "name"),
    ("auto_compaction", "auto_compaction"), ("compaction_trigger_percent", "compaction_trigger_percent"),
    ("prune_tool_results", "prune_tool_results"), ("tool_policy", "toolPolicy"),
)


class TextPartIn(msgspec.Struct, tag="text", tag_field="type", forbid_unknown_fields=True):
    text: str


class ImagePartIn(msgspec.Struct, tag="image", tag_field="type", rename="camel", forbid_unknown_fields=True):
    artifact_id: str
    mime: str


class InputBody(Body):
    request_id: str
    content: str | list[TextPartIn | ImagePartIn]
    when_busy: Literal["followUp", "steer"] = "followUp"


class AnswerBody(Body):
    kind: Literal["answer", "skip"]
    option_ids: list[str] | None = None
    text: str | None = None


def _view_window() -> a.GetView:
    """The view with the window of items a client asked for: ``itemsLimit`` items (1 to
    ``VIEW_ITEMS_MAX``, that many when absent) ending before the item index ``itemsBefore``
    (the end when absent; past the session's items it is 400, answered by the view). With
    ``agentsStart``, its agents are a page of all of them in the order they started:
    ``agentsLimit`` (1 to ``VIEW_AGENTS_MAX``, that many when absent) from that index (past
    ``agentsTotal`` it is 400, answered by the view); ``agentsLimit`` alone is 400. With
    ``agentId`` (an id: empty or malformed is 400) the items are that agent's (one the session
    does not have is 404 ``AGENT_NOT_FOUND``, answered by the view). Its queued inputs are
    ``queuedLimit`` (1 to ``VIEW_QUEUED_MAX``, that many when absent) from the index
    ``queuedStart`` of the queue (0 when absent; past ``queuedTotal`` it is 400, answered by the
    view)."""
    limit = int_arg("itemsLimit", VIEW_ITEMS_MAX, 1, VIEW_ITEMS_MAX)
    raw = one_arg("itemsBefore")
    agents_start = optional_int("agentsStart", "agentsLimit")
    return a.GetView(items_limit=limit, items_before=None if raw is None else parse_int("itemsBefore", raw, 0, SEQ_MAX),
                     agents_start=agents_start, agents_limit=int_arg("agentsLimit", VIEW_AGENTS_MAX, 1, VIEW_AGENTS_MAX),
                     agent_id=id_arg("agentId", "agentId"),
                     queued_start=int_arg("queuedStart", 0, 0, None),
                     queued_limit=int_arg("queuedLimit", VIEW_QUEUED_MAX, 1, VIEW_QUEUED_MAX))


def add_session_routes(app: QuartTrio, svc: Services) -> None:
    @app.get("/api/v1/sessions")
    async def list_sessions() -> Response:
        project = id_filter("project", "projectId", "project filter")
        include_deleted = bool_arg("includeDeleted")
        # (newest first, its one order: `order` names it, as the project list's does; another is
        # refused, not ignored, so a client asking the oldest first is not answered the newest)
        if one_arg("order") not in (None, "newest"):
            raise ApiError("INVALID_ARGUMENT", "the session list is newest first: order must be newest (the default)")
        limit, after = list_page_args("session")
        await svc.projections.caught_up()
        where, args = [], []
        if project:
            where.append("project_id = ?")
            args.append(project)
        if not include_deleted:
            where.append("deleted = 0")
        rows, more = await read_list(svc.projections, SESSIONS, where, args, limit, after)
        # A session with /skill: inputs being checked or a manual compaction under way reads
        # running, as its view does. Asked once the rows are read: such an input or compaction is
        # recorded after each row's lastSeq (or never).
        working = svc.supervisor.sessions_at_unrecorded_work()
        return json_response({"sessions": [session_row_view(r, unrecorded_work=r[0] in working) for r in rows]}
                             | next_after(rows, more, limit))

    @app.post("/api/v1/sessions")
    async def create_session() -> Response:
        require_strong("create sessions")
        body = await read_body(SessionBody)
        if body.name is not None:
            check_name(body.name, "name")
        check_session_settings(body.model, body.thinking_level)
        if not await project_exists(svc, check_id(body.project_id, "projectId")):
            raise ApiError("PROJECT_NOT_FOUND", f"no project {body.project_id!r}")
        # Without a model, the effective default now is the session's (F-MOD-5): a default
        # changed later leaves it as it is. Not checked here: a default that cannot serve fails
        # at submit (PROVIDER_DISABLED / PROVIDER_KEY_REQUIRED), as it always did.
        sid = await svc.supervisor.create_session(body.project_id, model=body.model,
                                                  thinking_level=body.thinking_level, name=body.name,
                                                  default_model=svc.catalog.default_model)
        state = await svc.call(sid, a.GetState())
        return json_response(session_view(state, secrets=svc.store.secrets), 201)

    @app.get("/api/v1/sessions/<sid>")
    async def get_session(sid: str) -> Response:
        check_id(sid, "session id")
        view = await svc.call(sid, _view_window())
        return await json_answer(view, svc.store.secrets, chars=await strings_chars(view_texts(view)))

    @app.post("/api/v1/sessions/<sid>/fork")
    async def fork_session(sid: str) -> Response:
        """A new session whose contexts are the source's as of its event ``seq`` (F-ACT-7: time
        travel, "try again from here"); it starts idle, with the model and thinking level the
        source had at ``seq``, and its view says ``forkedFrom``. The source is not changed."""
        require_strong("fork sessions")
        check_id(sid, "session id")
        body = await read_body(ForkBody)
        if body.name is not None:
            check_name(body.name, "name")
        new = await before_stop(svc.shutting_down, lambda: svc.supervisor.fork_session(sid, body.seq, name=body.name))
        view = session_view(await svc.call(new, a.GetState()), secrets=svc.store.secrets)
        return await json_answer(view, svc.store.secrets, 201, chars=await strings_chars(view_texts(view)))

    @app.patch("/api/v1/sessions/<sid>")
    async def configure_session(sid: str) -> Response:
        """Change a session's model, thinking level, name or saved settings (F-ACT-6): each change
        is an event (``session.configured``, ``session.named``); a model or thinking level applies
        from the session's next model request (one already sent keeps what it was sent with). A
        field given as null is set back to its default (``session.configured`` ``reset``)."""
        require_strong("configure sessions")
        check_id(sid, "session id")
        body = await read_body(SessionPatchBody)
        settings = context_settings(body)
        if isinstance(body.tool_policy, dict):
            kept = {k: v for k, v in body.tool_policy.items() if v is not None}
            try:
                check_policy_map(kept, "toolPolicy")
            except PolicyError as exc:
                raise ApiError("VALIDATION_FAILED", str(exc)) from None
            if len(body.tool_policy) > 1000:
                raise ApiError("VALIDATION_FAILED", "toolPolicy has more than 1000 entries")
            if body.tool_policy:
                settings["toolPolicy"] = {k: (policy_json({k: kept[k]})[k] if v is not None else None)
                                          for k, v in body.tool_policy.items()}
        model = body.model if isinstance(body.model, str) else None
        thinking_level = body.thinking_level if isinstance(body.thinking_level, str) else None
        name = body.name if isinstance(body.name, str) else None
        reset = tuple(key for attr, key in PATCH_RESETS
                      if getattr(body, attr) is None)  # (null: back to the default; left out: UNSET)
        # (a field given that changes nothing, an empty toolPolicy too, is answered with the view)
        given = (model, thinking_level, name) != (None, None, None) or reset or settings
        if not given and body.tool_policy is msgspec.UNSET:
            raise ApiError("VALIDATION_FAILED", "give at least one of model, thinkingLevel, name, autoCompaction, "
                                                "compactionTriggerPercent, pruneToolResults and toolPolicy")
        check_session_settings(model, thinking_level)
        if name is not None:
            check_name(name, "name")
        # (one command: the change is recorded whole, or refused whole)
        await svc.call(sid, a.Configure(model=model, thinking_level=thinking_level, settings=settings, reset=reset,
                                        name=name))
        view = await svc.call(sid, a.GetView())
        return await json_answer(view, svc.store.secrets, chars=await strings_chars(view_texts(view)))

    @app.delete("/api/v1/sessions/<sid>")
    async def delete_session(sid: str) -> Response:
        """Soft-delete a session (F-ACT-6): its run is aborted, queued inputs withdrawn, and
        ``session.deleted`` recorded; nothing is removed from the log. The view still answers
        (``deleted: true``); the list shows it only with ``includeDeleted``; it takes no more
        inputs, changes or deletes (409 ``SESSION_DELETED``)."""
        require_strong("delete sessions")
        check_id(sid, "session id")
        await read_body(EmptyBody)
        return json_response(await svc.call(sid, a.Delete()))

    @app.post("/api/v1/sessions/<sid>/inputs")
    async def submit(sid: str) -> Response:
        require_strong("submit inputs")
        check_id(sid, "session id")
        body = await read_body(InputBody)
        check_id(body.request_id, "requestId")
        refused: ApiError | None = None
        if isinstance(body.content, str):
            content: list[t.ContentPart] = [t.TextPart(body.content)]
        else:
            content = [t.TextPart(p.text) if isinstance(p, TextPartIn) else t.ImagePart(p.artifact_id, p.mime)
                       for p in body.content]
            # (a refusal goes to the actor, which raises it unless the request id is recorded:
            # a retry is answered as its first try was, whatever its images say now)
            try:
                images = sum(isinstance(part, t.ImagePart) for part in content)
                if images > MAX_INPUT_IMAGES:
                    raise ApiError("IMAGE_UNSUPPORTED", f"an input holds {images} images; at most {MAX_INPUT_IMAGES}")
                for part in content:
                    if isinstance(part, t.ImagePart):
                        await check_image(svc, part)
            except ApiError as exc:
                refused = exc
        result = await svc.call(sid, a.Submit(body.request_id, content, body.when_busy, refused))
        return json_response(result, 202)

    @app.post("/api/v1/sessions/<sid>/inputs/<rid>/withdraw")
    async def withdraw(sid: str, rid: str) -> Response:
        require_strong("withdraw inputs")
        check_id(sid, "session id")
        check_id(rid, "requestId")
        await read_body(EmptyBody)
        return json_response(await svc.call(sid, a.Withdraw(rid)))

    @app.post("/api/v1/sessions/<sid>/inputs/<rid>/steer")
    async def steer(sid: str, rid: str) -> Response:
        require_strong("steer inputs")
        check_id(sid, "session id")
        check_id(rid, "requestId")
        await read_body(EmptyBody)
        return json_response(await svc.call(sid, a.Steer(rid)))

    @app.post("/api/v1/sessions/<sid>/abort")
    async def abort(sid: str) -> Response:
        require_strong("abort runs")
        check_id(sid, "session id")
        await read_body(EmptyBody)
        return json_response(await svc.call(sid, a.Abort("user")))

    @app.get("/api/v1/sessions/<sid>/events")
    async def session_events(sid: str) -> Response:
        check_id(sid, "session id")
        after = int_arg("after", 0, 0, None)
        limit = int_arg("limit", 100, 1, MAX_EVENTS_PAGE)
        await check_not_past_end(svc, "after", after)
        page = await svc.store.read_event_page(session_id=sid, after=after, limit=limit)
        events = page.events
        if not events and (after == 0 or not await svc.store.read_events(session_id=sid, limit=1)):
            # A session is its events: none at all is a session that does not exist (asked of
            # the log, so an unknown id wakes no actor).
            raise SessionNotFound(f"no session {sid!r}")
        # (built here: ``to_json`` shares the bodies' strings, a millisecond or two for a page of
        # 1,000 events of any size; the bytes the rows declare say whether its encoding is long)
        body = {"events": [e.to_json() for e in events], "nextAfter": events[-1].seq if events else after}
        return await json_answer(body, svc.store.secrets, chars=page_chars(page.raw_bytes))

    @app.post("/api/v1/sessions/<sid>/questions/<qid>/answer")
    async def answer(sid: str, qid: str) -> Response:
        require_strong("answer questions")
        check_id(sid, "session id")
        body = await read_body(AnswerBody)
        answer_data: dict[str, Any] = {"kind": body.kind}
        if body.option_ids is not None:
            answer_data["optionIds"] = body.option_ids
        if body.text is not None:
            answer_data["text"] = body.text
        return json_response(await svc.call(sid, a.Answer(check_id(qid, "question id"), answer_data)))
