"""The file tools against the words of SPEC F-EXE-2..9, through the real executor process.

Each test here pins a refusal or a result an audit of the file tools found wrong (see
docs/decisions.md, "Audit: the file tools against the spec's words").
"""

from __future__ import annotations

from pathlib import Path

from runtime.executor_client import ExecutorClient

from .test_tools import fails, sub  # noqa: F401  (sub is a fixture)

MiB = 1024 * 1024


async def test_a_call_larger_than_grpc_carries_is_too_large_not_a_client_code(client: ExecutorClient,
                                                                               workspace: Path, sub: str) -> None:
    # Far past the 8 MiB input limit, and past the 64 MiB a gRPC message may hold: grpc refuses to
    # send it, with the detail "CLIENT: Sent message larger than max (...)", whose "CLIENT" was
    # taken for the tool's code.
    content = "a" * (65 * MiB)
    err = await fails("TOO_LARGE", client.call("edit_file", {"path": f"{sub}/big.txt", "mode": "create",
                                                              "content": content}))
    assert "larger than" in err.message
    assert not (workspace / sub / "big.txt").exists()
    (workspace / sub / "f.txt").write_text("x\n")
    await fails("TOO_LARGE", client.call("patch_file", {"path": f"{sub}/f.txt", "patch": "@@\n-x\n+" + content}))
    assert (workspace / sub / "f.txt").read_text() == "x\n"


async def test_a_create_of_a_symlink_named_with_a_final_slash_is_already_exists(client: ExecutorClient,
                                                                                 workspace: Path, sub: str) -> None:
    # "link/" where link is a symlink to a directory was NOT_A_DIRECTORY, "…: not a directory":
    # a create does not follow the final symlink, and the walk took the link's own lstat for the
    # entry's kind. The name exists (as "d/" and a plain "link" are): create never overwrites.
    (workspace / sub / "d").mkdir()
    (workspace / sub / "link").symlink_to("d")
    (workspace / sub / "dangling").symlink_to("nowhere")
    for path in ("link/", "link/.", "dangling/", "dangling/."):
        err = await fails("ALREADY_EXISTS", client.call("edit_file", {"path": f"{sub}/{path}", "mode": "create",
                                                                       "content": "x"}))
        assert "not a directory" not in err.message
    assert sorted(p.name for p in (workspace / sub).iterdir()) == ["d", "dangling", "link"]
    assert list((workspace / sub / "d").iterdir()) == []
    # reading still follows the link; a file with a final slash is still not a directory
    assert (await client.call("read_file", {"path": f"{sub}/link/"})).result["kind"] == "directory"
    (workspace / sub / "f").write_text("x")
    (workspace / sub / "flink").symlink_to("f")
    await fails("NOT_A_DIRECTORY", client.call("read_file", {"path": f"{sub}/flink/"}))
    await fails("NOT_A_DIRECTORY", client.call("edit_file", {"path": f"{sub}/f/", "mode": "create", "content": "x"}))


async def test_a_context_line_keeps_its_ending_when_the_unterminated_last_line_after_it_is_deleted(
        client: ExecutorClient, workspace: Path, sub: str) -> None:
    # Deleting the last line of "a\nb" (no final newline) gave "a" when the hunk named "a" as
    # context and "a\n" when it did not: the context line's own "\n" (a byte the hunk keeps) was
    # dropped. Untouched bytes are preserved either way; an added line that becomes the last one
    # still takes the missing ending.
    cases = [
        (b"a\nb", "@@\n a\n-b\n", b"a\n"),
        (b"a\nb", "@@\n-b\n", b"a\n"),
        (b"a\r\nb", "@@\n a\n-b\n", b"a\r\n"),
        (b"x\na\nb", "@@\n x\n-a\n-b\n", b"x\n"),
        (b"a\nb", "@@\n a\n-b\n+B\n", b"a\nB"),          # an added last line: still no final newline
        (b"a\nb", "@@\n a\n+c\n-b\n", b"a\nc"),
        (b"a\nb", "@@\n a\n b\n+c\n", b"a\nb\nc"),
        (b"a\nb", "@@\n-a\n b\n", b"b"),
    ]
    for i, (original, patch, expected) in enumerate(cases):
        f = workspace / sub / f"f{i}.txt"
        f.write_bytes(original)
        out = await client.call("patch_file", {"path": f"{sub}/f{i}.txt", "patch": patch})
        assert f.read_bytes() == expected, (original, patch)
        assert out.result["bytes_written"] == len(expected)


async def test_a_command_starts_in_a_cwd_whose_host_path_is_past_path_max(
        client: ExecutorClient, workspace: Path, sub: str) -> None:
    # The file tools walk a path one component at a time, so a directory whose host path is past
    # PATH_MAX (4096 bytes) can be made and read. A command's cwd was once handed to the kernel
    # whole, and chdir failed with ENAMETOOLONG (then a clear INVALID_ARGUMENT); it is now the
    # directory the walk holds open (/proc/self/fd/N), so the command starts there like anywhere.
    deep = "/".join(["d" * 250] * 17)  # 4,266 bytes below the workspace
    await client.call("edit_file", {"path": f"{sub}/{deep}/f.txt", "mode": "create", "content": "x"})
    async with client.run("cat f.txt; echo", cwd=f"{sub}/{deep}") as events:
        got = [ev async for ev in events]
    assert not any(isinstance(ev, Exception) for ev in got), got
    assert b"".join(ev.stdout for ev in got if ev.WhichOneof("event") == "stdout") == b"x\n"
    assert [ev.exit.exit_code for ev in got if ev.WhichOneof("event") == "exit"] == [0]

