"""HTTP routes of the raw config files (``runtime/configfiles.py``), strong trust only.

* ``GET /api/v1/config/files`` — ``{files: [...]}``.
* ``GET /api/v1/config/files/{name}`` — the file as written (``{name, text, digest, …}``; the
  one JSON answer not scrubbed of the daemon's keys: see ``AS_WRITTEN`` in ``runtime/api.py``).
* ``PUT /api/v1/config/files/{name} {text, expectDigest?}`` — replace it whole (409
  ``CONFIG_FILE_CHANGED`` when it changed since the ``expectDigest`` read); recorded as
  ``config.changed``.
"""

from __future__ import annotations

from typing import NoReturn

import msgspec
import trio
from quart import Response
from quart_trio import QuartTrio

from events import types as t
from events.ids import SHA256_RE
from events.store import Draft, StoreWriteFailed

from .configfiles import not_listed
from .http_parts import ApiError, Body, json_response, read_body, require_strong
from .services import Services

CONFIG_FILE_PLACEHOLDER = "name"  # the routes' placeholder of a file's name


def refuse_slashed_name(name: str, method: str) -> NoReturn:
    """A file's name holding a slash (written ``%2F`` in the path: runtime/path_words.py) is
    answered as the routes answer any name not listed: the trust they need first, then 404
    ``CONFIG_FILE_NOT_FOUND`` (a name is looked up among the directory's files, not checked as
    an id is; ``..`` and a name with a NUL are not listed either)."""
    require_strong("write raw config" if method == "PUT" else "read raw config")
    raise not_listed(name)


class ConfigWriteBody(Body):
    text: str
    # the `digest` of the GET the edit started from (null: the file did not exist); omitted: an
    # unconditional write. A file that changed meanwhile is 409 CONFIG_FILE_CHANGED.
    expect_digest: str | None | msgspec.UnsetType = msgspec.UNSET


def add_config_routes(app: QuartTrio, svc: Services) -> None:
    @app.get("/api/v1/config/files")
    async def config_files() -> Response:
        require_strong("read raw config")
        return json_response({"files": await trio.to_thread.run_sync(svc.config_files.list)})

    @app.get(f"/api/v1/config/files/<{CONFIG_FILE_PLACEHOLDER}>")
    async def read_config(name: str) -> Response:
        require_strong("read raw config")
        return json_response(await trio.to_thread.run_sync(svc.config_files.read, name))

    @app.put(f"/api/v1/config/files/<{CONFIG_FILE_PLACEHOLDER}>")
    async def write_config(name: str) -> Response:
        require_strong("write raw config")
        body = await read_body(ConfigWriteBody)
        if isinstance(body.expect_digest, str) and not SHA256_RE.fullmatch(body.expect_digest):
            # (malformed is 400: "changed since it was read" sent the client to read again for nothing)
            raise ApiError("INVALID_ARGUMENT", "expectDigest must be the digest a GET of the file gave (64 lowercase "
                                               "hex digits), or null for a file that did not exist")
        result = await trio.to_thread.run_sync(svc.config_files.write, name, body.text, body.expect_digest)
        try:
            await svc.store.append(Draft(t.ConfigChanged(name=name, digest=result["digest"])))
        except StoreWriteFailed as exc:
            if not exc.storage:
                raise
            # The file is replaced already (whole): say so, rather than "nothing was recorded".
            raise ApiError("STORE_UNAVAILABLE", f"{name} was written (digest {result['digest']}), but the event log "
                                                f"could not record the change ({exc}); the file holds the new text") from None
        return json_response(result)
