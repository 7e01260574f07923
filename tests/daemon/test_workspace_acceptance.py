"""F-EXE-1 and F-HAR-3 as a stranger meets them over HTTP, with ``lens serve`` as a process.

A daemon configured with a remote executor that speaks another ``core-executor-rpc`` version:
what a client sees on the browsing routes and in a ``run_command`` result, and what the
operator reads in the daemon's log (which executor refused, and the two versions, said once).
An abort while ``run_command`` runs: the shell, its background child and a process that left
its group all gone, checked by pid, and the call recorded as aborted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.procfs import read_proc
from tools.executor import PROTOCOL_VERSION

from ..executor.conftest import other_version_executor, start_executor, stop_process
from .conftest import DaemonFactory, error_of, finished, run_tool, serving, stop_daemon, wait_until


async def test_a_remote_executor_of_another_version_is_named_over_http_and_in_the_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    version = PROTOCOL_VERSION + 1
    with other_version_executor(tmp_path / "remote", version) as remote:
        monkeypatch.setenv("LENS_TEST_EXECUTOR_TOKEN", remote.token)
        cwd = tmp_path / "serve"
        (cwd / "config").mkdir(parents=True)
        (cwd / "config" / "lens.jsonc").write_text(json.dumps(
            {"executor": {"address": remote.address, "tokenEnv": "LENS_TEST_EXECUTOR_TOKEN"}}))
        async with serving(cwd) as (serve, d):
            strong = await d.pair("strong", strong=True)
            project = await d.project(strong, "remote")
            sid = (await d.session(strong, project["id"]))["id"]
            for route, params in (("tree", {}), ("file", {"path": "x.txt"})):
                r = await d.get(f"/sessions/{sid}/workspace/{route}", strong, params=params)
                assert r.status_code == 503 and error_of(r) == "EXECUTOR_VERSION_MISMATCH", (route, r.text)
                message = r.json()["error"]["message"]
                assert f"speaks {version}" in message and f"caller {PROTOCOL_VERSION}" in message, message
            finished = await run_tool(d, strong, sid, "r1", "run_command", {"command": "echo hi"})
            assert finished["is_error"] is True, finished
            assert finished["structured_content"]["error"]["code"] == "EXECUTOR_VERSION_MISMATCH", finished
            assert f"speaks {version}" in finished["structured_content"]["error"]["message"]
            assert await serve.terminate() == 0
        log = (cwd / "serve-0.err").read_text()
        assert "Traceback" not in log
        # Before: the log named the code alone, in the warnings of what failed by it (skills not
        # listed, AGENTS.md not read): not which executor, nor which versions.
        said = [line for line in log.splitlines() if "refused the connection" in line]
        assert len(said) == 1, log  # (once, though every call above was refused)
        assert f"the remote executor at {remote.address} refused the connection: EXECUTOR_VERSION_MISMATCH" in said[0]
        assert f"speaks {version}" in said[0] and f"caller {PROTOCOL_VERSION}" in said[0], said


def _alive(pid: int) -> bool:
    p = read_proc(pid)
    return p is not None and p.state not in ("Z", "X")


async def test_an_abort_inside_run_command_ends_the_command_and_what_it_started_and_says_so(
        daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory()
    strong = await d.pair("abort-strong", strong=True)
    project = await d.project(strong, "abort")
    sid = (await d.session(strong, project["id"]))["id"]
    ws = Path(project["workspace"])
    # the shell, a background child in its group, and one that left the group (setsid)
    command = "echo $$ > shell.pid; sleep 600 & echo $! > child.pid; setsid sleep 600 & echo $! > left.pid; wait"
    await d.submit(strong, sid, "a1", "/tool run_command " + json.dumps({"command": command}))
    await d.wait_running_call(strong, sid)
    names = ("shell.pid", "child.pid", "left.pid")
    await wait_until(lambda: _pids_written(ws, names), what="the command's pids written")
    pids = [int((ws / n).read_text()) for n in names]
    assert all(_alive(p) for p in pids), pids
    r = await d.post(f"/sessions/{sid}/abort", strong)
    assert r.status_code == 200 and r.json()["aborted"] is True, r.text
    await d.wait_idle(strong, sid)

    async def gone() -> bool:
        return not any(_alive(p) for p in pids)

    await wait_until(gone, 15, "every process of the aborted command gone")
    [body] = finished(await d.events(strong, sid))
    assert body["is_error"] is True and body["name"] == "run_command", body
    assert (body["status"], body["error_code"]) == ("interrupted", "ABORTED"), body
    assert "aborted" in body["content"][0]["text"], body


async def _pids_written(ws: Path, names: tuple[str, ...]) -> bool:
    return all((ws / n).exists() and (ws / n).read_text().strip().isdigit() for n in names)


async def test_a_project_of_a_remote_executor_names_a_workspace_of_the_executors_host(
        daemon_factory: DaemonFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The remote executor's workspace is a directory of its own host ("/srv/project" in
    # docs/executor.md). POST /projects checked the name against the daemon's host: 422
    # "is not an existing directory" unless a directory of that name happened to be there too.
    remote = start_executor(tmp_path / "remote")
    try:
        (remote.workspace / "there.txt").write_text("on the executor's host\n")
        monkeypatch.setenv("LENS_TEST_REMOTE_TOKEN", remote.token)
        d = await daemon_factory(config={"executor": {"address": remote.address, "tokenEnv": "LENS_TEST_REMOTE_TOKEN"}})
        strong = await d.pair("strong", strong=True)
        elsewhere = f"/srv/{tmp_path.name}/project/"
        assert not Path(elsewhere).exists()
        r = await d.post("/projects", strong, {"name": "remote", "workspace": elsewhere})
        assert r.status_code == 201, r.text
        assert r.json()["workspace"] == elsewhere.rstrip("/")  # (as written, tidied: no host to resolve it on)
        sid = (await d.session(strong, r.json()["id"]))["id"]
        read = await run_tool(d, strong, sid, "r1", "read_file", {"path": "there.txt"})
        assert read["is_error"] is False and read["content"][0]["text"] == "on the executor's host\n", read
        r = await d.get(f"/sessions/{sid}/workspace/tree", strong)
        assert r.status_code == 200 and [e["path"] for e in r.json()["entries"]] == ["there.txt"], r.text
        # what no host could hold is still refused, with the same words as for a local one
        for bad, said in (("srv/project", "must be an absolute path"), ("", "non-empty path"),
                          ("/etc", "system directory"), ("/srv/../usr/lib", "system directory"),
                          # (two leading slashes are kept by a tidying, and passed every check)
                          ("//etc", "'/etc' is a system directory"), ("//", "'/' is a system directory"),
                          ("///usr/lib", "system directory"), ("//root/.ssh", "home"),
                          # (a ~ was expanded against this daemon's home: not the executor host's)
                          ("~/project", "must be an absolute path"), ("~root/p", "must be an absolute path")):
            r = await d.post("/projects", strong, {"name": "bad", "workspace": bad})
            assert r.status_code == 422 and error_of(r) == "WORKSPACE_INVALID", (bad, r.text)
            assert said in r.json()["error"]["message"], (bad, r.text)
        await stop_daemon(d)
    finally:
        stop_process(remote.proc)


async def test_a_project_made_for_a_remote_executor_is_checked_again_before_a_local_one_serves_it(
        daemon_factory: DaemonFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A remote workspace is judged by its words alone. The same daemon started later without
    # executor.address started a local executor on the stored path with only the overlap with
    # its own directories checked: a link to /etc here, or a path missing here, was served.
    remote = start_executor(tmp_path / "remote")
    try:
        monkeypatch.setenv("LENS_TEST_REMOTE_TOKEN", remote.token)
        d = await daemon_factory(config={"executor": {"address": remote.address, "tokenEnv": "LENS_TEST_REMOTE_TOKEN"}})
        strong = await d.pair("strong", strong=True)
        (tmp_path / "to-etc").symlink_to("/etc")
        missing = f"/srv/{tmp_path.name}/project"
        made = {}
        for ws in (str(tmp_path / "to-etc"), missing):
            r = await d.post("/projects", strong, {"name": "p", "workspace": ws})
            assert r.status_code == 201, r.text
            made[ws] = (await d.session(strong, r.json()["id"]))["id"]
        await stop_daemon(d)
    finally:
        stop_process(remote.proc)
    d2 = await daemon_factory(config={}, root=d.root)  # (no executor.address: a local executor)
    for ws, said in ((str(tmp_path / "to-etc"), "'/etc' is a system directory"),
                     (missing, "is not an existing directory")):
        read = await run_tool(d2, strong, made[ws], "r1", "read_file", {"path": "passwd"})
        text = read["content"][0]["text"]
        assert read["is_error"] is True and "WORKSPACE_INVALID" in text and said in text, read
        assert "root:" not in text
        r = await d2.get(f"/sessions/{made[ws]}/workspace/tree", strong)
        assert r.status_code == 422 and error_of(r) == "WORKSPACE_INVALID", r.text
        assert said in r.json()["error"]["message"] and ws in r.json()["error"]["message"], r.text
    await stop_daemon(d2)
