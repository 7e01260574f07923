"""HTTP routes of a session's Working Context (F-CTX-2, F-CTX-3), under ``/api/v1/sessions/{id}``.

* ``GET …/context?agentId=`` — the agent's Working Context: ``workingItemIds`` (what the next
  request sees, in order), every Full Context item with its ``context`` mark (``visible``,
  ``included``, ``pruned``, ``snipped``, ``compacted``, ``hidden``, ``removed``),
  ``estimatedTokens``, ``contextWindow``, ``compactionThreshold`` and the resolved ``settings``
  with their ``sources`` (saved > config > default). A quarantined session's is read from its
  log without an actor, as its view is; when even that read fails both answer 409
  ``SESSION_QUARANTINED`` naming what failed (a damaged event, with its seq).
* ``POST …/compact`` (strong trust; no body or ``{}``, a field is ``VALIDATION_FAILED``) — compact
  the main agent's Working Context now; answers
  ``{itemId, seq, replacedItemIds, summary, trigger}`` once recorded. ``SESSION_BUSY`` (409)
  while the session runs, ``NOTHING_TO_COMPACT`` (409), ``COMPACTION_FAILED`` (502), ``ABORTED``
  (409) when an abort stopped it before its summary was recorded;
  ``SESSION_UNAVAILABLE`` (503) when the daemon stops meanwhile (cut off, no summary recorded;
  the request's usage is, when the provider had begun answering).
* ``POST …/context/snip {itemIds?, olderImages?, keepImages?, agentId?}`` (strong trust) — take
  items out of the Working Context; ``olderImages`` also snips the image-bearing tool results
  but the newest ``keepImages`` (default 1).
* ``POST …/context/include {callId | itemId, agentId?}`` (strong trust) — re-attach a tool
  result (with its images, and its call) that was pruned, snipped or compacted.
* ``POST …/context/unsnip {itemIds, agentId?}`` (strong trust) — put snipped items back; a tool
  call and its result come back together (naming either is enough). An item the user hid, or a
  result whose call the user hid: ``CONTEXT_ITEM_HIDDEN`` (409); the instructions of a skill unloaded or loaded again since:
  ``CONTEXT_EDIT_INVALID`` (400). A compaction replaces the snipped items among what it
  replaces (its ``replacedItemIds`` name them; not skill instructions, never replaced): the
  summary never saw them, so unsnipped they stay out, ``compacted`` (an include still re-attaches
  a tool result); one snipped among the kept newest rounds comes back in its place.
* ``POST …/context/hide {itemIds, agentId?}`` and ``…/context/unhide`` (strong trust) — the
  user's hide: the items leave the Working Context and history (``POST /history/search``,
  ``GET /history/items/{id}``, the ``history_search``/``history_read`` tools), while the Full
  Context (the view, marked ``hidden``) keeps them; unhide brings them back. A tool call takes its
  result with it; a result hidden alone leaves its call a placeholder result. Allowed while the
  session runs (from the next request on). Unhiding a skill's instructions that are not its
  loaded copy any more also snips them (they stay out of the Working Context). A compaction
  replaces the hidden items among what it replaces (its ``replacedItemIds`` name them): the
  summary never saw them, so unhidden they stay out, ``compacted``.

``itemIds`` hold 1 to ``MAX_EDIT_IDS`` (1000) ids. Every edit is refused on a deleted session
(``SESSION_DELETED``) and a quarantined one (``SESSION_QUARANTINED``), both 409.

Edits answer ``{op, changed, seq, itemIds, items: [{id, context}]}``; one that changes nothing
records nothing (``changed: false``). An ``agentId`` the session does not have:
``AGENT_NOT_FOUND`` (404, as the view answers; also for ``GET …/context``); unknown item or call
ids in an agent it has: ``CONTEXT_ITEM_NOT_FOUND`` (404); an include
of what is no tool result: ``CONTEXT_EDIT_INVALID`` (400); of an item the user hid, or of a
result whose call the user hid: ``CONTEXT_ITEM_HIDDEN`` (409), naming the hidden item.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from quart import Response
from quart_trio import QuartTrio

from projections.session_state import MAIN_AGENT

from . import working_context as wc
from .http_parts import ApiError, Body, EmptyBody, check_id, id_arg, json_response, read_body, require_strong
from .services import Services


class SnipBody(Body):
    item_ids: Annotated[list[str], msgspec.Meta(max_length=wc.MAX_EDIT_IDS)] = []
    older_images: bool = False
    keep_images: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 1
    agent_id: str = MAIN_AGENT


class ItemsBody(Body):
    item_ids: Annotated[list[str], msgspec.Meta(min_length=1, max_length=wc.MAX_EDIT_IDS)]
    agent_id: str = MAIN_AGENT


class IncludeBody(Body):
    call_id: str | None = None
    item_id: str | None = None
    agent_id: str = MAIN_AGENT


def add_context_routes(app: QuartTrio, svc: Services) -> None:
    @app.get("/api/v1/sessions/<sid>/context")
    async def describe_context(sid: str) -> Response:
        check_id(sid, "session id")
        agent_id = id_arg("agentId", "agentId") or MAIN_AGENT
        return json_response(await svc.call(sid, wc.DescribeContext(agent_id)))

    @app.post("/api/v1/sessions/<sid>/compact")
    async def compact(sid: str) -> Response:
        require_strong("compact sessions")
        check_id(sid, "session id")
        # (no field: ``{"agentId": …}`` compacted the main agent while the client meant another)
        await read_body(EmptyBody)
        return json_response(await svc.supervisor.call(sid, wc.Compact(stop=svc.shutting_down)))

    @app.post("/api/v1/sessions/<sid>/context/snip")
    async def snip(sid: str) -> Response:
        require_strong("edit the working context")
        check_id(sid, "session id")
        body = await read_body(SnipBody)
        check_id(body.agent_id, "agentId")
        check_item_ids(body)
        if not body.item_ids and not body.older_images:
            raise ApiError("VALIDATION_FAILED", "give itemIds, olderImages or both")
        return json_response(await svc.call(sid, wc.EditContext(
            "snip", tuple(body.item_ids), older_images=body.older_images, keep_images=body.keep_images,
            agent_id=body.agent_id)))

    @app.post("/api/v1/sessions/<sid>/context/include")
    async def include(sid: str) -> Response:
        require_strong("edit the working context")
        check_id(sid, "session id")
        body = await read_body(IncludeBody)
        check_id(body.agent_id, "agentId")
        if (body.call_id is None) == (body.item_id is None):
            raise ApiError("VALIDATION_FAILED", "give exactly one of callId and itemId")
        if body.call_id is not None:
            check_id(body.call_id, "callId")
            cmd = wc.EditContext("include", call_id=body.call_id, agent_id=body.agent_id)
        else:
            assert body.item_id is not None
            check_id(body.item_id, "itemId")
            cmd = wc.EditContext("include", (body.item_id,), agent_id=body.agent_id)
        return json_response(await svc.call(sid, cmd))

    def items_edit(op: str) -> Any:
        async def route(sid: str) -> Response:
            require_strong("edit the working context")
            check_id(sid, "session id")
            body = await read_body(ItemsBody)
            check_id(body.agent_id, "agentId")
            check_item_ids(body)
            return json_response(await svc.call(sid, wc.EditContext(op, tuple(body.item_ids),  # type: ignore[arg-type]
                                                                    agent_id=body.agent_id)))

        route.__name__ = f"context_{op}"
        return route

    for op in ("unsnip", "hide", "unhide"):
        app.post(f"/api/v1/sessions/<sid>/context/{op}")(items_edit(op))


def check_item_ids(body: Any) -> None:
    """Check each of a context edit's ``itemIds`` (a body with ``item_ids``) as an id:
    ``INVALID_ARGUMENT``, naming ``itemIds[]``, at the first that is not."""
    for item_id in body.item_ids:
        check_id(item_id, "itemIds[]")


def context_settings(body: object) -> dict[str, object]:
    """The saved context settings a ``PATCH /sessions/{id}`` body gives (``session.configured``
    settings keys), checked: ``VALIDATION_FAILED`` names the field out of range."""
    out: dict[str, object] = {}
    for key, _field, _kind, _lo, _hi in wc.SETTINGS:
        value = getattr(body, key, None)
        if value is None or value is msgspec.UNSET:  # (null is a reset, left out no change)
            continue
        try:
            wc.check_setting(key, value)
        except ValueError as exc:
            raise ApiError("VALIDATION_FAILED", str(exc)) from None
        out[key] = value
    return out
