"""F-HAR-3 over HTTP: browsing a session's workspace (through the real executor process) and the
session's changes, derived from its log (main agent and subagents, reverts included)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any, NamedTuple

import httpx2
import pytest
import trio

from runtime import workspace_api
from tests.procfs import processes

from .conftest import Daemon, DaemonFactory, error_of, raw_http, run_tool


class Browse(NamedTuple):
    """A daemon with a project and a session to browse: a strong and a read-only credential, the
    session's id and the project's workspace."""

    d: Daemon
    strong: str
    reader: str
    sid: str
    ws: Path

    async def get(self, route: str, params: Any = None) -> httpx2.Response:
        """``GET /sessions/{sid}/workspace/{route}`` (``tree``, ``file``) as the read-only client."""
        return await self.d.get(f"/sessions/{self.sid}/workspace/{route}", self.reader,
                                **({} if params is None else {"params": params}))


async def _browse(d: Daemon) -> Browse:
    strong = await d.pair("browse-strong", strong=True)
    reader = await d.pair("browse-reader")
    project = await d.project(strong, "browse")
    sid = (await d.session(strong, project["id"]))["id"]
    return Browse(d, strong, reader, sid, Path(project["workspace"]))


@pytest.fixture
async def browse(daemon_factory: DaemonFactory) -> Browse:
    """:class:`Browse` over a daemon on built-in defaults."""
    return await _browse(await daemon_factory())


def tree_paths(body: dict[str, Any]) -> list[str]:
    return [e["path"] for e in body["entries"]]


async def test_a_read_only_client_browses_the_tree_with_gitignore_and_credentials(browse: Browse):
    ws = browse.ws
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[remote] url = https://u:token@example.com\n")
    (ws / ".gitignore").write_text("*.log\nbuild/\n")
    (ws / "src").mkdir()
    (ws / "src" / "main.py").write_text("print('hi')\n")
    (ws / "debug.log").write_text("noise")
    (ws / "build").mkdir()
    (ws / ".env").write_text("API_KEY=SECRET\n")
    (ws / "src" / "server.key").write_text("-----BEGIN PRIVATE KEY-----\n")
    r = await browse.get("tree")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["path"] == "." and body["truncated"] is False and body["ignoredHidden"] == 2
    assert body["limit"] == 50_000 and body["ignored"] is False
    assert {e["name"]: (e["kind"], e["size"], e["sensitive"]) for e in body["entries"]} == {
        ".env": ("file", 15, True), ".gitignore": ("file", 13, False), "src": ("directory", None, False)}
    r = await browse.get("tree", {"depth": "2", "ignored": "true"})
    assert tree_paths(r.json()) == [".env", ".gitignore", "build", "debug.log", "src", "src/main.py",
                                    "src/server.key"]
    assert [e["path"] for e in r.json()["entries"] if e["ignored"]] == ["build", "debug.log"]
    r = await browse.get("tree", {"path": "src/"})
    assert r.status_code == 200 and tree_paths(r.json()) == ["src/main.py", "src/server.key"]
    r = await browse.get("file", {"path": "src/main.py"})
    assert r.status_code == 200, r.text
    assert r.json() == {"path": "src/main.py", "size": 12, "offset": 0, "nextOffset": 12, "eof": True,
                        "text": "print('hi')\n"}
    for path in (".env", "src/server.key", "./.env", ".ENV", "src//SERVER.Key"):
        r = await browse.get("file", {"path": path})
        assert r.status_code == 403 and error_of(r) == "SENSITIVE_FILE", (path, r.text)
        assert "SECRET" not in r.text and "PRIVATE" not in r.text
    os.symlink("../.env", ws / "src" / "config.txt")
    r = await browse.get("file", {"path": "src/config.txt"})
    assert r.status_code == 403 and error_of(r) == "SENSITIVE_FILE" and "SECRET" not in r.text
    r = await browse.get("file", {"path": ".git/config"})
    assert r.status_code == 403 and error_of(r) == "PATH_HIDDEN" and "token" not in r.text
    r = await browse.get("tree", {"path": ".git"})
    assert r.status_code == 403 and error_of(r) == "PATH_HIDDEN"


async def test_an_entry_listed_past_the_path_bound_is_refused_by_its_path_naming_the_bound(
        browse: Browse):
    # 18 levels of 240-byte names: the deepest paths are longer than the 4096 bytes a path may be.
    # The tree lists them (they exist); listing or reading one by its path is a 400 that says why.
    ws = browse.ws
    deep = ws.joinpath(*[f"{i:02d}" + "d" * 238 for i in range(18)])
    fd = os.open(ws, os.O_RDONLY)  # (made a level at a time: the whole host path is past PATH_MAX)
    try:
        for part in deep.relative_to(ws).parts:
            os.mkdir(part, dir_fd=fd)
            fd, parent = os.open(part, os.O_RDONLY, dir_fd=fd), fd
            os.close(parent)
        os.close(os.open("f.txt", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    finally:
        os.close(fd)
    r = await browse.get("tree", {"depth": "20"})
    assert r.status_code == 200, r.text[:300]
    listed = tree_paths(r.json())
    assert len(listed) == 19 and listed[-1].endswith("/f.txt")
    bound = workspace_api.MAX_PATH_BYTES
    under = [p for p in listed if len(p.encode()) <= bound]
    past = [p for p in listed if len(p.encode()) > bound]
    assert under and past
    r = await browse.get("tree", {"path": under[-1]})
    assert r.status_code == 200 and tree_paths(r.json()) == [past[0]]
    for route, path in (("tree", past[0]), ("file", past[-1])):
        r = await browse.get(route, {"path": path})
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", (route, r.text[:300])
        message = r.json()["error"]["message"]
        assert f"path is {len(path.encode())} bytes" in message and f"at most {bound} bytes" in message, message
        assert "cannot be listed or read by its path" in message


async def test_paths_must_be_relative_and_stay_inside(browse: Browse, tmp_path: Path):
    d, _, reader, sid, ws = browse
    (tmp_path / "outside.txt").write_text("outside secret\n")
    os.symlink(str(tmp_path / "outside.txt"), ws / "escape.txt")
    os.symlink(str(tmp_path), ws / "escape_dir")
    (ws / "ok.txt").write_text("ok\n")
    for route in ("tree", "file"):
        for bad in ("/etc/passwd", str(ws / "ok.txt"), "..", "../outside.txt", "a/../../x", "a\x00b", "", "x" * 4097):
            r = await browse.get(route, {"path": bad})
            # (INVALID_ARGUMENT, as every other malformed argument: it was PATH_INVALID, a second code)
            assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", (route, bad[:20], r.text)
        r = await browse.get(route, [("path", "ok.txt"), ("path", "x")])
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT"
    for path in ("escape.txt", "escape_dir/outside.txt"):
        r = await browse.get("file", {"path": path})
        assert r.status_code == 403 and error_of(r) == "PATH_OUTSIDE_WORKSPACE", r.text
        assert "outside secret" not in r.text and str(tmp_path) not in r.text
    r = await browse.get("tree", {"path": "escape_dir"})
    assert r.status_code == 403 and error_of(r) == "PATH_OUTSIDE_WORKSPACE"
    r = await browse.get("file")
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT"
    for target in ("path=%2e%2e%2fx", "path=%2Fetc%2Fpasswd", "path=ok.txt%00"):  # (encoded)
        r = await raw_http(d.port, "GET", f"/api/v1/sessions/{sid}/workspace/file?{target}",
                           {"Authorization": f"Bearer {reader}"})
        assert r.status == 400 and r.code == "INVALID_ARGUMENT", (target, r.body[:200])
    r = await browse.get("file", {"path": "missing.txt"})
    assert r.status_code == 404 and error_of(r) == "PATH_NOT_FOUND"
    r = await browse.get("tree", {"path": "ok.txt"})
    assert r.status_code == 422 and error_of(r) == "NOT_A_DIRECTORY"
    r = await browse.get("file", {"path": "."})
    assert r.status_code == 422 and error_of(r) == "NOT_A_FILE"


async def test_a_listed_name_with_a_backslash_is_read_and_listed_by_that_path(browse: Browse,
                                                                              tmp_path: Path):
    # The executor is POSIX: a backslash is a character of a name, never a separator, so a file
    # the tree lists as "a\\b.txt" is read by that path (a client follows the listing's paths);
    # a name made of dots and backslashes is one name, not a way out.
    d, _, reader, sid, ws = browse
    (tmp_path / "outside.txt").write_text("outside secret\n")
    (ws / "a\\b.txt").write_text("one name\n")
    (ws / "d\\e").mkdir()
    (ws / "d\\e" / "f.txt").write_text("inside\n")
    (ws / "..\\x").write_text("dots\n")
    r = await browse.get("tree", {"depth": "2"})
    assert r.status_code == 200, r.text
    listed = tree_paths(r.json())
    assert sorted(listed) == ["..\\x", "a\\b.txt", "d\\e", "d\\e/f.txt"], listed
    for path, text in (("a\\b.txt", "one name\n"), ("d\\e/f.txt", "inside\n"), ("..\\x", "dots\n")):
        r = await browse.get("file", {"path": path})
        assert r.status_code == 200 and (r.json()["path"], r.json()["text"]) == (path, text), (path, r.text)
    r = await browse.get("tree", {"path": "d\\e"})
    assert r.status_code == 200 and tree_paths(r.json()) == ["d\\e/f.txt"], r.text
    # (encoded, as a browser sends it)
    r = await raw_http(d.port, "GET", f"/api/v1/sessions/{sid}/workspace/file?path=a%5Cb.txt",
                       {"Authorization": f"Bearer {reader}"})
    assert r.status == 200 and b"one name" in r.body, r.body[:200]
    # Names with backslashes that the workspace does not hold are missing, never a way out.
    for path in ("..\\outside.txt", "a\\..\\..\\outside.txt", "ok\\txt"):
        r = await browse.get("file", {"path": path})
        assert (r.status_code, error_of(r)) == (404, "PATH_NOT_FOUND"), (path, r.text)
        assert "outside secret" not in r.text
    r = await browse.get("file", {"path": "a\\b.txt/../../outside.txt"})
    assert (r.status_code, error_of(r)) == (400, "INVALID_ARGUMENT")


async def test_limits_at_their_edges(browse: Browse):
    ws = browse.ws
    (ws / "t.txt").write_bytes("a€b".encode())
    (ws / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    ok = {"depth": ["1", "64"], "limit": ["1", "50000"]}
    bad = {"depth": ["0", "65", "-1", "x", "1.5", ""], "limit": ["0", "50001", "y"], "ignored": ["yes", "2"]}
    for name, values in ok.items():
        for v in values:
            r = await browse.get("tree", {name: v})
            assert r.status_code == 200, (name, v, r.text)
    for name, values in bad.items():
        for v in values:
            r = await browse.get("tree", {name: v})
            assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", (name, v, r.text)
    r = await browse.get("tree", {"limit": "1"})
    assert tree_paths(r.json()) == ["image.png"] and r.json()["truncated"] is True
    page = (await browse.get("file", {"path": "t.txt", "limit": "2"})).json()
    assert (page["text"], page["nextOffset"], page["eof"]) == ("a", 1, False)
    page = (await browse.get("file", {"path": "t.txt", "offset": "1", "limit": "1"})).json()
    assert (page["text"], page["nextOffset"]) == ("€", 4)
    for params, code in (({"offset": "2"}, "INVALID_ARGUMENT"), ({"offset": "6"}, "INVALID_ARGUMENT"),
                         ({"limit": "0"}, "INVALID_ARGUMENT"), ({"limit": str(1024 * 1024 + 1)}, "INVALID_ARGUMENT"),
                         ({"offset": "-1"}, "INVALID_ARGUMENT")):
        r = await browse.get("file", {"path": "t.txt", **params})
        assert r.status_code == 400 and error_of(r) == code, (params, r.text)
    r = await browse.get("file", {"path": "t.txt", "limit": str(1024 * 1024)})
    assert r.status_code == 200 and r.json()["text"] == "a€b"
    r = await browse.get("file", {"path": "image.png"})
    assert r.status_code == 422 and error_of(r) == "BINARY_FILE"


async def test_a_tree_of_50001_entries_stops_at_50000(browse: Browse):
    ws = browse.ws

    def make() -> None:
        (ws / "many").mkdir()
        for i in range(50_000):
            os.close(os.open(ws / "many" / f"f{i:05d}", os.O_CREAT | os.O_WRONLY, 0o644))

    await trio.to_thread.run_sync(make)
    r = await browse.get("tree", {"path": "many"})  # exactly 50,000
    assert r.status_code == 200 and len(r.json()["entries"]) == 50_000 and r.json()["truncated"] is False
    r = await browse.get("tree", {"depth": "2"})  # "many" + 50,000
    body = r.json()
    assert len(body["entries"]) == 50_000 and body["truncated"] is True
    assert body["entries"][0]["path"] == "many" and body["entries"][-1]["path"] == "many/f49998"


async def test_auth_unknown_and_deleted_sessions(browse: Browse):
    d, strong, reader, sid, ws = browse
    (ws / "a.txt").write_text("a\n")
    for route, params in (("workspace/tree", {}), ("workspace/file", {"path": "a.txt"}), ("changes", {})):
        r = await d.get(f"/sessions/{sid}/{route}", None, params=params)
        assert r.status_code == 401 and error_of(r) == "AUTH_REQUIRED"
        r = await d.get(f"/sessions/{sid}/{route}", "lens_" + "A" * 43, params=params)
        assert r.status_code == 401
        r = await d.get(f"/sessions/ses_nope/{route}", reader, params=params)
        assert r.status_code == 404 and error_of(r) == "SESSION_NOT_FOUND"
        r = await d.get(f"/sessions/bad%20id/{route}", reader, params=params)
        assert r.status_code == 400
    r = await d.request("DELETE", f"/sessions/{sid}", strong)
    assert r.status_code == 200, r.text
    for route, params in (("workspace/tree", {}), ("workspace/file", {"path": "a.txt"})):
        r = await d.get(f"/sessions/{sid}/{route}", reader, params=params)
        assert r.status_code == 409 and error_of(r) == "SESSION_DELETED"
    r = await d.get(f"/sessions/{sid}/changes", reader)  # its history stays readable, as its events
    assert r.status_code == 200 and r.json()["files"] == []


def tool(name: str, args: dict[str, Any]) -> str:
    return f"/tool {name} {json.dumps(args)}"


async def test_changes_list_the_edits_of_every_agent_and_reverts(browse: Browse):
    d, strong, reader, sid, ws = browse
    (ws / "old.txt").write_text("one\ntwo\n")
    await d.submit(strong, sid, "r1", tool("edit_file", {"path": "new.txt", "mode": "create", "content": "hello\n"}))
    await d.wait_idle(strong, sid)
    await d.submit(strong, sid, "r2", tool("subagent", {"prompt": tool("patch_file", {
        "path": "./old.txt", "patch": "@@\n one\n-two\n+TWO\n"})}))
    await d.wait_idle(strong, sid)
    await d.submit(strong, sid, "r3", tool("edit_file", {"path": "gone.txt", "mode": "create", "content": "x"}))
    await d.wait_idle(strong, sid)
    assert (ws / "old.txt").read_text() == "one\nTWO\n" and (ws / "gone.txt").exists()
    events = await d.events(strong, sid)
    started = {e["body"]["call_id"]: e for e in events if e["kind"] == "tool.started"}
    edited = {e["body"]["path"]: e for e in events if e["kind"] == "file.edited"}
    gone_call = edited["gone.txt"]["body"]["call_id"]
    await d.submit(strong, sid, "r4", tool("revert_call", {"call_id": gone_call}))
    await d.wait_idle(strong, sid)
    assert not (ws / "gone.txt").exists()
    events = await d.events(strong, sid)
    [reverted] = [e for e in events if e["kind"] == "file.reverted"]

    r = await d.get(f"/sessions/{sid}/changes", reader)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["sessionId"] == sid and body["lastSeq"] == events[-1]["seq"]
    files = {f["path"]: f for f in body["files"]}
    assert list(files) == ["gone.txt", "new.txt", "old.txt"]
    new, old, gone = files["new.txt"], files["old.txt"], files["gone.txt"]
    assert (new["status"], new["bytes"], new["bytesBefore"], new["agents"]) == ("created", 6, None, ["main"])
    [e] = new["edits"]
    assert e["tool"] == "edit_file" and e["change"] == "created" and e["agentId"] == "main"
    assert e["seq"] == edited["new.txt"]["seq"] and e["callId"] == edited["new.txt"]["body"]["call_id"]
    assert e["reverted"] is False and e["revertedBy"] is None and e["callId"] in started
    # the subagent's patch, its path as the tool was given it ("./old.txt") made workspace-relative
    assert (old["status"], old["bytes"], old["bytesBefore"]) == ("modified", 8, 8)
    [e] = old["edits"]
    assert e["tool"] == "patch_file" and e["agentId"].startswith("sub_") and old["agents"] == [e["agentId"]]
    assert e["taskId"] == edited["./old.txt"]["task_id"]
    assert (gone["status"], gone["bytes"]) == ("reverted", None)
    [e] = gone["edits"]
    assert e["reverted"] is True and e["change"] == "created"
    assert e["revertedBy"] == {"callId": reverted["body"]["call_id"], "agentId": "main", "seq": reverted["seq"]}


async def test_changes_name_the_file_an_edit_wrote_through_symlinks(browse: Browse):
    # The listing named files by the path the edit was given, tidied as text: `l/../f.txt`, where
    # `l` links to `d/e`, wrote `d/f.txt` (`..` after a link goes up from where the link leads)
    # but was listed as `f.txt`, and one file edited by two names was listed twice.
    d, strong, reader, sid, ws = browse
    (ws / "d" / "e").mkdir(parents=True)
    (ws / "d" / "f.txt").write_text("one\n")
    (ws / "l").symlink_to("d/e")
    (ws / "lf").symlink_to("d/f.txt")
    steps = [("l/../f.txt", {"mode": "rewrite", "content": "two\n"}),
             ("d/f.txt", {"mode": "edit", "edits": [{"old_string": "two", "new_string": "three"}]}),
             ("lf", {"mode": "rewrite", "content": "four\n"}),
             ("l/new.txt", {"mode": "create", "content": "hi\n"}),
             ("./l/../f.txt", {"mode": "rewrite", "content": "five\n"})]
    for n, (path, args) in enumerate(steps):
        await d.submit(strong, sid, f"r{n}", tool("edit_file", {"path": path, **args}))
        await d.wait_idle(strong, sid)
    assert (ws / "d" / "f.txt").read_text() == "five\n" and (ws / "d" / "e" / "new.txt").read_text() == "hi\n"
    assert not (ws / "f.txt").exists() and (ws / "lf").is_symlink()
    events = await d.events(strong, sid)
    edited = [e["body"] for e in events if e["kind"] == "file.edited"]
    assert [e["path"] for e in edited] == [path for path, _ in steps]  # (recorded as given: revert_call's)
    r = await d.get(f"/sessions/{sid}/changes", reader)
    assert r.status_code == 200, r.text
    files = {f["path"]: f for f in r.json()["files"]}
    assert list(files) == ["d/e/new.txt", "d/f.txt"]
    f = files["d/f.txt"]
    assert (f["status"], f["bytes"], f["bytesBefore"]) == ("modified", 5, 4)
    assert [e["callId"] for e in f["edits"]] == [e["call_id"] for e in edited if e["path"] != "l/new.txt"]
    assert files["d/e/new.txt"]["status"] == "created"


async def test_an_edit_through_a_link_to_a_name_that_is_not_utf8_is_recorded(browse: Browse):
    # The file written was recorded as its name, which the log's text cannot hold: the edit was
    # made, then answered RESULT_NOT_RECORDED, with no file history (nothing listed, no revert).
    d, strong, reader, sid, ws = browse
    root = os.fsencode(ws)
    os.makedirs(root + b"/\xff")
    os.symlink(b"\xff", root + b"/ln")
    body = await run_tool(d, strong, sid, "r1", "edit_file", {"path": "ln/f.txt", "mode": "create", "content": "x\n"})
    assert body["status"] == "ok", body
    r = await d.get(f"/sessions/{sid}/changes", reader)
    assert [(f["path"], f["status"]) for f in r.json()["files"]] == [("ln/f.txt", "created")]  # (by the path given)
    body = await run_tool(d, strong, sid, "r2", "revert_call", {"call_id": body["call_id"]})
    assert body["status"] == "ok", body
    assert not os.path.exists(root + b"/\xff/f.txt")


async def test_a_revert_restores_the_file_the_edit_wrote_though_its_link_was_retargeted(
        browse: Browse):
    # revert_call restored through the path as given: `lf` retargeted from a.txt to b.txt since
    # the edit put the old bytes into b.txt (which held the edit's bytes too) and left a.txt as
    # the edit made it; `ld` retargeted from d1 to d2 removed d2/f.txt, not the file it created.
    d, strong, reader, sid, ws = browse
    (ws / "a.txt").write_text("one\n")
    (ws / "b.txt").write_text("two\n")
    (ws / "d1").mkdir()
    (ws / "d2").mkdir()
    (ws / "lf").symlink_to("a.txt")
    (ws / "ld").symlink_to("d1")
    calls = []
    for n, args in enumerate(({"path": "lf", "mode": "rewrite", "content": "X\n"},
                              {"path": "ld/f.txt", "mode": "create", "content": "Y\n"})):
        body = await run_tool(d, strong, sid, f"r{n}", "edit_file", args)
        assert body["status"] == "ok", body
        calls.append(body["call_id"])
    for link, to in (("lf", "b.txt"), ("ld", "d2")):
        (ws / link).unlink()
        (ws / link).symlink_to(to)
    (ws / "b.txt").write_text("X\n")
    (ws / "d2" / "f.txt").write_text("Y\n")
    for n, call_id in enumerate(calls):
        body = await run_tool(d, strong, sid, f"v{n}", "revert_call", {"call_id": call_id})
        assert body["status"] == "ok", body
    assert (ws / "a.txt").read_text() == "one\n" and (ws / "b.txt").read_text() == "X\n"
    assert not (ws / "d1" / "f.txt").exists() and (ws / "d2" / "f.txt").read_text() == "Y\n"
    reverted = [e["body"] for e in await d.events(strong, sid) if e["kind"] == "file.reverted"]
    assert [r["paths"] for r in reverted] == [["a.txt"], ["d1/f.txt"]]
    r = await d.get(f"/sessions/{sid}/changes", reader)
    assert {f["path"]: f["status"] for f in r.json()["files"]} == {"a.txt": "reverted", "d1/f.txt": "reverted"}


async def test_a_fork_that_reverts_an_edit_it_inherited_lists_that_change(browse: Browse):
    # A fork keeps its source's edits up to the fork point revertible (its context holds those
    # calls): reverting one changes the workspace, so the fork's changes list it (they listed
    # nothing, the source's edit being in the source's log only).
    d, strong, reader, sid, ws = browse
    (ws / "old.txt").write_text("one\n")
    await d.submit(strong, sid, "r1", tool("edit_file", {"path": "old.txt", "mode": "rewrite", "content": "ONE!\n"}))
    await d.wait_idle(strong, sid)
    await d.submit(strong, sid, "r2", tool("edit_file", {"path": "new.txt", "mode": "create", "content": "hi\n"}))
    await d.wait_idle(strong, sid)
    events = await d.events(strong, sid)
    calls = {e["body"]["path"]: e["body"]["call_id"] for e in events if e["kind"] == "file.edited"}
    r = await d.post(f"/sessions/{sid}/fork", strong, {"seq": events[-1]["seq"]})
    assert r.status_code == 201, r.text
    fork = r.json()["id"]
    for rid, path in (("f1", "old.txt"), ("f2", "new.txt")):
        await d.submit(strong, fork, rid, tool("revert_call", {"call_id": calls[path]}))
        await d.wait_idle(strong, fork)
    assert (ws / "old.txt").read_text() == "one\n" and not (ws / "new.txt").exists()
    fevents = await d.events(strong, fork)
    reverts = [e for e in fevents if e["kind"] == "file.reverted"]
    assert len(reverts) == 2
    r = await d.get(f"/sessions/{fork}/changes", reader)
    assert r.status_code == 200, r.text
    files = {f["path"]: f for f in r.json()["files"]}
    assert list(files) == ["new.txt", "old.txt"]
    assert (files["old.txt"]["status"], files["old.txt"]["bytes"], files["old.txt"]["bytesBefore"]) == ("modified", 4, 5)
    assert (files["new.txt"]["status"], files["new.txt"]["bytes"], files["new.txt"]["bytesBefore"]) == ("deleted", None, 3)
    [e] = files["old.txt"]["edits"]
    assert (e["callId"], e["tool"], e["change"], e["seq"]) == (
        reverts[0]["body"]["call_id"], "revert_call", "modified", reverts[0]["seq"])
    assert files["new.txt"]["edits"][0]["change"] == "deleted"
    # the source's own list is unchanged: its edits, not reverted there
    r = await d.get(f"/sessions/{sid}/changes", reader)
    assert {f["path"]: f["status"] for f in r.json()["files"]} == {"new.txt": "created", "old.txt": "modified"}


async def test_a_file_inside_a_credential_directory_is_listed_as_sensitive(browse: Browse):
    # A read refuses any path with a credential name among its components; the listing's flag
    # says the same of the entries inside such a directory (a client can tell what it may read).
    ws = browse.ws
    (ws / ".env.d").mkdir()
    (ws / ".env.d" / "prod.txt").write_text("TOKEN=SECRET\n")
    (ws / "certs.PEM").mkdir()
    (ws / "certs.PEM" / "notes.md").write_text("PRIVATE\n")
    r = await browse.get("tree", {"depth": "2"})
    assert r.status_code == 200, r.text
    assert {e["path"]: e["sensitive"] for e in r.json()["entries"]} == {
        ".env.d": True, "certs.PEM": True, ".env.d/prod.txt": True, "certs.PEM/notes.md": True}
    r = await browse.get("tree", {"path": ".env.d"})
    assert [(e["path"], e["sensitive"]) for e in r.json()["entries"]] == [(".env.d/prod.txt", True)]
    for path in (".env.d/prod.txt", "certs.PEM/notes.md"):
        r = await browse.get("file", {"path": path})
        assert (r.status_code, error_of(r)) == (403, "SENSITIVE_FILE") and "SECRET" not in r.text


async def test_a_hard_link_to_a_credential_file_is_not_read(browse: Browse):
    # A hard link gives a credential file another name that no rule of names recognises; a file
    # with more than one name is neither read nor listed as readable.
    ws = browse.ws
    (ws / ".env").write_text("API_KEY=SECRET\n")
    os.link(ws / ".env", ws / "notes.txt")
    (ws / "plain.txt").write_text("plain\n")
    r = await browse.get("tree")
    assert {e["path"]: e["sensitive"] for e in r.json()["entries"]} == {
        ".env": True, "notes.txt": True, "plain.txt": False}
    # (HARD_LINKED, as the file tools say of it: SENSITIVE_FILE is a credential file's name)
    r = await browse.get("file", {"path": "notes.txt"})
    assert (r.status_code, error_of(r)) == (403, "HARD_LINKED") and "SECRET" not in r.text, r.text
    assert "more than one name" in r.json()["error"]["message"]
    os.symlink("notes.txt", ws / "link.txt")  # (a symlink to it: the same file, refused the same way)
    r = await browse.get("file", {"path": "link.txt"})
    assert (r.status_code, error_of(r)) == (403, "HARD_LINKED") and "SECRET" not in r.text, r.text
    os.unlink(ws / ".env")  # (one name left: an ordinary file again)
    r = await browse.get("file", {"path": "notes.txt"})
    assert r.status_code == 200 and r.json()["text"] == "API_KEY=SECRET\n"


async def test_a_long_gitignore_applies_its_first_and_last_lines(browse: Browse):
    # Patterns are matched a group at a time (tools/files/gitignore.py; equal answers to one at a
    # time: tests/files/test_gitignore.py). A 1 MiB .gitignore against 6,000 entries used to run
    # past the executor call's 60 s deadline (measured: 503 after 63 s; 11 s since); here a
    # smaller one checks the answers through the route: its first and last lines still apply.
    ws = browse.ws
    filler = "\n".join(f"pat{i}*/x[a-z]?/**/y{i}" for i in range(3000))
    (ws / ".gitignore").write_text("*.log\n" + filler + "\n!important.log\n")

    def make() -> None:
        for i in range(300):
            os.close(os.open(ws / f"f{i:04d}.txt", os.O_CREAT | os.O_WRONLY, 0o644))
        (ws / "debug.log").write_text("x")
        (ws / "important.log").write_text("x")

    await trio.to_thread.run_sync(make)
    r = await browse.get("tree")
    assert r.status_code == 200, r.text
    body = r.json()
    names = [e["name"] for e in body["entries"]]
    assert len(names) == 302 and "important.log" in names and "debug.log" not in names
    assert body["ignoredHidden"] == 1 and body["truncated"] is False


def executor_child_of_this_process(workspace: Path) -> int:
    """The pid of the executor the daemon (in this process) spawned for ``workspace``."""
    found = [p.pid for p in processes() if p.ppid == os.getpid() and b"executor" in p.argv
             and b"serve" in p.argv and os.fsencode(workspace) in p.argv]
    assert len(found) == 1, found
    return found[0]


async def test_a_listing_past_the_deadline_is_504_executor_timeout_not_503(
        browse: Browse, monkeypatch: pytest.MonkeyPatch):
    # A listing that outlives the executor call's deadline found the executor up (as a rule: a
    # huge tree); it answered 503 EXECUTOR_UNAVAILABLE, as for an executor that is down. Here the
    # executor is stopped (SIGSTOP) once it served a listing: its connection stays open, and it
    # can never answer within any deadline (made short, so the test does not wait a minute).
    monkeypatch.setattr(workspace_api, "BROWSE_TIMEOUT_S", 1.0)
    ws = browse.ws
    (ws / "a.txt").write_text("x")
    r = await browse.get("tree")
    assert r.status_code == 200, r.text
    pid = executor_child_of_this_process(ws)
    os.kill(pid, signal.SIGSTOP)
    try:
        for route, params in (("tree", {}), ("file", {"path": "a.txt"})):
            r = await browse.get(route, params)
            assert (r.status_code, error_of(r)) == (504, "EXECUTOR_TIMEOUT"), r.text
            assert "did not answer within the call's deadline (DEADLINE_EXCEEDED" in r.json()["error"]["message"]
    finally:
        os.kill(pid, signal.SIGCONT)
    r = await browse.get("tree")  # the same executor, answering again
    assert r.status_code == 200 and tree_paths(r.json()) == ["a.txt"], r.text
    assert executor_child_of_this_process(ws) == pid


async def test_a_file_opening_with_a_stray_continuation_byte_is_binary_not_a_bad_offset(browse: Browse):
    # Found by the confinement property: a text file in Windows-1252 opening with a curly quote
    # (0x93, a UTF-8 continuation byte), read from its start, was 400 INVALID_ARGUMENT "offset 0
    # is inside a UTF-8 character" — blaming an offset no character can split for the file's bytes
    # (read_file had been fixed for the same thing). It is the file that is not UTF-8 text.
    ws = browse.ws
    (ws / "quote.txt").write_bytes("\u201chi\u201d\n".encode("cp1252"))
    (ws / "t.txt").write_bytes(b"ab\x93cd\n")
    r = await browse.get("file", {"path": "quote.txt"})
    assert r.status_code == 422 and error_of(r) == "BINARY_FILE", r.text
    assert "quote.txt" in r.json()["error"]["message"] and "byte 0" in r.json()["error"]["message"], r.text
    r = await browse.get("file", {"path": "t.txt", "offset": "2"})
    assert r.status_code == 422 and error_of(r) == "BINARY_FILE", r.text
    (ws / "e.txt").write_bytes("a\u20acb\n".encode())  # a real split stays the offset's fault
    r = await browse.get("file", {"path": "e.txt", "offset": "2"})
    assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", r.text


@pytest.mark.parametrize("route, tool, params, expected", [
    ("tree", "browse_list", {}, lambda body: tree_paths(body) == ["a.txt"]),
    ("file", "browse_read", {"path": "a.txt"}, lambda body: body["text"] == "x\n"),
])
async def test_a_read_whose_executor_dies_under_it_runs_once_more(
        daemon_factory: DaemonFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        route: str, tool: str, params: dict[str, str], expected: Any):
    # Browsing is a read: one whose local child is SIGKILLed as it takes the call (the executor's
    # test hold, LENS_EXECUTOR_TEST_HOLD) answers from the child spawned in its place, not 503,
    # and says so (rerunAfter: the code the first run ended with); a read that ran once does not.
    from tools.executor.server import TEST_HOLD_ENV, TEST_HOOKS_ENV

    hold = tmp_path / "hold"
    monkeypatch.setenv(TEST_HOOKS_ENV, "1")
    monkeypatch.setenv(TEST_HOLD_ENV, str(hold))
    browse = await _browse(await daemon_factory())  # (the executor's test hooks set first)
    ws = browse.ws
    (ws / "a.txt").write_text("x\n")
    before = await browse.get(route, params)  # (its child runs)
    assert before.status_code == 200 and "rerunAfter" not in before.json(), before.text
    first = executor_child_of_this_process(ws)
    hold.write_text(f"call:{tool}")
    held = Path(f"{hold}.held")
    result: list[Any] = []

    async def get() -> None:
        result.append(await browse.get(route, params))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(get)
            while not held.exists():
                await trio.sleep(0.01)
            assert int(held.read_text()) == first
            os.kill(first, signal.SIGKILL)
    r = result[0]
    assert r.status_code == 200 and expected(r.json()), r.text
    assert r.json()["rerunAfter"] == "EXECUTOR_UNAVAILABLE"
    assert executor_child_of_this_process(ws) != first
    after = await browse.get(route, params)
    assert after.status_code == 200 and expected(after.json()) and "rerunAfter" not in after.json(), after.text


async def test_gitignore_lines_with_posix_classes_and_reversed_ranges_apply_as_git_reads_them(
        browse: Browse):
    # "[z-a]" made the listing fail (the line's expression did not compile) and "[[:digit:]]"
    # matched nothing, so files git ignores were shown (git's answers: tests/files/test_gitignore.py).
    ws = browse.ws
    (ws / ".gitignore").write_text("[[:digit:]]*.log\n[z-a]\nx[[:upper:][:space:]]y\nunclosed[x\n")
    for name in ("1.log", "a.log", "z", "m", "xAy", "x y", "xay", "unclosed[x"):
        (ws / name).write_text("x")
    r = await browse.get("tree")
    assert r.status_code == 200, r.text
    # (git: a class it cannot close makes the line match nothing, "[" included)
    assert tree_paths(r.json()) == [".gitignore", "a.log", "m", "unclosed[x", "xay"]
    assert r.json()["ignoredHidden"] == 4


async def test_a_path_whose_encoded_bytes_are_not_utf8_is_refused_not_read_as_another_name(browse: Browse):
    # "path=%ff" names the byte 0xFF, which no UTF-8 text holds. The query's parser keeps such
    # bytes percent-encoded, so it was read as the three characters "%FF": a file named "%FF"
    # was served in its place, and "bad%fe.txt" answered "bad%FE.txt: no such file", a name the
    # client never sent.
    d, _, reader, sid, ws = browse
    (ws / "%FF").write_text("another file\n")
    (ws / "bad%FE.txt").write_text("another file\n")
    (ws / "d%C3").mkdir()
    (ws / "é.txt").write_text("e acute\n")
    for route, target in (("file", "path=%ff"), ("file", "path=bad%fe.txt"), ("file", "path=%C3%28"),
                          ("file", "path=%ED%A0%80"), ("tree", "path=d%c3"), ("tree", "depth=1&path=%ff")):
        r = await raw_http(d.port, "GET", f"/api/v1/sessions/{sid}/workspace/{route}?{target}",
                           {"Authorization": f"Bearer {reader}"})
        assert (r.status, r.code) == (400, "INVALID_ARGUMENT"), (target, r.body[:300])
        assert b"another file" not in r.body
        message = r.json()["error"]["message"]
        assert message.startswith("path is not UTF-8") and target.split("path=")[1] in message, message
    # "%25FF" is the text "%FF" itself, and UTF-8 encoded, as a client sends it, reads its file
    for target, text in (("path=%25FF", "another file\n"), ("path=%C3%A9.txt", "e acute\n")):
        r = await raw_http(d.port, "GET", f"/api/v1/sessions/{sid}/workspace/file?{target}",
                           {"Authorization": f"Bearer {reader}"})
        assert r.status == 200 and r.json()["text"] == text, (target, r.body[:300])
