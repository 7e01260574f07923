"""HTTP routes of workspace browsing and a session's changes (F-HAR-3), under ``/api/v1/sessions/{id}``.

Read-only: any paired client may call them (read-only credentials included).

``GET …/workspace/tree?path=REL&depth=N&ignored=BOOL&limit=N``: the entries below a directory of
the session's project's workspace (``path`` default the root; ``depth`` 1-64, default 1: its own
entries; ``limit`` 1-50000, default 50000): ``{path, ignored, entries: [{name, path, kind
(file|directory|symlink|other), size (files; else null), ignored, sensitive}], truncated,
ignoredHidden, limit}``. Gitignored entries are left out (counted in ``ignoredHidden``) unless
``ignored=true``, which lists them marked ``ignored: true``; ``.git`` is never listed. Entries come
level by level (see ``tools.files.browse``) and stop at ``limit`` with ``truncated: true``.

``GET …/workspace/file?path=REL&offset=N&limit=N``: a page of a UTF-8 text file, ``{path, size,
offset, nextOffset, eof, text}`` (byte offsets, never splitting a character; ``limit`` 1 B-1 MiB,
default 64 KiB). Credential files (``.env*``, ``*.pem``, ``*.key``… see ``tools.files.sensitive``)
are listed but never read: 403 ``SENSITIVE_FILE``, also through a symlink, and so is a regular file
with more than one name (a hard link: its other name may be a credential file's); ``.git`` is 403
``PATH_HIDDEN``; a binary file is 422 ``BINARY_FILE``.

Paths are workspace-relative: absolute, ``..`` or NUL is 400 ``INVALID_ARGUMENT`` (a backslash
is a character of a name, as the executor reads it: a listed ``a\\b.txt`` is read by that path);
symlinks are followed only inside the workspace (403 ``PATH_OUTSIDE_WORKSPACE``). The listing and
the read run in the project's executor (``browse_list`` / ``browse_read`` over the Call RPC), so a
remote workspace is browsed the same way; they take no execution-domain lock (a user's look must
not wait for an agent's hour-long command; edits publish atomically). A read whose local
executor child died under it runs once more on the child spawned in its place, and its answer
then says so: ``rerunAfter: "EXECUTOR_UNAVAILABLE"`` (the code the first run ended with; omitted
when the read ran once, as in a session view's tool result); an executor that
cannot be reached is 503 ``EXECUTOR_UNAVAILABLE``; one that did not answer within the call's deadline
(60 s) is 504 ``EXECUTOR_TIMEOUT`` (as a rule the executor is up and the listing took too long:
a smaller ``depth`` or ``limit`` may answer).

``GET …/changes``: the files this session changed, derived from its log (``file.edited`` /
``file.reverted`` of every agent, subagents included; a fork's revert of an edit it inherited is
listed as the fork's change, read against the source's log up to the fork point), each by the
file the edit wrote (``written_path``: where its path led through symlinks; the path as given,
tidied as text, in logs from before that was kept): ``{sessionId, files: [{path, status
(created|modified|deleted|reverted|unchanged), bytes, bytesBefore, agents, edits: [{callId, tool,
agentId, taskId, seq, change (created|modified|deleted), bytesBefore, bytesAfter, reverted,
revertedBy: {callId, agentId, seq} | null}]}], lastSeq}``, files sorted by path.
"""

from __future__ import annotations

import posixpath
from typing import Any, Sequence

import trio
from quart import Response
from quart_trio import QuartTrio

from events import types as t
from projections.session_state import take_reverted
from tools.files.browse import MAX_DEPTH, MAX_ENTRIES, MAX_READ_BYTES
from tools.files.sensitive import hidden_path, sensitive_path
from tools.rerun import once_more_if_died

from .errors import LensError, SessionGone, SessionNotFound
from .fork_chain import ForkChain
from .http_parts import ApiError, bool_arg, camel_keys, check_id, int_arg, json_response, one_arg
from .services import Services

BROWSE_TIMEOUT_S = 60.0
MAX_PATH_BYTES = 4096
DEFAULT_FILE_LIMIT = 64 * 1024

# This module's codes have their statuses in the API's table (http_parts.WORKSPACE_STATUS).
# The executor's codes as this API names them (others keep their own).
_FROM_EXECUTOR = {"NOT_FOUND": "PATH_NOT_FOUND", "TOOL_UNKNOWN": "BROWSING_UNSUPPORTED"}


def check_rel_path(raw: str | None) -> str:
    """A workspace-relative path as given in a query (absent: the root), normalised ("a//./b" is
    "a/b"); 400 ``INVALID_ARGUMENT`` for anything that is not one."""
    if raw is None:
        return "."
    if raw == "":
        raise ApiError("INVALID_ARGUMENT", "path is empty (leave it out, or give \".\", for the workspace root)")
    if "\0" in raw:
        raise ApiError("INVALID_ARGUMENT", "path contains a NUL character")
    size = len(raw.encode("utf-8", "surrogatepass"))
    if size > MAX_PATH_BYTES:
        raise ApiError("INVALID_ARGUMENT", f"path is {size} bytes of UTF-8; browsing takes paths of at most "
                                           f"{MAX_PATH_BYTES} bytes, so an entry a tree lists deeper than that "
                                           "cannot be listed or read by its path")
    if raw.startswith("/"):
        raise ApiError("INVALID_ARGUMENT", "path must be relative to the workspace root, not absolute")
    parts = [c for c in raw.split("/") if c not in ("", ".")]
    if ".." in parts:
        raise ApiError("INVALID_ARGUMENT", "path must not contain \"..\"")
    return "/".join(parts) or "."


def add_workspace_routes(app: QuartTrio, svc: Services) -> None:
    async def session_project(sid: str, *, allow_deleted: bool) -> tuple[str | None, bool]:
        await svc.projections.caught_up()
        rows = await svc.projections.query("SELECT project_id, deleted FROM sessions WHERE id = ?", (sid,))
        if not rows:
            raise SessionNotFound(f"no session {sid!r}")
        project_id, deleted = rows[0][0], bool(rows[0][1])
        if deleted and not allow_deleted:
            raise SessionGone.of(sid, "its workspace is not browsed through it")
        return project_id, deleted

    async def browse(sid: str, tool: str, args: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The executor's answer, and what the route adds to its JSON: ``rerunAfter`` when the read
        ran twice (its child died under the first run)."""
        project_id, _ = await session_project(sid, allow_deleted=False)
        if project_id is None or svc.executors is None:
            raise ApiError("NO_WORKSPACE", "this session belongs to no project, so it has no workspace")
        try:
            ex = await svc.executors.get(project_id)
            # (a read: one whose local child died under it runs once more on the next)
            reached = await once_more_if_died(svc.executors, ex,
                                              lambda e: e.client.call(tool, args, timeout=BROWSE_TIMEOUT_S),
                                              f"session {sid}'s {tool} of {str(args.get('path'))[:200]!r}")
        except LensError as exc:
            code = _FROM_EXECUTOR.get(exc.code, exc.code)
            raise ApiError(code, exc.message) from None
        return reached.out.result, ({} if reached.rerun_after is None else {"rerunAfter": reached.rerun_after})

    @app.get("/api/v1/sessions/<sid>/workspace/tree")
    async def workspace_tree(sid: str) -> Response:
        check_id(sid, "session id")
        path = check_rel_path(one_arg("path"))
        depth = int_arg("depth", 1, 1, MAX_DEPTH)
        limit = int_arg("limit", MAX_ENTRIES, 1, MAX_ENTRIES)
        include_ignored = bool_arg("ignored")
        r, rerun = await browse(sid, "browse_list", {"path": path, "depth": depth, "max_entries": limit,
                                                     "include_ignored": include_ignored})
        return json_response({"path": r["path"], "ignored": r["ignored"], "entries": r["entries"],
                              "truncated": r["truncated"], "ignoredHidden": r["ignored_hidden"], "limit": limit,
                              **rerun})

    @app.get("/api/v1/sessions/<sid>/workspace/file")
    async def workspace_file(sid: str) -> Response:
        check_id(sid, "session id")
        raw = one_arg("path")
        if raw is None:
            raise ApiError("INVALID_ARGUMENT", "path is required")
        path = check_rel_path(raw)
        offset = int_arg("offset", 0, 0, None)
        limit = int_arg("limit", DEFAULT_FILE_LIMIT, 1, MAX_READ_BYTES)
        r, rerun = await browse(sid, "browse_read", {"path": path, "offset": offset, "limit": limit})
        # (the executor refuses these itself; checked again on the path it resolved)
        if hidden_path(r["path"]):
            raise ApiError("PATH_HIDDEN", f"{path}: leads into .git, which is not browsed")
        if sensitive_path(r["path"]):
            raise ApiError("SENSITIVE_FILE", f"{path}: leads to a credential file; it is listed but never read")
        r["text"], r["next_offset"], r["eof"] = svc.store.secrets.scrub_page(r["text"], r["next_offset"], r["eof"])
        return json_response({**camel_keys(r), **rerun})

    @app.get("/api/v1/sessions/<sid>/changes")
    async def session_changes(sid: str) -> Response:
        check_id(sid, "session id")
        project_id, _ = await session_project(sid, allow_deleted=True)
        workspace = None
        if project_id is not None:
            rows = await svc.projections.query("SELECT workspace FROM projects WHERE id = ?", (project_id,))
            workspace = rows[0][0] if rows else None
        events, after = await _edit_events(svc.store, sid, None)
        # A fork may revert an edit it inherited (its source's, before the fork point): the
        # source's edits up to there tell what such a revert changed.
        inherited: list[Any] = []
        async for link in ForkChain(svc.store, sid):  # (the whole chain, each link once)
            if link.forked_from_seq is None:
                break
            older, _last = await _edit_events(svc.store, link.forked_from_session, link.forked_from_seq)
            inherited[:0] = older
        return json_response({"sessionId": sid, "files": changes(events, workspace, inherited), "lastSeq": after})


# The kinds the changes fold reads: only their rows are decoded (a long session's model answers,
# inputs and results are skipped in SQL).
EDIT_KINDS = ("tool.started", "artifact.stored", "file.edited", "file.reverted")


async def _edit_events(store: Any, sid: str, to: int | None) -> tuple[list[Any], int]:
    """The events of session ``sid`` (up to seq ``to``) the changes fold reads, and the seq of the
    session's last event they reflect."""
    if to is None:
        to = store.last_seq  # (fixed first: what is read and the seq returned agree)
    last = await store.session_last_seq(sid, to=to)
    events, after = [], 0
    while True:
        page = await store.read_events(session_id=sid, after=after, limit=1000, to=to, kinds=EDIT_KINDS)
        if not page:
            break
        events.extend(e for e in page if isinstance(e.event, (t.ToolStarted, t.ArtifactStored, t.FileEdited,
                                                               t.FileReverted)))
        after = page[-1].seq
        await trio.lowlevel.checkpoint()
    return events, last


def _rel(path: str, workspace: str | None) -> str:
    """An edited path as the tool was given it, as a workspace-relative path."""
    if path.startswith("/") and workspace:
        ws = workspace.rstrip("/")
        if path == ws or path.startswith(ws + "/"):
            path = path[len(ws) + 1:] or "."
    norm = posixpath.normpath(path) if path else path
    return norm


def changes(events: list[Any], workspace: str | None = None, inherited: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """The files changed by these events (a session's, in seq order); a pure fold of the log.

    ``inherited``: a fork's source's events up to the fork point (and its sources' before it),
    which list nothing themselves; a revert in the fork of an edit made there is listed as the
    fork's change (the file goes back from that edit's result to what it replaced)."""
    tools: dict[str, str] = {}
    sizes: dict[str, int] = {}
    files: dict[str, list[dict[str, Any]]] = {}
    shas: dict[str, list[tuple[str | None, str | None]]] = {}  # path -> (before, after) per edit
    own_calls: set[str] = set()  # the calls whose edits these events record
    standing: dict[str, list[tuple[str, int]]] = {}  # call id -> (path, index in files[path]), not reverted yet
    timeline: dict[str, list[tuple[str, Any]]] = {}  # path -> ("edit", i) | ("revert", i)
    older: dict[str, list[t.FileEdited]] = {}  # inherited edits not reverted before the fork, by call
    for se in inherited:
        ev = se.event
        if isinstance(ev, t.ArtifactStored):
            sizes[ev.artifact_id] = ev.size
        elif isinstance(ev, t.FileEdited):
            older.setdefault(ev.call_id, []).append(ev)
        elif isinstance(ev, t.FileReverted):
            take_reverted(older, ev)

    def add_edit(se: Any, call_id: str, edited: t.FileEdited, before_aid: str | None, after_aid: str | None,
                 before_sha: str | None, after_sha: str | None) -> tuple[str, int]:
        # The file the edit wrote; in logs from before that was kept, the path given, tidied as text.
        path = edited.written_path or _rel(edited.path, workspace)
        before = sizes.get(before_aid) if before_aid else None
        after = sizes.get(after_aid) if after_aid else None
        change = "created" if before_aid is None else "deleted" if after_aid is None else "modified"
        edits = files.setdefault(path, [])
        edits.append({"callId": call_id, "tool": tools.get(call_id), "agentId": se.agent_id,
                      "taskId": se.task_id, "seq": se.seq, "change": change, "bytesBefore": before,
                      "bytesAfter": after, "reverted": False, "revertedBy": None})
        shas.setdefault(path, []).append((before_sha, after_sha))
        timeline.setdefault(path, []).append(("edit", len(edits) - 1))
        return path, len(edits) - 1

    for se in events:
        ev = se.event
        if isinstance(ev, t.ToolStarted):
            tools[ev.call_id] = ev.name
        elif isinstance(ev, t.ArtifactStored):
            sizes[ev.artifact_id] = ev.size
        elif isinstance(ev, t.FileEdited):
            own_calls.add(ev.call_id)
            standing.setdefault(ev.call_id, []).append(add_edit(
                se, ev.call_id, ev, ev.before_artifact_id, ev.after_artifact_id, ev.before_sha256,
                ev.after_sha256))
        elif isinstance(ev, t.FileReverted) and ev.reverted_call_id not in own_calls and ev.reverted_call_id in older:
            # (revert_call restores a call's edits last first)
            for e in reversed(take_reverted(older, ev)):
                add_edit(se, ev.call_id, e, e.after_artifact_id, e.before_artifact_id, e.after_sha256,
                         e.before_sha256)
        elif isinstance(ev, t.FileReverted):
            for path, i in reversed(take_reverted(standing, ev)):  # (last first, as restored)
                edit = files[path][i]
                edit["reverted"] = True
                edit["revertedBy"] = {"callId": ev.call_id, "agentId": se.agent_id, "seq": se.seq}
                timeline[path].append(("revert", i))
    out = []
    for path in sorted(files):
        edits, pairs = files[path], shas[path]
        original, original_size = pairs[0][0], edits[0]["bytesBefore"]
        current, size = original, original_size
        for what, i in timeline[path]:
            if what == "edit":
                current, size = pairs[i][1], edits[i]["bytesAfter"]
            else:
                current, size = pairs[i][0], edits[i]["bytesBefore"]
        if current == original:
            status = "reverted" if any(e["reverted"] for e in edits) else "unchanged"
        elif original is None:
            status = "created"
        elif current is None:
            status = "deleted"
        else:
            status = "modified"
        agents = list(dict.fromkeys(e["agentId"] for e in edits))
        out.append({"path": path, "status": status, "bytes": size, "bytesBefore": original_size,
                    "agents": agents, "edits": edits})
    return out
