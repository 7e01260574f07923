"""A second pass over the file tools and the executor's commands (F-EXE-2..9) as a client sees
them: every call crosses the real ``lens executor serve`` over gRPC (or the Core tools over it).

What ``test_file_tools_acceptance.py``, ``test_commands_acceptance.py`` and the rest of
tests/executor and tests/files pin is not repeated; these are the edges they left: a command's
``timeout_ms`` and ``max_output_bytes`` past their bounds at the gRPC contract, the output cap at
exactly the bytes sent (two streams together), ``read_file`` with both selections, lone ``\\r``
and a directory of 10,000 entries paged to its end, devices, a ``replace_all`` whose matches
overlap, ``patch_file`` at the end of a file without a final newline, and ``revert_call`` of an
edit a later call built on.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import trio

from events import types as t
from runtime.executor_client import ExecutorClient
from tools.executor.commands import MAX_OUTPUT, MAX_TIMEOUT_MS

from tests.daemon.conftest import Daemon, daemon, daemon_factory, run_tool  # noqa: F401  (fixtures)
from tests.files.sample_images import JPEG

from .conftest import ExecutorProcess
from .test_commands import collect
from .test_tools import CoreTools, core, core_tools, fails, sub  # noqa: F401  (core and sub are fixtures)

BOUND_S = 20


# ---------------------------------------------------------------------------- F-EXE-7 commands


@pytest.mark.parametrize("field, value, says", [
    ("timeout_ms", MAX_TIMEOUT_MS + 1, f"timeout_ms {MAX_TIMEOUT_MS + 1} is past the most, {MAX_TIMEOUT_MS}"),
    ("timeout_ms", 2**32 - 1, f"timeout_ms {2**32 - 1} is past the most, {MAX_TIMEOUT_MS}"),
    ("max_output_bytes", MAX_OUTPUT + 1, f"max_output_bytes {MAX_OUTPUT + 1} is past the most, {MAX_OUTPUT}"),
])
async def test_a_command_bound_past_its_most_is_refused_and_nothing_runs(client: ExecutorClient, workspace: Path,
                                                                         sub: str, field: str, value: int,
                                                                         says: str) -> None:
    # docs/executor.md: timeout_ms "at most 3 600 000", max_output_bytes "at most 16 MiB". The
    # executor took more and quietly ran the command under the bound instead: a client asking
    # for a two-hour timeout had its command killed after one, told nothing but "timed out".
    marker = workspace / sub / "ran"
    err = await fails("INVALID_ARGUMENT", collect(client, "touch ran", cwd=sub, **{field: value}))
    assert says in str(err), str(err)
    assert not marker.exists()


async def test_a_command_bound_at_its_most_runs(client: ExecutorClient, workspace: Path, sub: str) -> None:
    out, err, end = await collect(client, "printf ok", cwd=sub, timeout_ms=MAX_TIMEOUT_MS,
                                     max_output_bytes=MAX_OUTPUT)
    assert (out, err, end.exit_code, end.timed_out, end.truncated) == (b"ok", b"", 0, False, False)


async def test_the_output_cap_counts_both_streams_and_exactly_the_cap_is_not_truncated(client: ExecutorClient
                                                                                       ) -> None:
    out, err, end = await collect(client, "printf 01234; printf 56789 >&2", max_output_bytes=10)
    assert (out, err, end.truncated) == (b"01234", b"56789", False)
    out, err, end = await collect(client, "printf 01234; printf 56789 >&2; printf x", max_output_bytes=10)
    assert (len(out) + len(err), end.truncated, end.exit_code) == (10, True, 0)


# ---------------------------------------------------------------------------- F-EXE-2 read_file


async def test_read_file_refuses_both_selections_and_empty_bounds_naming_them(client: ExecutorClient,
                                                                              workspace: Path, sub: str) -> None:
    (workspace / sub / "f.txt").write_text("a\nb\n")
    path = f"{sub}/f.txt"
    for args, says in [({"offset": 0, "start_line": 1}, "give start_line or offset, not both"),
                       ({"start_line": 0}, "start_line must be >= 1"),
                       ({"max_lines": 0}, "max_lines must be >= 1"),
                       ({"offset": -1}, "offset must be >= 0"),
                       ({"offset": True}, "offset must be an integer"),
                       ({"start_line": 1.0}, "start_line must be an integer")]:
        err = await fails("INVALID_ARGUMENT", client.call("read_file", {"path": path, **args}))
        assert says in str(err), (args, str(err))


async def test_a_lone_carriage_return_ends_no_line_and_paging_keeps_every_byte(client: ExecutorClient,
                                                                               workspace: Path, sub: str) -> None:
    # Lines end at "\n" alone ("\r\n" included); a lone "\r" is text inside its line, kept as it is.
    data = b"a\r\nb\rc\nd"
    (workspace / sub / "cr.txt").write_bytes(data)
    pages, off = [], 0
    while True:
        r = (await client.call("read_file", {"path": f"{sub}/cr.txt", "offset": off, "max_lines": 1})).result
        pages.append((r["content"], r["start_line"], r["next_offset"], r["eof"]))
        off = r["next_offset"]
        if r["eof"]:
            break
    assert pages == [("a\r\n", 1, 3, False), ("b\rc\n", 2, 7, False), ("d", 3, 8, True)]
    third = (await client.call("read_file", {"path": f"{sub}/cr.txt", "start_line": 3})).result
    assert (third["content"], third["offset"], third["eof"]) == ("d", 7, True)


async def test_a_directory_of_ten_thousand_entries_pages_to_its_end(client: ExecutorClient, workspace: Path,
                                                                    sub: str) -> None:
    d = workspace / sub / "many"
    d.mkdir()
    names = [f"e{i:05d}" for i in range(10_000)]
    for name in names:
        (d / name).touch()
    (d / "zdir").mkdir()
    seen: list[str] = []
    off, pages = 0, 0
    while True:
        r = (await client.call("read_file", {"path": f"{sub}/many", "offset": off})).result
        assert r["kind"] == "directory" and r["offset"] == off
        assert r["content"] == "".join(e + "\n" for e in r["entries"])
        seen += r["entries"]
        pages += 1
        off = r["next_offset"]
        if r["eof"]:
            break
    assert seen == names + ["zdir/"]
    assert pages == 6  # 2,000 entries a page
    assert off == r["size"] == sum(len(e) + 1 for e in seen)


async def test_a_device_in_the_workspace_is_not_a_file_for_any_tool(client: ExecutorClient, workspace: Path,
                                                                    sub: str) -> None:
    # A character device (here /dev/zero's numbers) is never read: a read of it would not end.
    dev = workspace / sub / "zero"
    try:
        os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("making a device needs CAP_MKNOD")
    path = f"{sub}/zero"
    with trio.fail_after(BOUND_S):
        for tool, args in [("read_file", {"path": path}), ("read_file", {"path": path, "offset": 0}),
                           ("view_image", {"path": path}),
                           ("edit_file", {"path": path, "mode": "rewrite", "content": "x"}),
                           ("edit_file", {"path": path, "mode": "edit",
                                          "edits": [{"old_string": "a", "new_string": "b"}]}),
                           ("patch_file", {"path": path, "patch": "@@\n-a\n+b\n"})]:
            err = await fails("NOT_A_FILE", client.call(tool, args))
            assert path in str(err), (tool, str(err))
        await fails("ALREADY_EXISTS", client.call("edit_file", {"path": path, "mode": "create", "content": "x"}))
    assert stat.S_ISCHR(dev.lstat().st_mode)


# ---------------------------------------------------------------------------- F-EXE-3 edit_file


async def test_replace_all_takes_overlapping_matches_left_to_right_without_reuse(client: ExecutorClient,
                                                                                 workspace: Path, sub: str) -> None:
    f = workspace / sub / "a.txt"
    f.write_text("aaaaa\n")
    r = (await client.call("edit_file", {"path": f"{sub}/a.txt", "mode": "edit",
                                         "edits": [{"old_string": "aa", "new_string": "b", "replace_all": True}]})).result
    assert r == {"path": f"{sub}/a.txt", "changed": True, "units_applied": 1, "bytes_written": 4}
    assert f.read_text() == "bba\n"
    # without replace_all, "aa" in "aaa" is two (overlapping) matches: not unique
    f.write_text("aaa\n")
    await fails("NOT_UNIQUE", client.call("edit_file", {"path": f"{sub}/a.txt", "mode": "edit",
                                                        "edits": [{"old_string": "aa", "new_string": "b"}]}))
    assert f.read_text() == "aaa\n"


# ---------------------------------------------------------------------------- F-EXE-5 revert_call


async def test_revert_of_an_edit_a_later_call_built_on_is_a_conflict_until_that_one_is_reverted(
        core: CoreTools, workspace: Path, sub: str) -> None:
    f = workspace / sub / "r.txt"
    f.write_text("v0\n")
    first, res = await core.run("edit_file", {"path": f"{sub}/r.txt", "mode": "rewrite", "content": "v1\n"})
    assert res.structured_content == {"path": f"{sub}/r.txt", "changed": True, "units_applied": 1, "bytes_written": 3}
    second, res = await core.run("patch_file", {"path": f"{sub}/r.txt", "patch": "@@\n-v1\n+v2\n"})
    assert res.structured_content == {"path": f"{sub}/r.txt", "changed": True, "units_applied": 1, "bytes_written": 3}

    _, rev = await core.run("revert_call", {"call_id": first})
    assert rev.is_error and rev.error_code == "CONFLICT"
    assert f"{sub}/r.txt: the file changed since that call" in rev.content[0].text
    assert f.read_text() == "v2\n"
    _, rev = await core.run("revert_call", {"call_id": second})
    assert not rev.is_error and f.read_text() == "v1\n"
    _, rev = await core.run("revert_call", {"call_id": first})
    assert not rev.is_error and f.read_text() == "v0\n"
    assert [type(e).__name__ for e in rev.events] == ["FileReverted"]


async def test_a_call_that_changed_nothing_has_nothing_to_revert(core: CoreTools, workspace: Path, sub: str) -> None:
    (workspace / sub / "same.txt").write_text("same\n")
    cid, res = await core.run("edit_file", {"path": f"{sub}/same.txt", "mode": "rewrite", "content": "same\n"})
    assert res.structured_content == {"path": f"{sub}/same.txt", "changed": False, "units_applied": 1,
                                      "bytes_written": 0}
    assert not [e for e in res.events if isinstance(e, t.FileEdited)]
    _, rev = await core.run("revert_call", {"call_id": cid})
    assert rev.is_error and rev.error_code == "NOTHING_TO_REVERT"


# ---------------------------------------------------------------------------- F-EXE-8 the domain lock


async def test_an_edit_waits_for_a_write_holding_the_domain_and_a_read_for_that_edit(executor: ExecutorProcess,
                                                                                    tmp_path: Path, sub: str) -> None:
    """Through the real tools and the pool's own lock: while a write holds the execution domain,
    edit_file waits (writes are serialised); a read_file started behind that waiting edit waits
    too (a waiting writer holds back new readers), and, once the hold ends, runs after the edit
    wrote: it reads the edit's bytes."""
    f = executor.workspace / sub / "f.txt"
    f.write_text("before\n")
    async with core_tools(executor, tmp_path) as (tools, pool):
        ex = await pool.get("p1")
        order: list[str] = []
        read_text: list[str] = []
        with trio.fail_after(BOUND_S):
            async with trio.open_nursery() as nursery:
                async with ex.lock.write():
                    async def edit() -> None:
                        _, res = await tools.run("edit_file", {"path": f"{sub}/f.txt", "mode": "rewrite",
                                                               "content": "after\n"})
                        assert not res.is_error, res.content
                        order.append("edit")

                    async def read() -> None:
                        _, res = await tools.run("read_file", {"path": f"{sub}/f.txt"})
                        assert not res.is_error, res.content
                        read_text.append(res.content[0].text)
                        order.append("read")

                    nursery.start_soon(edit)
                    while ex.lock._writers_waiting == 0:  # (the edit is at the lock, waiting)
                        await trio.sleep(0.01)
                    nursery.start_soon(read)
                    await trio.testing.wait_all_tasks_blocked()
                    assert order == [] and f.read_text() == "before\n"
        assert sorted(order) == ["edit", "read"]
        assert read_text == ["after\n"]  # the read ran once the edit had written


# ---------------------------------------------------------------------------- through the daemon


async def test_through_the_daemon_edits_revert_newest_first_and_refusals_keep_their_codes(daemon: Daemon) -> None:
    """The faux model calls the tools (``/tool NAME ARGS``) in a session of a real daemon whose
    default config spawns the project's executor: what a client reads is ``tool.finished``."""
    token = await daemon.pair("second-pass", strong=True)
    project = await daemon.project(token)
    sid = (await daemon.session(token, project["id"]))["id"]
    ws = Path(project["workspace"])
    n = iter(range(100))

    async def call(name: str, args: dict) -> dict:
        return await run_tool(daemon, token, sid, f"r{next(n)}", name, args)

    made = await call("edit_file", {"path": "d/a.txt", "mode": "create", "content": "v0\n"})
    assert made["structured_content"] == {"path": "d/a.txt", "changed": True, "units_applied": 1, "bytes_written": 3}
    patched = await call("patch_file", {"path": "d/a.txt", "patch": "@@\n-v0\n+v1\n"})
    assert patched["structured_content"]["bytes_written"] == 3 and (ws / "d/a.txt").read_text() == "v1\n"

    refused = await call("revert_call", {"call_id": made["call_id"]})
    assert refused["error_code"] == "CONFLICT" and "d/a.txt: the file changed since that call" in \
        refused["content"][0]["text"]
    assert (ws / "d/a.txt").read_text() == "v1\n"
    assert not (await call("revert_call", {"call_id": patched["call_id"]}))["is_error"]
    assert (ws / "d/a.txt").read_text() == "v0\n"
    assert not (await call("revert_call", {"call_id": made["call_id"]}))["is_error"]
    assert not (ws / "d/a.txt").exists()

    (ws / "d/many.txt").write_text("".join(f"l{i}\n" for i in range(200)))
    for name, args, code, says in [
            ("read_file", {"path": "d/many.txt", "offset": 0, "start_line": 1}, "INVALID_ARGUMENT",
             "give start_line or offset, not both"),
            ("patch_file", {"path": "d/many.txt", "patch": "".join(f"@@\n-l{i}\n+L{i}\n" for i in range(129))},
             "TOO_MANY_UNITS", "more than 128 hunks"),
            ("edit_file", {"path": "d/many.txt", "mode": "edit",
                           "edits": [{"old_string": f"l{i}\n", "new_string": "x"} for i in range(129)]},
             "TOO_MANY_UNITS", "129 edits; at most 128"),
            ("read_file", {"path": "../outside.txt"}, "PATH_OUTSIDE_WORKSPACE", "../outside.txt")]:
        body = await call(name, args)
        assert (body["status"], body["error_code"]) == ("error", code), (name, body)
        assert body["structured_content"]["error"]["code"] == code and says in body["content"][0]["text"], body
    assert (ws / "d/many.txt").read_text() == "".join(f"l{i}\n" for i in range(200))

    # an image is known by its bytes, not its name: JPEG bytes named .png are a JPEG
    (ws / "d/photo.png").write_bytes(JPEG)
    seen = await call("view_image", {"path": "d/photo.png"})
    assert not seen["is_error"], seen
    assert (seen["structured_content"]["mime"], seen["structured_content"]["size"]) == ("image/jpeg", len(JPEG))
