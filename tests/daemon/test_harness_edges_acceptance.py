"""F-HAR-1, F-HAR-3 and F-ACT-5 at the edges a user meets, through the running daemon (the real
executor over gRPC, the faux model calling tools from ``/tool NAME {json}`` inputs): a question
answered through another session's path, answer and skip raced from two clients, unknown option
ids named and cut, the todo list's bound at its limit and one past it and a list emptied, a
subagent's tools list of main-only tools, `.gitignore` negations, nested files and a byte-order
mark, credential files of several names, and "changes this session" after a failed edit and
across a fork. What the other ``*_acceptance.py`` modules, ``test_workspace_browse.py``,
``test_todo_and_question_limits.py`` and ``test_history_routes.py`` already pin is not redone.
Every wait is bounded (conftest ``wait_until``)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from .conftest import Daemon, error_of, question_opened, race, run_tool, wait_until


def tool(name: str, args: dict[str, Any]) -> str:
    return f"/tool {name} {json.dumps(args)}"


QUESTION = {"id": "q", "text": "Which colour?", "options": [{"id": "r", "label": "red"}, {"id": "b", "label": "blue"}]}


async def _project_session(d: Daemon, token: str) -> tuple[str, str, Path]:
    project = await d.project(token)
    sid = (await d.session(token, project["id"]))["id"]
    return project["id"], sid, Path(project["workspace"])


async def _asked(d: Daemon, token: str, sid: str, rid: str) -> str:
    return await question_opened(d, token, sid, rid, tool("ask_user", {"questions": [QUESTION]}))


async def test_a_question_is_answered_through_its_own_session_only(daemon: Daemon):
    # Two sessions of one project, each asking: the question ids may be alike (they are made of
    # the call's id), so an answer sent through one session's path must settle that session's
    # question and never the other's, and a question id another session holds is not found here.
    token = await daemon.pair("q-client", strong=True)
    project_id, a, _ = await _project_session(daemon, token)
    b = (await daemon.session(token, project_id))["id"]
    qa = await _asked(daemon, token, a, "ra")
    r = await daemon.post(f"/sessions/{b}/questions/{qa}/answer", token, {"kind": "skip"})
    assert (r.status_code, error_of(r)) == (404, "QUESTION_NOT_FOUND"), r.text
    assert qa in r.json()["error"]["message"], r.text
    assert (await daemon.view(token, a))["status"] == "awaiting_answer"
    qb = await _asked(daemon, token, b, "rb")
    r = await daemon.post(f"/sessions/{b}/questions/{qb}/answer", token, {"kind": "answer", "optionIds": ["b"]})
    assert r.status_code == 200 and r.json()["duplicate"] is False, r.text
    await daemon.wait_idle(token, b)
    view_a = await daemon.view(token, a)
    assert view_a["status"] == "awaiting_answer" and [q["questionId"] for q in view_a["questions"]] == [qa]
    assert not [e for e in await daemon.events(token, a) if e["kind"] == "question.answered"]
    r = await daemon.post(f"/sessions/{a}/questions/{qa}/answer", token, {"kind": "answer", "optionIds": ["r"]})
    assert r.status_code == 200 and r.json()["answer"] == {"kind": "answer", "optionIds": ["r"]}, r.text
    await daemon.wait_idle(token, a)
    [answered_a] = [e["body"]["answer"] for e in await daemon.events(token, a) if e["kind"] == "question.answered"]
    [answered_b] = [e["body"]["answer"] for e in await daemon.events(token, b) if e["kind"] == "question.answered"]
    assert (answered_a["optionIds"], answered_b["optionIds"]) == (["r"], ["b"])


async def test_an_answer_and_a_skip_raced_from_two_clients_one_wins_and_the_other_is_shown_it(daemon: Daemon):
    one = await daemon.pair("q-one", strong=True)
    two = await daemon.pair("q-two", strong=True)
    _, sid, _ = await _project_session(daemon, one)
    qid = await _asked(daemon, one, sid, "r1")
    path = f"/sessions/{sid}/questions/{qid}/answer"
    # unknown option, empty options without text: refused, naming the problem, nothing settled
    for body, named in (({"kind": "answer", "optionIds": ["green"]}, "green"),
                        ({"kind": "answer", "optionIds": []}, "at least one option id or some text")):
        r = await daemon.post(path, two, body)
        assert (r.status_code, error_of(r)) == (422, "ANSWER_INVALID"), r.text
        assert named in r.json()["error"]["message"]
    assert (await daemon.view(one, sid))["status"] == "awaiting_answer"
    results = dict(zip(("answer", "skip"), await race(
        partial(daemon.post, path, one, {"kind": "answer", "optionIds": ["r"], "text": "bright"}),
        partial(daemon.post, path, two, {"kind": "skip"}))))
    assert all(r.status_code == 200 for r in results.values()), {k: r.text for k, r in results.items()}
    [winner] = [k for k, r in results.items() if r.json()["duplicate"] is False]
    [loser] = [k for k in results if k != winner]
    won = results[winner].json()["answer"]
    assert results[loser].json()["duplicate"] is True and results[loser].json()["answer"] == won
    await daemon.wait_idle(one, sid)
    events = await daemon.events(one, sid)
    assert [e["body"]["answer"] for e in events if e["kind"] == "question.answered"] == [won]
    # settled: another answer is the duplicate (a valid one) or refused as invalid (an invalid one)
    r = await daemon.post(path, two, {"kind": "answer", "optionIds": ["b"]})
    assert r.status_code == 200 and r.json()["duplicate"] is True and r.json()["answer"] == won


async def test_an_unknown_option_id_is_named_quoted_and_cut_and_the_options_are_listed(daemon: Daemon):
    # "unknown option ids: " named nothing for an empty id, and an unknown id (or thousands of
    # them) was echoed whole into the message: 10,000 characters back for one long id.
    token = await daemon.pair("q-client", strong=True)
    _, sid, _ = await _project_session(daemon, token)
    qid = await _asked(daemon, token, sid, "r1")
    path = f"/sessions/{sid}/questions/{qid}/answer"
    for option_ids, named in (([""], "''"), (["r", "green"], "'green'"), (["x" * 10_000], "'xxx"),
                              ([f"u{i}" for i in range(5_000)], "'u0'")):
        r = await daemon.post(path, token, {"kind": "answer", "optionIds": option_ids})
        assert (r.status_code, error_of(r)) == (422, "ANSWER_INVALID"), r.text[:300]
        message = r.json()["error"]["message"]
        assert named in message and len(message) < 400, message[:500]
        assert "the options are 'r', 'b'" in message, message
    r = await daemon.post(path, token, {"kind": "answer", "optionIds": [f"u{i}" for i in range(5_000)]})
    assert "(5000 in all)" in r.json()["error"]["message"]
    assert (await daemon.view(token, sid))["status"] == "awaiting_answer"


async def test_the_todo_list_takes_200_items_refuses_201_and_is_emptied_by_an_empty_list(daemon: Daemon):
    token = await daemon.pair("todo-client", strong=True)
    _, sid, _ = await _project_session(daemon, token)
    items = [{"id": f"t{i}", "text": f"step {i}", "status": "pending"} for i in range(200)]
    body = await run_tool(daemon, token, sid, "r1", "todo", {"items": items})
    assert body["status"] == "ok", body
    assert (await daemon.view(token, sid))["todos"] == items
    body = await run_tool(daemon, token, sid, "r2", "todo",
                          {"items": items + [{"id": "t200", "text": "one more", "status": "pending"}]})
    assert (body["status"], body["error_code"]) == ("error", "INVALID_ARGUMENT"), body
    assert "at most 200" in body["content"][0]["text"] and "201" in body["content"][0]["text"]
    assert (await daemon.view(token, sid))["todos"] == items  # unchanged by the refused call
    body = await run_tool(daemon, token, sid, "r3", "todo", {"items": []})
    assert body["status"] == "ok", body
    assert (await daemon.view(token, sid))["todos"] == []
    updates = [e["body"]["items"] for e in await daemon.events(token, sid) if e["kind"] == "todo.updated"]
    assert [len(u) for u in updates] == [200, 0]
    # the user reads it only: no route writes it
    for method in ("PUT", "POST", "PATCH"):
        r = await daemon.request(method, f"/sessions/{sid}/todos", token, json_body={"items": []})
        assert r.status_code in (404, 405), (method, r.status_code, r.text)


async def test_gitignore_negations_and_nested_files_and_credential_names_over_http(daemon: Daemon):
    strong = await daemon.pair("ws-strong", strong=True)
    reader = await daemon.pair("ws-reader")
    _, sid, ws = await _project_session(daemon, strong)
    (ws / ".gitignore").write_text("*.log\n!keep.log\n")
    (ws / "keep.log").write_text("kept\n")
    (ws / "drop.log").write_text("dropped\n")
    (ws / "sub").mkdir()
    (ws / "sub" / ".gitignore").write_text("!again.log\n*.tmp\n")
    (ws / "sub" / "again.log").write_text("again\n")
    (ws / "sub" / "other.log").write_text("other\n")
    (ws / "sub" / "x.tmp").write_text("tmp\n")
    (ws / "top.tmp").write_text("not ignored at the top\n")
    secrets = {".env.local": "TOKEN=SECRET1\n", "id.key": "SECRET2\n", "x.pem": "SECRET3\n"}
    for name, text in secrets.items():
        (ws / name).write_text(text)

    async def get(route: str, params: dict[str, str]) -> Any:
        return await daemon.get(f"/sessions/{sid}/workspace/{route}", reader, params=params)

    r = await get("tree", {"depth": "2"})
    assert r.status_code == 200, r.text
    entries = {e["path"]: e for e in r.json()["entries"]}
    assert sorted(entries) == [".env.local", ".gitignore", "id.key", "keep.log", "sub", "sub/.gitignore",
                               "sub/again.log", "top.tmp", "x.pem"], sorted(entries)
    assert r.json()["ignoredHidden"] == 3  # drop.log, sub/other.log, sub/x.tmp
    assert {p for p, e in entries.items() if e["sensitive"]} == set(secrets)
    r = await get("tree", {"depth": "2", "ignored": "true"})
    assert {e["path"] for e in r.json()["entries"] if e["ignored"]} == {"drop.log", "sub/other.log", "sub/x.tmp"}
    for name in secrets:
        r = await get("file", {"path": name})
        assert (r.status_code, error_of(r)) == (403, "SENSITIVE_FILE"), (name, r.text)
        assert "SECRET" not in r.text and name in r.json()["error"]["message"]
    r = await get("file", {"path": "keep.log"})
    assert r.status_code == 200 and r.json()["text"] == "kept\n"
    r = await get("file", {"path": "drop.log"})  # ignored, still readable by its path
    assert r.status_code == 200 and r.json()["text"] == "dropped\n"


async def test_changes_leave_out_a_failed_edit_and_a_fork_lists_only_its_own(daemon: Daemon):
    strong = await daemon.pair("ch-strong", strong=True)
    reader = await daemon.pair("ch-reader")
    _, sid, ws = await _project_session(daemon, strong)
    (ws / "a.txt").write_text("one\n")
    # an edit that fails (its old string is not there) changes nothing and is not listed
    body = await run_tool(daemon, strong, sid, "r1", "edit_file", {
        "path": "a.txt", "mode": "edit", "edits": [{"old_string": "absent", "new_string": "x"}]})
    assert body["status"] == "error", body
    body = await run_tool(daemon, strong, sid, "r2", "edit_file", {"path": "a.txt", "mode": "create", "content": "x"})
    assert body["status"] == "error", body  # it exists
    r = await daemon.get(f"/sessions/{sid}/changes", reader)
    assert r.status_code == 200 and r.json()["files"] == [], r.text
    assert (ws / "a.txt").read_text() == "one\n"
    body = await run_tool(daemon, strong, sid, "r3", "edit_file", {"path": "b.txt", "mode": "create", "content": "b\n"})
    assert body["status"] == "ok", body
    at = (await daemon.events(strong, sid))[-1]["seq"]
    r = await daemon.post(f"/sessions/{sid}/fork", strong, {"seq": at})
    assert r.status_code == 201, r.text
    fork = r.json()["id"]
    # after the fork point: the source edits c.txt, the fork edits d.txt by a subagent
    body = await run_tool(daemon, strong, sid, "r4", "edit_file", {"path": "c.txt", "mode": "create", "content": "c\n"})
    assert body["status"] == "ok", body
    await daemon.submit(strong, fork, "f1", tool("subagent", {"prompt": tool(
        "edit_file", {"path": "d.txt", "mode": "create", "content": "d\n"})}))
    await daemon.wait_idle(strong, fork)
    assert (ws / "d.txt").read_text() == "d\n"
    r = await daemon.get(f"/sessions/{fork}/changes", reader)
    assert r.status_code == 200, r.text
    files = {f["path"]: f for f in r.json()["files"]}
    assert list(files) == ["d.txt"], files
    assert files["d.txt"]["status"] == "created" and files["d.txt"]["agents"][0].startswith("sub_")
    r = await daemon.get(f"/sessions/{sid}/changes", reader)
    assert {f["path"]: f["status"] for f in r.json()["files"]} == {"b.txt": "created", "c.txt": "created"}


async def test_a_subagent_tools_list_of_main_only_tools_is_refused_saying_so(daemon: Daemon):
    # F-ACT-5: a subagent never has todo or ask_user. A list naming only those was refused as if
    # it named nothing ("'tools' must name at least one of …"), and unknown names were echoed
    # whole (ten names of 5,000 characters each back to the model).
    token = await daemon.pair("sub-client", strong=True)
    _, sid, _ = await _project_session(daemon, token)
    body = await run_tool(daemon, token, sid, "r1", "subagent", {"prompt": "plan", "tools": ["todo", "ask_user"]})
    assert (body["status"], body["error_code"]) == ("error", "INVALID_ARGUMENT"), body
    message = body["structured_content"]["error"]["message"]
    assert "'ask_user', 'todo' are for the main agent only" in message, message
    assert "must name at least one of" in message and "read_file" in message
    body = await run_tool(daemon, token, sid, "r2", "subagent",
                          {"prompt": "plan", "tools": [f"{i}" + "n" * 5_000 for i in range(10)]})
    message = body["structured_content"]["error"]["message"]
    assert body["error_code"] == "INVALID_ARGUMENT" and "there is no tool '0nnn" in message, message[:300]
    assert len(message) < 1_000, len(message)
    assert not [e for e in await daemon.events(token, sid) if e["kind"] == "agent.started"]


async def test_a_gitignore_opening_with_a_byte_order_mark_hides_what_its_first_line_names(daemon: Daemon):
    # An editor that writes a UTF-8 byte-order mark made the first line "\ufeff*.log", which
    # matched nothing: git skips the mark and ignores the logs, the listing showed them.
    token = await daemon.pair("bom-client")
    strong = await daemon.pair("bom-strong", strong=True)
    _, sid, ws = await _project_session(daemon, strong)
    (ws / ".gitignore").write_bytes("\ufeff*.log\r\nbuild/\r\n".encode())
    (ws / "a.log").write_text("x")
    (ws / "build").mkdir()
    (ws / "main.py").write_text("x")
    r = await daemon.get(f"/sessions/{sid}/workspace/tree", token)
    assert r.status_code == 200, r.text
    assert [e["path"] for e in r.json()["entries"]] == [".gitignore", "main.py"] and r.json()["ignoredHidden"] == 2


async def test_a_workspace_removed_while_the_daemon_runs_is_named_as_gone(daemon: Daemon):
    # The workspace directory removed after the project was made: browsing answered
    # `.: no such file or directory`, and a tool call blamed the path it named. Both now say the
    # workspace itself is gone (still not found: PATH_NOT_FOUND over HTTP, NOT_FOUND to the model).
    token = await daemon.pair("ws-gone", strong=True)
    _, sid, ws = await _project_session(daemon, token)
    (ws / "a.txt").write_text("a\n")
    r = await daemon.get(f"/sessions/{sid}/workspace/tree", token)
    assert r.status_code == 200 and [e["path"] for e in r.json()["entries"]] == ["a.txt"], r.text
    for path in sorted(ws.rglob("*"), reverse=True):
        path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()
    ws.rmdir()
    for route, params in (("tree", {}), ("file", {"path": "a.txt"})):
        r = await daemon.get(f"/sessions/{sid}/workspace/{route}", token, params=params)
        assert (r.status_code, error_of(r)) == (404, "PATH_NOT_FOUND"), r.text
        assert "the workspace directory no longer exists" in r.json()["error"]["message"], r.text
    body = await run_tool(daemon, token, sid, "r1", "read_file", {"path": "a.txt"})
    assert (body["status"], body["error_code"]) == ("error", "NOT_FOUND"), body
    assert "the workspace directory no longer exists" in body["content"][0]["text"], body
