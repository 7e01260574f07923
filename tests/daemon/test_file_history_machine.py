"""F-EXE-3/4/5, F-HAR-3: a workspace's file history driven through edits, patches, outside
changes, ``revert_call`` and restarts in any order.

A Hypothesis ``RuleBasedStateMachine`` over the real daemon of this suite (loopback port 0, the
faux model, the real executor child over gRPC) and a workspace of three paths, one in a nested
directory, two of them also named another way (``./b.txt``, ``sub//dir/c.txt``). Its rules have the model call
(``/tool NAME {json}``, as :func:`run_tool` does): ``edit_file`` create, rewrite and edit (one or
two edits; a create over an existing file, an edit that matches nothing or twice, a change to
the same bytes), ``patch_file`` with a valid hunk (which may match nothing or twice) and with an
invalid one; a file written or deleted from outside between calls (the nested one also with its
directories); ``revert_call`` of any earlier call (the latest, an older one, one already reverted,
a revert, one that failed, an unknown id), and an undo made to meet both kinds of revert that
succeed (a line added to a file and reverted at once, or after another file's change); and a restart of the daemon (its executor child too)
on the same data directory. Each example starts with the model creating the three files, in a
new session over the emptied workspace of one project.

The machine keeps its own model of the files, written from the semantics the project promises
(docs/decisions.md, "A state machine over a workspace's file history"): an edit's answer from
the bytes it meets; a revert puts back the call's "before" when the file still holds its
"after", succeeds without a change when it holds the "before" already, and is ``CONFLICT``
otherwise (nothing recorded, the call stays revertible); a call that changed nothing, failed,
was reverted already, is a revert itself or is unknown is ``NOTHING_TO_REVERT``. Checked after
every rule: the workspace's files and directories equal the model; the answer (``structured_content`` and the
error code) is the one the model predicts; ``GET /sessions/{id}/changes`` equals the model's
list; the log is gap-free (``seq`` and the session's ``session_seq``); a fresh fold of the
session's events gives the live ``GET /sessions/{id}`` view, and its revertible calls are the
model's. The draws never depend on the daemon's state (:func:`pick`), so Hypothesis replays them.
At the end, every kind of outcome in :data:`REACHED` was met at least once.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from events.reader import LogReader
from projections.session_state import SessionState, fold
from runtime.views import session_view

from .conftest import Daemon, DaemonFactory, run_tool, stop_daemon

FAUX = {"providers": [{"id": "faux", "protocol": "faux", "models": [{"id": "faux-1"}]}], "defaultModel": "faux/faux-1"}
# About 20 s on two cores; LENS_FILES_EXAMPLES / LENS_FILES_STEPS (with HYPOTHESIS_PROFILE=explore
# for fresh examples) search further.
MAX_EXAMPLES = int(os.environ.get("LENS_FILES_EXAMPLES", 8))
STEPS = int(os.environ.get("LENS_FILES_STEPS", 30))
EXTRA_RUNS = 3  # (see the test: runs under fixed seeds while a kind of outcome is unmet)

# Each path as the model may spell it; the first spelling is the file the edit writes (the
# changes list it by that).
PATHS = [("a.txt", "a.txt"), ("b.txt", "./b.txt"), ("sub/dir/c.txt", "sub//dir/c.txt")]
WORDS = ["alpha", "beta", "gamma", "delta"]  # (none is part of another: a count is a match count)
# (three of the words, up to four lines: a word often stands twice, and "delta" in none at first)
CONTENT = st.lists(st.sampled_from(WORDS[:3]), max_size=4).map(lambda ws: "".join(w + "\n" for w in ws))
REACHED = ["edit_file ok", "edit_file ALREADY_EXISTS", "edit_file NOT_FOUND", "edit_file NO_MATCH",
           "edit_file NOT_UNIQUE", "patch_file ok", "patch_file NO_MATCH", "patch_file INVALID_PATCH",
           "revert of a create", "revert of the latest", "revert of an older call", "revert_call CONFLICT",
           "revert_call NOTHING_TO_REVERT", "restart"]
INVALID_PATCHES = ["*** Begin Patch\n*** Update File: x\n@@\n-alpha\n+beta\n*** End Patch\n",
                   "@@ -1,1 +1,1 @@\n-alpha\n+beta\n", "@@\nalpha\n"]


@dataclass
class Edit:
    """A call that changed a file, as the model keeps it."""

    call_id: str
    tool: str
    path: str  # the file written
    before: bytes | None
    after: bytes
    reverted_by: str | None = None


@dataclass
class Model:
    files: dict[str, bytes] = field(default_factory=dict)  # the workspace's files
    dirs: set[str] = field(default_factory=set)  # and its directories
    calls: list[str] = field(default_factory=list)  # every call id the model made, in order
    edits: list[Edit] = field(default_factory=list)  # the calls that changed a file, in order
    timeline: list[tuple[str, Edit]] = field(default_factory=list)  # ("edit" | "revert", edit)

    def revertible(self) -> dict[str, Edit]:
        return {e.call_id: e for e in self.edits if e.reverted_by is None}

    def changes(self) -> list[dict[str, Any]]:
        """"Changes this session" from the log's edit calls: per file, its edits, and a status
        that compares what the log says the file holds now (the last edit's result, or what a
        revert put back) with what it held before the session's first edit of it."""
        out = []
        for path in sorted({e.path for e in self.edits}):
            edits = [e for e in self.edits if e.path == path]
            original = edits[0].before
            now = original
            for what, e in self.timeline:
                if e.path == path:
                    now = e.after if what == "edit" else e.before
            if now == original:
                status = "reverted" if any(e.reverted_by for e in edits) else "unchanged"
            else:
                status = "created" if original is None else "deleted" if now is None else "modified"
            out.append({"path": path, "status": status, "bytes": size(now), "bytesBefore": size(original),
                        "agents": ["main"], "edits": [
                            {"callId": e.call_id, "tool": e.tool, "agentId": "main",
                             "change": "created" if e.before is None else "modified",
                             "bytesBefore": size(e.before), "bytesAfter": size(e.after),
                             "reverted": e.reverted_by is not None,
                             "revertedBy": e.reverted_by} for e in edits]})
        return out


def parents(path: str) -> set[str]:
    """The directories ``path`` lies in ("sub/dir/c.txt": sub, sub/dir)."""
    parts = path.split("/")[:-1]
    return {"/".join(parts[:i]) for i in range(1, len(parts) + 1)}


def size(data: bytes | None) -> int | None:
    return None if data is None else len(data)


def pick(data: st.DataObject, choices: list[Any]) -> Any:
    """One of ``choices`` (which depend on the machine's state), drawn the same way whatever they
    are: Hypothesis replays a run's draws and must meet the same kinds of draw."""
    return choices[data.draw(st.integers(0, 255), label="index") % len(choices)]


@dataclass
class World:
    """The daemon (replaced by a restart), its credential and the project every example uses."""

    d: Daemon
    factory: DaemonFactory
    token: str
    project_id: str
    trio_token: trio.lowlevel.TrioToken
    examples: int = 0
    last_seq: int = 0  # the log's seqs checked gap-free up to here
    seen: Counter[str] = field(default_factory=Counter)  # the outcomes met, by kind

    @property
    def workspace(self) -> Path:
        return self.d.root / "workspaces" / "p"

    def run(self, fn: Any, *args: Any) -> Any:
        return trio.from_thread.run(fn, *args, trio_token=self.trio_token)


class FileHistoryMachine(RuleBasedStateMachine):
    world: World  # (set on the subclass the test makes)

    def __init__(self) -> None:
        super().__init__()
        w = self.world
        w.examples += 1
        # A fresh session over an emptied workspace: the changes and reverts are the session's.
        for child in w.workspace.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        self.sid = w.run(self._session)
        self.model = Model()
        self.n = 0

    async def _session(self) -> str:
        return (await self.world.d.session(self.world.token, self.world.project_id))["id"]

    # ------------------------------------------------------------------ helpers

    def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """The model calls ``name`` once; its ``tool.finished`` body."""
        self.n += 1
        w = self.world
        body = w.run(run_tool, w.d, w.token, self.sid, f"r{self.n}", name, args)
        assert body["name"] == name, body
        self.model.calls.append(body["call_id"])
        return body

    def expect_ok(self, body: dict[str, Any], structured: dict[str, Any]) -> None:
        self.world.seen[f"{body['name']} ok"] += 1
        assert body["status"] == "ok" and body["error_code"] is None, body
        assert body["structured_content"] == structured, (body["structured_content"], structured)

    def expect_error(self, body: dict[str, Any], code: str) -> None:
        self.world.seen[f"{body['name']} {code}"] += 1
        assert body["status"] == "error" and body["error_code"] == code, (code, body)
        error = body["structured_content"]["error"]
        assert error["code"] == code and error["message"].strip(), body

    def edited(self, body: dict[str, Any], tool: str, real: str, given: str, after: bytes, units: int) -> None:
        """A successful editing call's answer, predicted from the bytes it met and the bytes
        ``after`` it; the model follows a change (an unchanged file is no edit to revert)."""
        before = self.model.files.get(real)
        changed = before != after
        self.expect_ok(body, {"path": given, "changed": changed, "units_applied": units,
                              "bytes_written": len(after) if changed else 0})
        if changed:
            self.model.files[real] = after
            e = Edit(body["call_id"], tool, real, before, after)
            self.model.edits.append(e)
            self.model.timeline.append(("edit", e))

    # ------------------------------------------------------------------ rules: the model's edits

    @initialize(contents=st.lists(CONTENT, min_size=len(PATHS), max_size=len(PATHS)))
    def start(self, contents: list[str]) -> None:
        """Each path created by the model first: the rules then meet files with a history."""
        for (real, given), content in zip(PATHS, contents):
            self.create((real, given), 0, content)

    @rule(at=st.sampled_from(PATHS), spelling=st.integers(0, 1), content=CONTENT)
    def create(self, at: tuple[str, str], spelling: int, content: str) -> None:
        real, given = at[0], at[spelling]
        body = self.call("edit_file", {"path": given, "mode": "create", "content": content})
        if real in self.model.files:
            self.expect_error(body, "ALREADY_EXISTS")
        else:
            self.edited(body, "edit_file", real, given, content.encode(), 1)
            self.model.dirs |= parents(real)  # (a create makes the directories it needs)

    @rule(at=st.sampled_from(PATHS), spelling=st.integers(0, 1), content=CONTENT)
    def rewrite(self, at: tuple[str, str], spelling: int, content: str) -> None:
        real, given = at[0], at[spelling]
        body = self.call("edit_file", {"path": given, "mode": "rewrite", "content": content})
        if real not in self.model.files:
            self.expect_error(body, "NOT_FOUND")
        else:
            self.edited(body, "edit_file", real, given, content.encode(), 1)

    def words(self, data: st.DataObject, real: str) -> str:
        """A word of the file at ``real`` (so that most edits and patches match), or any word
        (which may be in it nowhere, or twice)."""
        text = self.model.files.get(real, b"").decode()
        return pick(data, text.split() + WORDS)

    @rule(data=st.data(), at=st.sampled_from(PATHS), spelling=st.integers(0, 1), count=st.integers(1, 2),
          news=st.lists(st.tuples(st.sampled_from(WORDS), st.booleans()), min_size=2, max_size=2))
    def edit(self, data: st.DataObject, at: tuple[str, str], spelling: int, count: int,
             news: list[tuple[str, bool]]) -> None:
        real, given = at[0], at[spelling]
        edits = [(self.words(data, real), new, every) for new, every in news[:count]]
        body = self.call("edit_file", {"path": given, "mode": "edit", "edits": [
            {"old_string": old, "new_string": new, "replace_all": every} for old, new, every in edits]})
        if real not in self.model.files:
            return self.expect_error(body, "NOT_FOUND")
        text = self.model.files[real].decode()
        for old, new, every in edits:  # (in order, each on the result of the ones before)
            found = text.count(old)
            if found == 0:
                return self.expect_error(body, "NO_MATCH")
            if found > 1 and not every:
                return self.expect_error(body, "NOT_UNIQUE")
            text = text.replace(old, new)
        self.edited(body, "edit_file", real, given, text.encode(), len(edits))

    @rule(data=st.data(), at=st.sampled_from(PATHS), spelling=st.integers(0, 1), new=st.sampled_from(WORDS),
          invalid=st.integers(0, 3))
    def patch(self, data: st.DataObject, at: tuple[str, str], spelling: int, new: str, invalid: int) -> None:
        """A hunk that replaces one line (which may stand in the file nowhere, or twice); one
        draw in four an invalid patch instead."""
        real, given = at[0], at[spelling]
        old = self.words(data, real)
        if invalid == 3:
            text = INVALID_PATCHES[data.draw(st.integers(0, len(INVALID_PATCHES) - 1))]
            return self.expect_error(self.call("patch_file", {"path": given, "patch": text}), "INVALID_PATCH")
        body = self.call("patch_file", {"path": given, "patch": f"@@\n-{old}\n+{new}\n"})
        if real not in self.model.files:
            return self.expect_error(body, "NOT_FOUND")
        lines = self.model.files[real].decode().split("\n")[:-1]
        found = lines.count(old)
        if found != 1:
            return self.expect_error(body, "NO_MATCH" if found == 0 else "NOT_UNIQUE")
        lines[lines.index(old)] = new
        self.edited(body, "patch_file", real, given, "".join(w + "\n" for w in lines).encode(), 1)

    # ------------------------------------------------------------------ rules: outside the session

    @rule(at=st.sampled_from(PATHS), how=st.sampled_from(["write", "delete", "delete its directories"]),
          content=CONTENT)
    def outside(self, at: tuple[str, str], how: str, content: str) -> None:
        """A file written or deleted by another process (for the nested path, its directories
        removed with it)."""
        real, ws = at[0], self.world.workspace
        if how == "write":
            (ws / real).parent.mkdir(parents=True, exist_ok=True)
            (ws / real).write_bytes(content.encode())
            self.model.files[real] = content.encode()
            self.model.dirs |= parents(real)
        elif how == "delete" or not parents(real):
            (ws / real).unlink(missing_ok=True)
            self.model.files.pop(real, None)
        else:
            top = sorted(parents(real))[0]
            shutil.rmtree(ws / top, ignore_errors=True)
            self.model.files = {p: b for p, b in self.model.files.items() if not p.startswith(top + "/")}
            self.model.dirs = {d for d in self.model.dirs if d != top and not d.startswith(top + "/")}

    # ------------------------------------------------------------------ rules: revert_call

    @rule(data=st.data(), among=st.sampled_from(["latest", "edits", "any"]))
    def revert(self, data: st.DataObject, among: str) -> None:
        """``revert_call`` of: the latest call that changed a file and is not reverted yet (the
        common undo); one of the calls that changed a file, reverted or not; any call the model
        made (one that failed or changed nothing, a revert) or one it never made."""
        edits, revertible = [e.call_id for e in self.model.edits], list(self.model.revertible())
        target = pick(data, edits if among == "edits" and edits else ["call_never_made"] + self.model.calls)
        self.revert_call(revertible[-1] if among == "latest" and revertible else target)

    def revert_call(self, target: str) -> None:
        body = self.call("revert_call", {"call_id": target})
        e = self.model.revertible().get(target)
        if e is None:  # (failed, unchanged, reverted already, a revert itself, unknown)
            return self.expect_error(body, "NOTHING_TO_REVERT")
        now = self.model.files.get(e.path)
        if now != e.before and now != e.after:
            return self.expect_error(body, "CONFLICT")  # (nothing recorded: it stays revertible)
        self.expect_ok(body, {"call_id": target, "paths": [e.path]})
        self.world.seen["revert " + ("of a create" if e.before is None else "unchanged" if now == e.before else
                                     "of an older call" if e is not self.model.edits[-1] else "of the latest")] += 1
        if e.before is None:
            self.model.files.pop(e.path, None)
        else:
            self.model.files[e.path] = e.before
        e.reverted_by = body["call_id"]
        self.model.timeline.append(("revert", e))

    @rule(first=st.integers(0, len(PATHS) - 1), older=st.booleans())
    def undo(self, first: int, older: bool) -> None:
        """The common undo: a file's content changed (a line added) and that call reverted at
        once (the latest call), or after a change of another file (an older call). Each change
        is made where it cannot fail, so both kinds of revert are met whatever else was drawn."""
        at = [PATHS[first]] + ([PATHS[(first + 1) % len(PATHS)]] if older else [])
        changed = []
        for real, given in at:
            if real not in self.model.files:
                self.create((real, given), 0, "")
            self.rewrite((real, given), 0, (self.model.files[real] + b"delta\n").decode())
            changed.append(self.model.edits[-1].call_id)
        self.revert_call(changed[0])

    # ------------------------------------------------------------------ rules: the daemon's life

    @rule(now=st.booleans())
    def restart(self, now: bool) -> None:
        """Stop the daemon (its executor child with it) and start it again on the same root
        (one draw in two: a restart costs a new executor child, about 0.4 s)."""
        if not now:
            return
        w = self.world

        async def go() -> Daemon:
            await stop_daemon(w.d)
            return await w.factory(config=FAUX, root=w.d.root)

        w.d = w.run(go)
        w.seen["restart"] += 1

    # ------------------------------------------------------------------ invariants

    @invariant()
    def holds_after_every_step(self) -> None:
        w = self.world
        on_disk = {str(p.relative_to(w.workspace)): p.read_bytes() for p in w.workspace.rglob("*") if p.is_file()}
        assert on_disk == self.model.files
        assert {str(p.relative_to(w.workspace)) for p in w.workspace.rglob("*") if p.is_dir()} == self.model.dirs
        changes, view = w.run(self._changes_and_view)
        assert changes["sessionId"] == self.sid
        for f in changes["files"]:
            for e in f["edits"]:
                assert e["seq"] > 0 and e["taskId"], e
                del e["seq"], e["taskId"]
                if e["revertedBy"] is not None:
                    assert e["revertedBy"]["agentId"] == "main" and e["revertedBy"]["seq"] > 0, e
                    e["revertedBy"] = e["revertedBy"]["callId"]
        assert changes["files"] == self.model.changes()
        with LogReader(w.d.data_dir) as reader:
            seqs = [e.seq for e in reader.events(after=w.last_seq)]  # (read on: the log only grows)
            mine = list(reader.events(session_id=self.sid))
        assert seqs == list(range(w.last_seq + 1, w.last_seq + len(seqs) + 1)), "the log has a gap"
        w.last_seq += len(seqs)
        assert [e.session_seq for e in mine] == list(range(1, len(mine) + 1)), "the session's numbering has a gap"
        assert changes["lastSeq"] == mine[-1].seq
        state = fold(SessionState(self.sid), mine)
        assert json.loads(json.dumps(session_view(state))) == view, "the live view is not a fresh fold's"
        assert sorted(state.file_edits) == sorted(self.model.revertible())

    async def _changes_and_view(self) -> tuple[dict[str, Any], dict[str, Any]]:
        w = self.world
        r = await w.d.get(f"/sessions/{self.sid}/changes", w.token)
        assert r.status_code == 200, r.text
        v = await w.d.get(f"/sessions/{self.sid}", w.token)
        assert v.status_code == 200, v.text
        return r.json(), v.json()


async def test_a_workspace_file_history_through_edits_outside_changes_reverts_and_restarts(
        daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config=FAUX)
    token = await d.pair("files-machine", strong=True)
    world = World(d, daemon_factory, token, (await d.project(token))["id"], trio.lowlevel.current_trio_token())

    async def explore(seeded: int | None = None) -> None:
        machine: Any = type("Machine", (FileHistoryMachine,), {"world": world})
        if seeded is not None:
            machine = seed(seeded)(machine)
        await trio.to_thread.run_sync(lambda: run_state_machine_as_test(machine, settings=settings(
            max_examples=MAX_EXAMPLES, stateful_step_count=STEPS, deadline=None,
            suppress_health_check=list(HealthCheck))))

    await explore()
    assert world.examples >= MAX_EXAMPLES
    # The kinds of outcome the semantics distinguish were all met (a change that starves one of
    # them shows here, not as a machine that silently checks less). Only the committed,
    # derandomized run is held to it: fresh random examples lean to empty files, and a few dozen
    # of them may well not revert anything but creates. Even derandomized, Hypothesis mixes the
    # literals of the project's modules (those loaded by then) into its draws, so a change of
    # code anywhere changes the examples, and an outcome met a few times in one run may go unmet
    # in the next: up to EXTRA_RUNS more runs under fixed seeds are made before an outcome is
    # taken as starved.
    if settings.default.derandomize:
        for extra in range(1, EXTRA_RUNS + 1):
            if set(REACHED) <= set(world.seen):
                break
            await explore(seeded=extra)
        print(sorted(world.seen.items()))
        assert set(REACHED) <= set(world.seen), sorted(world.seen.items())


async def test_a_revert_after_the_directories_were_removed_makes_none_and_undoes_the_create(
        daemon_factory: DaemonFactory) -> None:
    """What the machine found (shrunk): with ``sub`` removed from outside, a revert of the
    nested file's rewrite is ``CONFLICT`` and leaves no directory made for it; a revert of its
    create finds the file absent, as it wants it: done, nothing to change."""
    d = await daemon_factory(config=FAUX)
    token = await d.pair("files-machine", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    ws = d.root / "workspaces" / "p"
    created = await run_tool(d, token, sid, "r1", "edit_file", {"path": "sub/dir/c.txt", "mode": "create",
                                                                "content": "alpha\n"})
    rewritten = await run_tool(d, token, sid, "r2", "edit_file", {"path": "sub/dir/c.txt", "mode": "rewrite",
                                                                  "content": "beta\n"})
    assert created["status"] == rewritten["status"] == "ok", (created, rewritten)
    shutil.rmtree(ws / "sub")
    refused = await run_tool(d, token, sid, "r3", "revert_call", {"call_id": rewritten["call_id"]})
    assert refused["error_code"] == "CONFLICT", refused
    assert "changed since that call" in refused["structured_content"]["error"]["message"]
    assert list(ws.iterdir()) == []
    undone = await run_tool(d, token, sid, "r4", "revert_call", {"call_id": created["call_id"]})
    assert undone["status"] == "ok", undone
    assert undone["structured_content"] == {"call_id": created["call_id"], "paths": ["sub/dir/c.txt"]}
    assert list(ws.iterdir()) == []
    [f] = (await d.get(f"/sessions/{sid}/changes", token)).json()["files"]
    assert [(e["callId"], e["reverted"]) for e in f["edits"]] == [(created["call_id"], True),
                                                                  (rewritten["call_id"], False)]
