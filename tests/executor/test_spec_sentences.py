"""F-EXE sentences proven end to end through the real executor process and the Core tools:
view_image's 5 MiB edge (an artifact at the limit, ``TOO_LARGE`` one byte past), arguments a
file tool does not take, or needs and lacks, refused naming them, and run_command's limits at
their edges; and a skill's resource samples at their limit of 10."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from events import types as t
from runtime.executor_client import ExecutorClient
from tools.artifacts import ArtifactError
from tools.files import LIMITS
from tools.skills import MAX_SAMPLES, resource_samples
from tools.workspace_tools import MAX_COMMAND_BYTES, MAX_COMMAND_OUTPUT, MAX_COMMAND_TIMEOUT_MS

from .test_tools import CoreTools, core, png, sub  # noqa: F401  (fixtures)

MAX_IMAGE = LIMITS["MAX_IMAGE_BYTES"]


@pytest.mark.parametrize("extra", [0, 1])
async def test_view_image_at_5_mib_is_an_artifact_and_one_byte_past_is_too_large(core: CoreTools, workspace: Path,
                                                                                  sub: str, extra: int) -> None:
    head = png(1, 1)
    data = head + b"\x00" * (MAX_IMAGE - len(head) + extra)  # (the magic bytes decide; the tail is padding)
    (workspace / sub / "big.png").write_bytes(data)
    _, res = await core.run("view_image", {"path": f"{sub}/big.png"})
    aid = hashlib.sha256(data).hexdigest()
    if extra:
        assert res.is_error and res.error_code == "TOO_LARGE"
        assert f"{MAX_IMAGE + 1} bytes; images are at most {MAX_IMAGE}" in res.structured_content["error"]["message"]
        assert res.events == []
        with pytest.raises(ArtifactError):
            core.artifacts.get(aid)
        return
    assert not res.is_error, res.content
    assert res.structured_content["artifact_id"] == aid and res.structured_content["mime"] == "image/png"
    assert core.artifacts.get(aid) == data  # all 5 MiB, through gRPC and into the artifact store
    [stored] = [e for e in res.events if isinstance(e, t.ArtifactStored)]
    assert (stored.artifact_id, stored.mime, stored.size) == (aid, "image/png", MAX_IMAGE)


ARGUMENT_CASES = [
    ("read_file", {"path": "f.txt", "bogus": 1},
     "read_file does not take 'bogus' (its arguments: path, start_line, max_lines, offset, follow_symlinks)"),
    ("read_file", {"start_line": 1}, "read_file needs 'path'"),
    ("view_image", {"path": "f.txt", "x": 1}, "view_image does not take 'x' (its arguments: path)"),
    ("view_image", {}, "view_image needs 'path'"),
    # call_id is the executor's own keyword: a caller's was "got multiple values for keyword argument"
    ("edit_file", {"path": "f.txt", "mode": "rewrite", "content": "x", "call_id": "c9"},
     "edit_file does not take 'call_id' (its arguments: path, mode, content, edits)"),
    ("edit_file", {"path": "f.txt", "content": "x"}, "edit_file needs 'mode'"),
    ("edit_file", {"content": "x"}, "edit_file needs 'path', 'mode'"),
    ("patch_file", {"path": "f.txt", "patch": "@@\n-a\n+A\n", "call_id": "c9", "dry_run": True},
     "patch_file does not take 'call_id', 'dry_run' (its arguments: path, patch)"),
    ("patch_file", {"path": "f.txt"}, "patch_file needs 'patch'"),
]


@pytest.mark.parametrize("tool, args, message", ARGUMENT_CASES)
async def test_an_argument_a_file_tool_does_not_take_or_lacks_is_named(core: CoreTools, workspace: Path, sub: str,
                                                                       tool: str, args: dict, message: str) -> None:
    f = workspace / sub / "f.txt"
    f.write_bytes(b"a\nb\n")
    if "path" in args:
        args = {**args, "path": f"{sub}/{args['path']}"}
    _, res = await core.run(tool, args)
    assert res.is_error and res.error_code == "INVALID_ARGUMENT"
    assert res.structured_content["error"]["message"] == message
    assert f.read_bytes() == b"a\nb\n" and not [e for e in res.events if isinstance(e, t.FileEdited)]


# ---------------------------------------------------------------------------- F-EXE-7 commands


async def test_run_command_limits_at_their_edges_and_one_past(core: CoreTools, workspace: Path, sub: str) -> None:
    """Each limit of run_command is accepted exactly at its value and refused one past (the
    daemon's test checked only past ones: a limit off by one inward would have passed it)."""
    at = "true #" + "x" * (MAX_COMMAND_BYTES - len("true #"))
    assert len(at.encode()) == MAX_COMMAND_BYTES
    ok = {"command": at, "timeout_ms": MAX_COMMAND_TIMEOUT_MS, "max_output_bytes": MAX_COMMAND_OUTPUT, "cwd": sub}
    _, res = await core.run("run_command", ok)
    assert not res.is_error, res.content
    assert res.structured_content["exit_code"] == 0 and res.structured_content["timed_out"] is False
    past = [({**ok, "command": at + "x"}, "COMMAND_TOO_LONG", f"longer than {MAX_COMMAND_BYTES} bytes"),
            ({**ok, "command": "é" * (MAX_COMMAND_BYTES // 2) + "x"}, "COMMAND_TOO_LONG", "bytes"),  # counted in UTF-8
            ({**ok, "timeout_ms": MAX_COMMAND_TIMEOUT_MS + 1}, "INVALID_ARGUMENT",
             f"timeout_ms must be an integer from 0 to {MAX_COMMAND_TIMEOUT_MS}"),
            ({**ok, "max_output_bytes": MAX_COMMAND_OUTPUT + 1}, "INVALID_ARGUMENT",
             f"max_output_bytes must be an integer from 0 to {MAX_COMMAND_OUTPUT}")]
    for args, code, words in past:
        _, res = await core.run("run_command", args)
        assert res.is_error and res.error_code == code and words in res.structured_content["error"]["message"], \
            (code, res.structured_content)


@pytest.mark.parametrize("size, truncated", [(64, False), (65, True)])
async def test_run_command_output_cap_at_its_edge(core: CoreTools, workspace: Path, sub: str, size: int,
                                                  truncated: bool) -> None:
    _, res = await core.run("run_command", {"command": f"head -c {size} /dev/zero | tr '\\0' a",
                                            "max_output_bytes": 64, "cwd": sub})
    assert not res.is_error, res.content
    assert res.structured_content["truncated"] is truncated
    text = res.content[0].text
    assert text.startswith("a" * 64) and not text.startswith("a" * 65)
    assert ("output truncated" in text) is truncated


# ---------------------------------------------------------------------------- F-TOOL-6 samples


@pytest.mark.parametrize("files, more", [(10, False), (11, True)])
async def test_a_skill_shows_at_most_10_resource_samples_and_says_when_there_are_more(
        client: ExecutorClient, workspace: Path, sub: str, files: int, more: bool) -> None:
    """At the limit all are shown and none is said to be left out; one past, 10 and "more"
    (the session test has 12 files, far from the edge)."""
    base = workspace / sub / "skills" / "review"
    (base / "refs").mkdir(parents=True)
    (base / "SKILL.md").write_text("---\nname: review\n---\nsteps\n")
    for i in range(files):
        (base / "refs" / f"r{i:02d}.md").write_text("ref\n")

    async def browse(args: dict[str, Any]) -> dict[str, Any]:
        return (await client.call("browse_list", args)).result

    samples, more_left = await resource_samples(browse, f"{sub}/skills/review")
    assert samples == [f"refs/r{i:02d}.md" for i in range(min(files, MAX_SAMPLES))]
    assert more_left is more and MAX_SAMPLES == 10


async def test_patch_file_through_the_core_tools_keeps_a_byte_order_mark_and_names_a_missing_line(
        core: CoreTools, workspace: Path, sub: str) -> None:
    f = workspace / sub / "bom.txt"
    f.write_bytes(b"\xef\xbb\xbfhello\nworld\n")
    _, res = await core.run("patch_file", {"path": f"{sub}/bom.txt", "patch": "@@\n-hello\n+hi\n world\n"})
    assert not res.is_error, res.content
    assert f.read_bytes() == b"\xef\xbb\xbfhi\nworld\n"
    [edited] = [e for e in res.events if isinstance(e, t.FileEdited)]
    assert edited.path == f"{sub}/bom.txt"
    _, res = await core.run("patch_file", {"path": f"{sub}/bom.txt", "patch": "@@\n hi\n-  world\n+w\n"})
    assert res.is_error and res.error_code == "NO_MATCH"
    assert res.structured_content["error"]["message"].endswith(
        "(line 2 of them is not in the file; line 2 of the file differs from it only in whitespace)")
    assert f.read_bytes() == b"\xef\xbb\xbfhi\nworld\n"
