"""HTTP routes of the daemon's health, pairing and the caller's identity (F-API-2).

* ``GET /api/v1/health`` (public) — ``{status: "ok", version, lastSeq}``; 503 ``{status:
  "unavailable", version, lastSeq, error: {code: "STORE_UNAVAILABLE", message}}`` once the event
  log was taken away under the daemon and every write is refused until a restart.
* ``POST /api/v1/pair/requests {clientId, name?}`` (public) — a pairing request, always answered
  202 ``{clientId, status: "pending"}``: approved with ``lens pair approve``; other fields grant
  nothing and are not stored. ``PAIRING_LIMIT`` (429) past the pending requests the config allows.
* ``GET /api/v1/whoami`` — the caller's ``{clientId, trust, heartbeatSeconds}``.
"""

from __future__ import annotations

import logging

import trio
from quart import Response
from quart_trio import QuartTrio

from .http_parts import Body, json_response, principal, read_body
from .pairing import MAX_NAME, PairFileInvalid, PairFileUnwritable
from .services import Services

log = logging.getLogger("lens.http")


class PairRequestBody(Body, forbid_unknown_fields=False):
    """Other fields (``isVerified``, ``trust``, a device's ``deviceId``…) are ignored: they grant
    nothing (F-API-2) and are never stored; the request is an ordinary pending one."""

    client_id: str
    name: str = ""


def add_pairing_routes(app: QuartTrio, svc: Services) -> None:
    @app.get("/api/v1/health")
    async def health() -> Response:
        # An event log deleted, moved or replaced under the daemon refuses every write until a
        # restart: a monitor must not read "ok" then. The file is named, its directory not (the
        # route is public). No Retry-After: waiting changes nothing, an operator does.
        why = svc.store.unwritable()
        if why is not None:
            return json_response({"status": "unavailable", "version": svc.version, "lastSeq": svc.store.last_seq,
                                  "error": {"code": "STORE_UNAVAILABLE",
                                            "message": f"the daemon cannot record: {why}"}}, 503)
        return json_response({"status": "ok", "version": svc.version, "lastSeq": svc.store.last_seq})

    @app.post("/api/v1/pair/requests")
    async def pair_request() -> Response:
        body = await read_body(PairRequestBody)
        # The file as it is now (one `stat`), as a credential check looks: a client revoked by
        # `lens pair revoke`, or removed by hand, a moment ago was still "approved" to the daemon
        # until its watcher's next look, and its request was answered "pending" with nothing
        # recorded. (Here, on the event loop, where the credential checks look too.)
        svc.pairs.reload()
        # A provider key in the name (any caller's text) is not stored (F-MOD-6): replaced by its
        # marker as in event content, and cut back to the limit if the marker is longer than the
        # key was; a name past the limit as sent is refused as it was sent.
        name = body.name if len(body.name) > MAX_NAME else svc.store.secrets.cut(body.name, MAX_NAME)
        try:
            await trio.to_thread.run_sync(svc.pairs.register, body.client_id, name,
                                          svc.config.server.max_pending_pairings)
        except (PairFileInvalid, PairFileUnwritable) as exc:
            # Unauthenticated callers learn that pairing is unavailable, not where the file lives.
            log.warning("pairing request refused: %s", exc.message)
            raise type(exc)("pairing is unavailable: the daemon cannot update its pair file "
                            "(the daemon log says why)") from None
        # Always "pending" (SPEC F-API-2's shape): the caller has no credential, and the status of
        # an approved id told anyone which client ids exist. An approved record is left as it is.
        return json_response({"clientId": body.client_id, "status": "pending"}, 202)

    @app.get("/api/v1/whoami")
    async def whoami() -> Response:
        """The caller's own identity: ``{clientId, trust}`` (``"read"`` | ``"strong"``); never a secret.

        Lets a client (the dashboard) show or hide mutating controls without trying one, and
        know how often the SSE stream sends a heartbeat (``heartbeatSeconds``).
        """
        p = principal()
        return json_response({"clientId": p.client_id, "trust": p.trust,
                              "heartbeatSeconds": svc.config.server.heartbeat_seconds})
