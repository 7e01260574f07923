"""SPEC §5's file-tool sentences (F-EXE-2..6, F-EXE-9) at their edges, as a client sees them:
every call crosses the real ``lens executor serve`` over gRPC.

What the in-process suite (tests/files) and the property tests already pin is not repeated; these
are the edges a client tests first and that had been tried only in-process, or not at all: every
file tool against every kind of escape (``..``, absolute, a symlink to a file, a symlinked parent
directory, a dangling link out), ``read_file`` offsets at every byte of multi-byte text, the
``rewrite`` mode at 8 MiB and one byte past, each image format, and calls that change nothing.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest

from runtime.executor_client import ExecutorClient
from tools.files import LIMITS

from tests.files.sample_images import GIF, WEBP_EXTENDED, WHOLE, png_sized

from .test_tools import fails, png, sub  # noqa: F401  (sub is a fixture)

MAX_TEXT = LIMITS["MAX_TEXT_BYTES"]
CANARY = "canary-6f1d0c"
_n = itertools.count()


def snapshot(tree: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry below ``tree``: its kind and content (or link target)."""
    out: dict[str, tuple[str, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(tree))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", b"")
            else:
                out[rel] = ("file", p.read_bytes())
    return out


@pytest.fixture
def escapes(workspace: Path, sub: str) -> tuple[str, Path]:
    """``sub`` holding links that lead out, to ``outside`` (a directory beside the workspace
    holding a canary file and an image)."""
    outside = workspace.parent / f"outside{next(_n)}"
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{CANARY}\n")
    (outside / "img.png").write_bytes(png())
    d = workspace / sub
    (d / "outfile").symlink_to(outside / "secret.txt")             # a final link to a file outside
    (d / "outimg").symlink_to(outside / "img.png")
    (d / "outdir").symlink_to(outside)                              # a parent directory outside
    (d / "reldir").symlink_to(Path("..", "..", outside.name))       # the same, by a relative target
    (d / "dangling").symlink_to(outside / "missing.txt")            # dangling, leading out
    (d / "rootlink").symlink_to("/")
    return sub, outside


def escape_paths(sub: str, outside: Path, workspace: Path) -> list[str]:
    return ["..", "../x.txt", f"{sub}/../../x.txt", f"../{outside.name}/secret.txt",
            str(outside / "secret.txt"), "/", str(workspace.parent),
            f"{sub}/outfile", f"{sub}/outimg", f"{sub}/dangling", f"{sub}/outdir",
            f"{sub}/outdir/secret.txt", f"{sub}/outdir/new.txt", f"{sub}/outdir/sub/new.txt",
            f"{sub}/reldir/secret.txt", f"{sub}/reldir/new.txt", f"{sub}/rootlink/etc/hostname"]


def every_tool(path: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("read_file", {"path": path}),
        ("read_file", {"path": path, "offset": 0}),
        ("view_image", {"path": path}),
        ("edit_file", {"path": path, "mode": "create", "content": "pwned\n"}),
        ("edit_file", {"path": path, "mode": "rewrite", "content": "pwned\n"}),
        ("edit_file", {"path": path, "mode": "edit", "edits": [{"old_string": CANARY, "new_string": "pwned"}]}),
        ("patch_file", {"path": path, "patch": f"@@\n-{CANARY}\n+pwned\n"}),
    ]


async def test_every_file_tool_refuses_every_escape_as_path_outside_workspace(
        client: ExecutorClient, workspace: Path, escapes: tuple[str, Path]) -> None:
    # F-EXE-9, for every tool. A create whose final component is a link leading out (to a file,
    # a directory, or dangling) was ALREADY_EXISTS: true, but it hid the escape every other tool
    # names, and a client checking confinement by its code saw a different answer for one tool.
    sub, outside = escapes
    before_out, before_parent = snapshot(outside), sorted(os.listdir(workspace.parent))
    for path in escape_paths(sub, outside, workspace):
        for tool, args in every_tool(path):
            err = await fails("PATH_OUTSIDE_WORKSPACE", client.call(tool, args))
            assert CANARY not in str(err) and str(workspace.parent) not in str(err), (tool, args, str(err))
    assert snapshot(outside) == before_out
    assert sorted(os.listdir(workspace.parent)) == before_parent  # nothing made beside the workspace


async def test_a_create_over_a_link_that_stays_inside_is_already_exists(client: ExecutorClient, workspace: Path,
                                                                        sub: str) -> None:
    # The contrast: a create never writes through a final link, and one that stays inside (to a
    # file, dangling, or a loop) is the existing entry it is.
    d = workspace / sub
    (d / "real.txt").write_text("keep\n")
    (d / "in").symlink_to("real.txt")
    (d / "gone").symlink_to("missing.txt")
    (d / "loop").symlink_to("loop")
    for name in ("in", "gone", "loop"):
        await fails("ALREADY_EXISTS", client.call("edit_file", {"path": f"{sub}/{name}", "mode": "create",
                                                                "content": "x"}))
    assert (d / "real.txt").read_text() == "keep\n" and not (d / "missing.txt").exists()


# ---------------------------------------------------------------------------- read_file (F-EXE-2)


async def test_read_file_offsets_at_every_byte_of_multibyte_text(client: ExecutorClient, workspace: Path,
                                                                 sub: str) -> None:
    text = "aé€😀\nz"  # characters of 1, 2, 3 and 4 bytes, no final newline
    data = text.encode()
    (workspace / sub / "u.txt").write_bytes(data)
    starts = {len(text[:i].encode()) for i in range(len(text) + 1)}  # every character boundary, the end too
    for off in range(len(data) + 2):
        args = {"path": f"{sub}/u.txt", "offset": off}
        if off > len(data):
            err = await fails("INVALID_ARGUMENT", client.call("read_file", args))
            assert f"offset {off} is past the end ({len(data)} bytes)" in str(err)
        elif off not in starts:
            err = await fails("INVALID_ARGUMENT", client.call("read_file", args))
            assert f"offset {off} is inside a UTF-8 character" in str(err)
        else:
            r = (await client.call("read_file", args)).result
            assert r["content"].encode() == data[off:]
            assert (r["offset"], r["next_offset"], r["eof"], r["size"]) == (off, len(data), True, len(data))
    # paging one line at a time: next_offset is a byte position, the last line ends the file
    first = (await client.call("read_file", {"path": f"{sub}/u.txt", "max_lines": 1})).result
    assert (first["content"], first["next_offset"], first["eof"]) == ("aé€😀\n", 11, False)
    last = (await client.call("read_file", {"path": f"{sub}/u.txt", "offset": 11, "max_lines": 1})).result
    assert (last["content"], last["start_line"], last["next_offset"], last["eof"]) == ("z", 2, 12, True)


async def test_read_file_lines_and_listings_at_their_ends(client: ExecutorClient, workspace: Path, sub: str) -> None:
    d = workspace / sub
    (d / "empty.txt").write_bytes(b"")
    (d / "three.txt").write_bytes(b"1\n2\n3\n")
    (d / ".dot").mkdir()
    (d / "Z").write_text("")
    read = lambda **a: client.call("read_file", a)  # noqa: E731
    r = (await read(path=f"{sub}/empty.txt")).result
    assert (r["kind"], r["content"], r["next_offset"], r["eof"], r["size"]) == ("file", "", 0, True, 0)
    await fails("INVALID_ARGUMENT", read(path=f"{sub}/empty.txt", offset=1))
    r = (await read(path=f"{sub}/three.txt", start_line=2, max_lines=2)).result  # exactly to the end
    assert (r["content"], r["start_line"], r["offset"], r["next_offset"], r["eof"]) == ("2\n3\n", 2, 2, 6, True)
    r = (await read(path=f"{sub}/three.txt", start_line=4)).result  # past the last line
    assert (r["content"], r["offset"], r["eof"]) == ("", 6, True)
    r = (await read(path=f"{sub}/three.txt", max_lines=2)).result
    assert (r["content"], r["next_offset"], r["eof"]) == ("1\n2\n", 4, False)
    for bad in ({"start_line": 0}, {"max_lines": 0}, {"offset": -1}, {"start_line": 1, "offset": 0},
                {"max_lines": "2"}, {"offset": 1.5}):
        await fails("INVALID_ARGUMENT", read(path=f"{sub}/three.txt", **bad))
    r = (await read(path=sub)).result  # hidden entries, code-point order, directories with "/"
    assert (r["kind"], r["entries"]) == ("directory", [".dot/", "Z", "empty.txt", "three.txt"])
    r = (await read(path=sub, start_line=2, max_lines=2)).result
    assert (r["entries"], r["start_line"], r["eof"]) == (["Z", "empty.txt"], 2, False)
    r = (await read(path=sub, offset=r["next_offset"])).result
    assert (r["entries"], r["start_line"], r["eof"]) == (["three.txt"], 4, True)


async def test_read_file_of_text_that_is_not_utf8(client: ExecutorClient, workspace: Path, sub: str) -> None:
    d = workspace / sub
    (d / "latin1.txt").write_bytes(b"caf\xe9\n")
    (d / "later.txt").write_bytes(b"ok\nok\n\xff\n")
    err = await fails("NOT_UTF8", client.call("read_file", {"path": f"{sub}/latin1.txt"}))
    assert str(err) == f"{sub}/latin1.txt: not valid UTF-8 (byte 3)"
    # UTF-8 is judged on the page read: the lines before the bad byte can be read
    r = (await client.call("read_file", {"path": f"{sub}/later.txt", "max_lines": 2})).result
    assert (r["content"], r["next_offset"], r["eof"]) == ("ok\nok\n", 6, False)
    err = await fails("NOT_UTF8", client.call("read_file", {"path": f"{sub}/later.txt", "offset": 6}))
    assert str(err) == f"{sub}/later.txt: not valid UTF-8 (byte 6)"


# ---------------------------------------------------------------------------- edit_file (F-EXE-3)


@pytest.mark.parametrize("extra", [0, 1])
async def test_rewrite_content_of_8_mib_and_one_byte_past(client: ExecutorClient, workspace: Path, sub: str,
                                                          extra: int) -> None:
    f = workspace / sub / "f.txt"
    f.write_bytes(b"old\n")
    args = {"path": f"{sub}/f.txt", "mode": "rewrite", "content": "r" * (MAX_TEXT + extra)}
    if extra:
        err = await fails("TOO_LARGE", client.call("edit_file", args))
        assert f"content is {MAX_TEXT + 1} bytes; at most {MAX_TEXT}" in str(err)
        assert f.read_bytes() == b"old\n"
        return
    out = await client.call("edit_file", args)
    assert out.result == {"path": f"{sub}/f.txt", "changed": True, "units_applied": 1, "bytes_written": MAX_TEXT}
    assert f.stat().st_size == MAX_TEXT


@pytest.mark.parametrize("extra", [0, 1])
async def test_rewrite_of_an_original_of_8_mib_and_one_byte_past(client: ExecutorClient, workspace: Path, sub: str,
                                                                 extra: int) -> None:
    f = workspace / sub / "f.txt"
    original = b"o" * (MAX_TEXT + extra)
    f.write_bytes(original)
    args = {"path": f"{sub}/f.txt", "mode": "rewrite", "content": "small\n"}
    if extra:
        err = await fails("TOO_LARGE", client.call("edit_file", args))
        assert f"the file is {MAX_TEXT + 1} bytes; at most {MAX_TEXT}" in str(err)
        assert f.stat().st_size == MAX_TEXT + 1
        return
    out = await client.call("edit_file", args)
    assert out.result["bytes_written"] == 6 and out.before == original and f.read_bytes() == b"small\n"


async def test_rewrite_and_edit_need_an_existing_utf8_regular_file(client: ExecutorClient, workspace: Path,
                                                                   sub: str) -> None:
    d = workspace / sub
    (d / "latin1.txt").write_bytes(b"caf\xe9\n")
    (d / "dir").mkdir()
    os.mkfifo(d / "fifo")
    cases = [("latin1.txt", "NOT_UTF8", "not valid UTF-8 (byte 3)"), ("dir", "NOT_A_FILE", "not a regular file"),
             ("fifo", "NOT_A_FILE", "not a regular file"), ("missing.txt", "NOT_FOUND", "no such file")]
    for name, code, words in cases:
        for args in ({"mode": "rewrite", "content": "x"},
                     {"mode": "edit", "edits": [{"old_string": "caf", "new_string": "x"}]}):
            err = await fails(code, client.call("edit_file", {"path": f"{sub}/{name}", **args}))
            assert str(err).startswith(f"{sub}/{name}: {words}"), str(err)
        await fails(code, client.call("patch_file", {"path": f"{sub}/{name}", "patch": "@@\n-caf\n+x\n"}))
    assert (d / "latin1.txt").read_bytes() == b"caf\xe9\n" and not (d / "missing.txt").exists()


async def test_calls_that_change_nothing_write_nothing(client: ExecutorClient, workspace: Path, sub: str) -> None:
    # F-EXE-5: bytes_written is 0 when nothing changed; the file is not even replaced
    f = workspace / sub / "f.txt"
    f.write_bytes(b"a\r\nb\r\n")
    inode = f.stat().st_ino
    calls = [
        ("edit_file", {"mode": "rewrite", "content": "a\r\nb\r\n"}, 1),
        ("edit_file", {"mode": "edit", "edits": [{"old_string": "a", "new_string": "x"},
                                                 {"old_string": "x", "new_string": "a"}]}, 2),
        ("edit_file", {"mode": "edit", "edits": [{"old_string": "b", "new_string": "b", "replace_all": True}]}, 1),
        ("patch_file", {"patch": "@@\n-a\n+a\n@@\n b\n"}, 2),
    ]
    for tool, args, units in calls:
        out = await client.call(tool, {"path": f"{sub}/f.txt", **args})
        assert out.result == {"path": f"{sub}/f.txt", "changed": False, "units_applied": units, "bytes_written": 0}
    assert f.read_bytes() == b"a\r\nb\r\n" and f.stat().st_ino == inode


async def test_edits_apply_in_order_in_memory_and_refusals_write_nothing(client: ExecutorClient, workspace: Path,
                                                                         sub: str) -> None:
    f = workspace / sub / "f.txt"
    f.write_bytes(b"one two one\n")
    edit = lambda *e: client.call("edit_file", {"path": f"{sub}/f.txt", "mode": "edit", "edits": list(e)})  # noqa: E731
    refusals = [
        (("NOT_UNIQUE", "edit 0: old_string matches more than once"), [{"old_string": "one", "new_string": "1"}]),
        (("NO_MATCH", "edit 1: old_string not found"),  # edit 0 was applied in memory only
         [{"old_string": "two", "new_string": "2"}, {"old_string": "two", "new_string": "x"}]),
        (("INVALID_ARGUMENT", "edit 1: old_string is empty"),
         [{"old_string": "two", "new_string": "2"}, {"old_string": "", "new_string": "x"}]),
        (("NOT_UNIQUE", "edit 1: old_string matches more than once"),  # "two" is unique until edit 0 makes two
         [{"old_string": "one two", "new_string": "two two"}, {"old_string": "two", "new_string": "x"}]),
    ]
    for (code, words), edits in refusals:
        err = await fails(code, edit(*edits))
        assert words in str(err), str(err)
        assert f.read_bytes() == b"one two one\n"
    out = await edit({"old_string": "one", "new_string": "1", "replace_all": True},
                     {"old_string": "1 two 1", "new_string": "done"})  # the second sees the first's result
    assert out.result == {"path": f"{sub}/f.txt", "changed": True, "units_applied": 2, "bytes_written": 5}
    assert f.read_bytes() == b"done\n"


# ---------------------------------------------------------------------------- patch_file (F-EXE-4)


PATCH_EDGES = [
    # untouched bytes kept (CRLF, mixed, no final newline); added lines take the nearby ending
    (b"a\r\nb\r\nc\r\n", "@@\n b\n+B2\n c\n", b"a\r\nb\r\nB2\r\nc\r\n"),
    (b"a\nb\r\nc\nd", "@@\n b\n+X\n", b"a\nb\r\nX\r\nc\nd"),
    (b"a\r\nb", "@@\n b\n+c\n", b"a\r\nb\r\nc"),
    (b"a\r\nb", "@@\n+z\n a\n", b"z\r\na\r\nb"),
    # "@@ <anchor>": the hunk matches after that one line
    (b"k1\nv\nk2\nv\n", "@@ k2\n-v\n+V\n", b"k1\nv\nk2\nV\n"),
    # "*** End of File" pins the hunk to the end, so a repeated line is unique there
    (b"k\nv\nk\nv\n", "@@\n-v\n+V\n*** End of File\n", b"k\nv\nk\nV\n"),
    # every hunk against the same original, in any order; touching hunks do not overlap
    (b"1\n2\n3\n4\n", "@@\n-3\n+C\n@@\n-2\n+B\n", b"1\nB\nC\n4\n"),
    # a pure-add hunk into an empty file, alone
    (b"", "@@\n+hello\n+world\n", b"hello\nworld\n"),
]


@pytest.mark.parametrize("original,patch,expected", PATCH_EDGES)
async def test_patch_file_keeps_untouched_bytes_exactly(client: ExecutorClient, workspace: Path, sub: str,
                                                        original: bytes, patch: str, expected: bytes) -> None:
    f = workspace / sub / "f.txt"
    f.write_bytes(original)
    out = await client.call("patch_file", {"path": f"{sub}/f.txt", "patch": patch})
    assert f.read_bytes() == expected
    assert out.result == {"path": f"{sub}/f.txt", "changed": True, "units_applied": patch.count("@@"),
                          "bytes_written": len(expected)}


@pytest.mark.parametrize("original,patch,code,words", [
    (b"k\nv\nk\nv\n", "@@\n-v\n+V\n", "NOT_UNIQUE", "hunk 0: matches 2 places in the file"),
    (b"k\nv\nk\nv\n", "@@ k\n-v\n+V\n", "NOT_UNIQUE", "hunk 0: the anchor line occurs 2 times"),
    (b"k\nv\n", "@@ nope\n-v\n+V\n", "NO_MATCH", "hunk 0: the anchor line is not in the file"),
    (b"1\n2\n3\n", "@@\n 1\n-2\n@@\n 2\n-3\n", "OVERLAP", "hunks 0 and 1 cover overlapping lines"),
    (b"x\n", "@@\n+y\n", "INVALID_PATCH", "only allowed as the single hunk of an empty file"),
    (b"", "@@\n+a\n@@\n+b\n", "INVALID_PATCH", "only allowed as the single hunk of an empty file"),
    (b"x", "@@\n-x\n+y\n\\ No newline at end of file\n", "INVALID_PATCH",
     "line 4: a body line starts with ' ', '+' or '-' ('\\ No newline at end of file' is no part of the grammar"),
])
async def test_patch_file_refusals_name_the_hunk_and_change_nothing(client: ExecutorClient, workspace: Path,
                                                                    sub: str, original: bytes, patch: str, code: str,
                                                                    words: str) -> None:
    f = workspace / sub / "f.txt"
    f.write_bytes(original)
    err = await fails(code, client.call("patch_file", {"path": f"{sub}/f.txt", "patch": patch}))
    assert words in str(err), str(err)
    assert f.read_bytes() == original


# ---------------------------------------------------------------------------- view_image (F-EXE-6)


@pytest.mark.parametrize("name,data,mime", [
    ("a.png", png(), "image/png"),
    *[(name, data, mime) for name, data, mime, _, _ in WHOLE],
    ("text.png", b"not an image at all\n", None),
    ("empty.png", b"", None),
])
async def test_view_image_knows_each_format_by_its_bytes(client: ExecutorClient, workspace: Path, sub: str,
                                                         name: str, data: bytes, mime: str | None) -> None:
    (workspace / sub / name).write_bytes(data)
    if mime is None:
        err = await fails("NOT_AN_IMAGE", client.call("view_image", {"path": f"{sub}/{name}"}))
        assert str(err) == f"{sub}/{name}: not a PNG, JPEG, GIF or WebP image"
        return
    out = await client.call("view_image", {"path": f"{sub}/{name}"})
    assert (out.data, out.mime) == (data, mime)


@pytest.mark.parametrize("name,data,code,said", [
    ("jpeg.png", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "NOT_AN_IMAGE", "the JPEG image is truncated (before its scan)"),
    ("cut.gif", GIF[:-1], "NOT_AN_IMAGE", "the GIF image is truncated (no trailer)"),
    ("cut.webp", WEBP_EXTENDED[:200], "NOT_AN_IMAGE", "the WEBP image is truncated (200 bytes of the 432 its RIFF header declares)"),
    ("huge.png", png_sized(100_000, 100_000), "TOO_LARGE", "the PNG image is 100000x100000 pixels; each side may be at most 8000"),
])
async def test_view_image_refuses_an_image_a_model_would_refuse(client: ExecutorClient, workspace: Path, sub: str,
                                                                name: str, data: bytes, code: str, said: str) -> None:
    # (magic bytes alone passed: the image was sent with every later request, and each refused)
    (workspace / sub / name).write_bytes(data)
    err = await fails(code, client.call("view_image", {"path": f"{sub}/{name}"}))
    assert str(err) == f"{sub}/{name}: {said}"


async def test_patch_file_matches_the_first_line_of_a_file_with_a_byte_order_mark_and_keeps_the_mark(
        client: ExecutorClient, workspace: Path, sub: str) -> None:
    bom = b"\xef\xbb\xbf"
    path = f"{sub}/bom.txt"
    (workspace / path).write_bytes(bom + b"hello\r\nworld\r\n")
    first = await client.call("patch_file", {"path": path, "patch": "@@\n-hello\n+hi\n world\n"})
    assert first.result == {"path": path, "changed": True, "units_applied": 1, "bytes_written": 14}
    assert (workspace / path).read_bytes() == bom + b"hi\r\nworld\r\n"
    added = await client.call("patch_file", {"path": path, "patch": "@@\n+top\n hi\n"})  # an add before line 1
    assert added.after == bom + b"top\r\nhi\r\nworld\r\n"
    (workspace / path).write_bytes(bom)  # a mark alone: the text is empty, a pure add is allowed
    await client.call("patch_file", {"path": path, "patch": "@@\n+only\n"})
    assert (workspace / path).read_bytes() == bom + b"only\n"
    await fails("INVALID_PATCH", client.call("patch_file", {"path": path, "patch": "@@\n+again\n"}))
    assert (workspace / path).read_bytes() == bom + b"only\n"


async def test_edit_file_rewrite_keeps_the_byte_order_mark_and_crlf_endings_as_patch_file_does(
        client: ExecutorClient, workspace: Path, sub: str) -> None:
    bom = b"\xef\xbb\xbf"
    path = f"{sub}/bom.txt"
    (workspace / path).write_bytes(bom + b"hello\r\nworld\r\n")
    out = await client.call("edit_file", {"path": path, "mode": "rewrite", "content": "hi\nworld\n"})
    assert out.result == {"path": path, "changed": True, "units_applied": 1, "bytes_written": 14}
    assert (workspace / path).read_bytes() == bom + b"hi\r\nworld\r\n"
    shown = (await client.call("read_file", {"path": path})).result["content"]  # the text back, mark and all
    again = await client.call("edit_file", {"path": path, "mode": "rewrite", "content": shown})
    assert again.result["changed"] is False and (workspace / path).read_bytes() == bom + b"hi\r\nworld\r\n"


async def test_patch_file_still_takes_a_first_line_that_repeats_the_byte_order_mark_read_file_shows(
        client: ExecutorClient, workspace: Path, sub: str) -> None:
    path = f"{sub}/bom.txt"
    (workspace / path).write_bytes(b"\xef\xbb\xbfhello\nworld\n")
    shown = (await client.call("read_file", {"path": path})).result["content"]
    assert shown.startswith("\ufeffhello\n")
    await client.call("patch_file", {"path": path, "patch": "@@\n-\ufeffhello\n+\ufeffhi\n world\n"})
    assert (workspace / path).read_bytes() == b"\xef\xbb\xbfhi\nworld\n"


async def test_a_patch_that_matches_nowhere_names_the_line_that_is_not_there(
        client: ExecutorClient, workspace: Path, sub: str) -> None:
    path = f"{sub}/f.py"
    original = b"\tdef f():\n\t\treturn 1\nx\ny\nz\n"
    (workspace / path).write_bytes(original)
    spaces = await fails("NO_MATCH", client.call("patch_file", {
        "path": path, "patch": "@@\n \tdef f():\n-    return 1\n+    return 2\n"}))
    assert "line 2 of them is not in the file" in str(spaces)
    assert "line 2 of the file differs from it only in whitespace" in str(spaces)
    trailing = await fails("NO_MATCH", client.call("patch_file", {"path": path, "patch": "@@\n-\t\treturn 1 \n+r\n"}))
    assert "line 2 of the file differs from it only in whitespace" in str(trailing)
    absent = await fails("NO_MATCH", client.call("patch_file", {"path": path, "patch": "@@\n x\n-nothing\n+n\n"}))
    assert "line 2 of them is not in the file)" in str(absent)
    order = await fails("NO_MATCH", client.call("patch_file", {"path": path, "patch": "@@\n x\n y\n-x\n+w\n"}))
    assert "the first 2 of them match at line 3; line 3 of them does not follow there" in str(order)
    anchored = await fails("NO_MATCH", client.call("patch_file", {"path": path, "patch": "@@ y\n-x\n+w\n"}))
    assert "line 1 of them is not after its anchor" in str(anchored)
    assert (workspace / path).read_bytes() == original


async def test_a_patch_pinned_to_the_end_that_does_not_end_the_file_says_why(
        client: ExecutorClient, workspace: Path, sub: str) -> None:
    path = f"{sub}/tail.py"
    original = b"def f():\n\treturn 1\n\nprint(f())\n# end\n"
    (workspace / path).write_bytes(original)

    async def refused(patch: str) -> str:
        message = str(await fails("NO_MATCH", client.call("patch_file", {"path": path, "patch": patch})))
        assert "are not the last lines of the file" in message
        assert "at the end of the file at the end" not in message and "in the file at the end" not in message
        return message

    # the lines are there, but a line of the file follows them
    elsewhere = await refused("@@\n print(f())\n+print(2)\n*** End of File\n")
    assert "they match at line 4 in the file, and the file has 5 lines; leave out '*** End of File'" in elsewhere
    # a line of the hunk that is nowhere: named, with the file's line that differs only in whitespace
    spaced = await refused("@@\n-    return 1\n+\treturn 2\n \n print(f())\n # end\n*** End of File\n")
    assert "line 1 of them is not in the file; line 2 of the file differs from it only in whitespace" in spaced
    # every line is somewhere, not in this order at the end
    order = await refused("@@\n print(f())\n-def f():\n+def g():\n*** End of File\n")
    assert "the first 1 of them match at line 4; line 2 of them does not follow there" in order
    # with an anchor
    anchored = await refused("@@ def f():\n print(f())\n+x\n*** End of File\n")
    assert "they match at line 4 after its anchor" in anchored
    assert (workspace / path).read_bytes() == original


async def test_an_absolute_path_through_a_link_to_the_workspace_is_refused_saying_how_to_name_it(
        client: ExecutorClient, workspace: Path, sub: str) -> None:
    (workspace / sub / "f.txt").write_text("inside\n")
    link = workspace.parent / f"link_to_workspace{next(_n)}"
    link.symlink_to(workspace)
    for tool, args in every_tool(str(link / sub / "f.txt")):
        refused = await fails("PATH_OUTSIDE_WORKSPACE", client.call(tool, args))
        assert "spelled as the root's own path (a link to the workspace is no part of it)" in str(refused)
        assert str(link) not in str(refused)  # no host path echoed
    read = await client.call("read_file", {"path": str(workspace / sub / "f.txt")})
    assert read.result["content"] == "inside\n"
    assert (workspace / sub / "f.txt").read_text() == "inside\n"
