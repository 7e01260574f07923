"""edit_file (F-EXE-3): create / rewrite / edit, argument rules and every limit at its edge."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from tools.files import LIMITS, EditOutcome, Workspace
from tools.files.errors import FileToolError

from .helpers import fails, leftovers

MAX = LIMITS["MAX_TEXT_BYTES"]
UNITS = LIMITS["MAX_UNITS"]


def test_create_outcome_and_parents(ws: Workspace, root: Path) -> None:
    out = ws.edit_file("new/deep/f.txt", "create", content="héllo\n")
    assert out == EditOutcome({"path": "new/deep/f.txt", "changed": True, "units_applied": 1, "bytes_written": 7},
                              None, "héllo\n".encode(), "new/deep/f.txt")
    assert (root / "new/deep/f.txt").read_bytes() == "héllo\n".encode()
    assert leftovers(root) == []


@pytest.mark.parametrize("name_bytes", [255, 256])
def test_create_with_a_file_name_at_and_past_the_limit(ws: Workspace, root: Path, name_bytes: int) -> None:
    name = "é" * (name_bytes // 2) + "x" * (name_bytes % 2)  # two bytes per "é"
    assert len(name.encode()) == name_bytes
    path = f"new/deep/{name}"
    if name_bytes <= 255:
        assert ws.edit_file(path, "create", content="x").structured["changed"] is True
        assert (root / path).read_text() == "x"
        return
    err = fails("INVALID_ARGUMENT", ws.edit_file, path, "create", content="x")
    assert "longer than 255 bytes" in err.message
    assert list(root.iterdir()) == []  # no parent directories were made for it
    fails("INVALID_ARGUMENT", ws.read_file, name)


@pytest.mark.parametrize("name", ["文" * 85, "😀" * 63 + "xyz"], ids=["3-byte", "4-byte"])
def test_long_names_of_wide_characters_can_be_created_and_rewritten(ws: Workspace, root: Path, name: str) -> None:
    # Temp names kept 80 characters of the target's: 240-320 bytes, which no file system takes.
    assert len(name.encode()) == 255
    path = f"newdir/{name}"
    assert ws.edit_file(path, "create", content="one\n").structured["changed"] is True
    assert ws.edit_file(path, "rewrite", content="two\n").structured["changed"] is True
    assert (root / path).read_text() == "two\n"
    assert leftovers(root) == []


def test_a_create_that_fails_after_making_its_directories_removes_them(ws: Workspace, root: Path) -> None:
    # A failed create left the directories it had made for its file: when its caller had gone
    # (CANCELLED, asked once the edit is computed) and when a link spliced in levels that took
    # the walk past its depth while it made them. A directory someone else put a file in stays.
    from tools.files.confine import MAX_PATH_DEPTH

    (root / "kept").mkdir()
    ws.still_wanted = lambda: False
    fails("CANCELLED", ws.edit_file, "kept/a/b/f.txt", "create", content="x")
    assert [p.name for p in root.rglob("*")] == ["kept"]
    ws.still_wanted = None
    (root / "s").symlink_to("kept/" + "d/" * (MAX_PATH_DEPTH - 2) + "e")
    err = fails("INVALID_ARGUMENT", ws.edit_file, "s/x/y/f.txt", "create", content="x")
    assert f"more than {MAX_PATH_DEPTH} directories deep" in err.message
    assert sorted(p.name for p in root.rglob("*")) == ["kept", "s"]
    (root / "kept" / "a").mkdir()
    ws.still_wanted = lambda: (root / "kept" / "a" / "b" / "theirs").write_text("") and False
    fails("CANCELLED", ws.edit_file, "kept/a/b/f.txt", "create", content="x")
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == ["kept", "kept/a", "kept/a/b",
                                                                          "kept/a/b/theirs", "s"]


def test_create_empty_file(ws: Workspace, root: Path) -> None:
    out = ws.edit_file("e", "create", content="")
    assert out.structured == {"path": "e", "changed": True, "units_applied": 1, "bytes_written": 0}
    assert (root / "e").read_bytes() == b""


@pytest.mark.parametrize("kind", ["file", "dir", "symlink", "dangling"])
def test_create_never_overwrites(ws: Workspace, root: Path, kind: str) -> None:
    target = root / "t"
    if kind == "file":
        target.write_text("keep")
    elif kind == "dir":
        target.mkdir()
    elif kind == "symlink":
        (root / "real").write_text("keep")
        target.symlink_to("real")
    else:
        target.symlink_to("missing")
    fails("ALREADY_EXISTS", ws.edit_file, "t", "create", content="new")
    if kind == "file":
        assert target.read_text() == "keep"
    if kind == "symlink":
        assert (root / "real").read_text() == "keep" and target.is_symlink()
    if kind == "dangling":
        assert not (root / "missing").exists()
    fails("ALREADY_EXISTS", ws.edit_file, ".", "create", content="x")


def test_create_loses_a_race_without_overwriting(ws: Workspace, root: Path) -> None:
    def racer(stage: str) -> None:  # another writer publishes the name right before we do
        (root / "f").write_text("theirs")

    ws.commit_hook = racer
    fails("ALREADY_EXISTS", ws.edit_file, "f", "create", content="ours")
    assert (root / "f").read_text() == "theirs"
    assert leftovers(root) == []


def test_the_outcome_names_the_file_written_through_symlinks(ws: Workspace, root: Path) -> None:
    # Core records which file an edit wrote from this (it asked the executor's resolve after
    # each edit, one more round trip); the walk that wrote the file knows.
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "f.txt").write_text("one\n")
    (root / "l").symlink_to("d/e")           # a directory link
    (root / "lf").symlink_to("d/f.txt")      # a file link
    (root / "abs").symlink_to(root / "d")    # absolute, inside the root
    (root / "chain").symlink_to("lf")        # a link to a link
    calls = [("l/../f.txt", lambda p: ws.edit_file(p, "rewrite", content="two\n"), "d/f.txt"),
             ("lf", lambda p: ws.edit_file(p, "edit", edits=[{"old_string": "two", "new_string": "three"}]), "d/f.txt"),
             ("chain", lambda p: ws.patch_file(p, "@@\n-three\n+four\n"), "d/f.txt"),
             ("abs/f.txt", lambda p: ws.edit_file(p, "rewrite", content="four\n"), "d/f.txt"),  # unchanged
             ("./l/new.txt", lambda p: ws.edit_file(p, "create", content="hi\n"), "d/e/new.txt"),
             ("l/made/deeper.txt", lambda p: ws.edit_file(p, "create", content="hi\n"), "d/e/made/deeper.txt"),
             (str(root / "lf"), lambda p: ws.restore(p, b"one\n", hashlib.sha256(b"four\n").hexdigest()), "d/f.txt")]
    for path, call, written in calls:
        out = call(path)
        assert out.written == written and out.structured["path"] == path, (path, out)
    assert (root / "d" / "f.txt").read_text() == "one\n" and (root / "d" / "e" / "made" / "deeper.txt").exists()
    assert (root / "lf").is_symlink() and (root / "chain").is_symlink()


def test_rewrite(ws: Workspace, root: Path) -> None:
    (root / "f").write_bytes(b"old\nline\n")
    out = ws.edit_file("f", "rewrite", content="new\r\n")
    assert out == EditOutcome({"path": "f", "changed": True, "units_applied": 1, "bytes_written": 5}, b"old\nline\n",
                              b"new\r\n", "f")
    assert (root / "f").read_bytes() == b"new\r\n"  # content spells its endings: written as given


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("original, content, after", [
    (BOM + b"a\nb\n", "x\ny\n", BOM + b"x\ny\n"),                # the file's mark kept
    (BOM + b"a\nb\n", "\ufeffx\ny\n", BOM + b"x\ny\n"),          # content with the mark: not doubled
    (b"a\nb\n", "\ufeffx\n", BOM + b"x\n"),                        # a mark the content asks for: given
    (BOM + b"a\n", "", BOM),                                         # empty text: the mark stays, as patch_file's
    (b"a\r\nb\r\n", "x\ny\n", b"x\r\ny\r\n"),                     # CRLF file, bare LF content: CRLF kept
    (BOM + b"a\r\nb\n\r\n", "x\ny", BOM + b"x\r\ny"),                # dominant CRLF (2 to 1), no final ending
    (b"a\r\nb\r\n", "x\r\ny\n", b"x\r\ny\n"),                     # content with a CRLF spells its endings
    (b"a\r\nb\nc\n", "x\ny\n", b"x\ny\n"),                          # dominant LF (1 to 2): as given
    (b"a\r\nb\n", "x\ny\n", b"x\ny\n"),                              # a tie is LF, as patch_file's rule
    (b"\r\n\r\r\n\n", "x\n", b"x\r\n"),                              # CRs alone or doubled: 2 CRLF to 1 LF
    (b"a\r\n", "x\ry\n", b"x\ry\r\n"),                              # a lone CR is text, its LF still follows
])
def test_rewrite_keeps_the_files_byte_order_mark_and_crlf_endings(ws: Workspace, root: Path, original: bytes,
                                                                   content: str, after: bytes) -> None:
    (root / "f").write_bytes(original)
    out = ws.edit_file("f", "rewrite", content=content)
    assert (root / "f").read_bytes() == after and out.after == after
    assert out.structured["bytes_written"] == (len(after) if after != original else 0)


def test_a_rewrite_that_restates_a_bom_crlf_file_changes_nothing(ws: Workspace, root: Path) -> None:
    (root / "f").write_bytes(BOM + b"a\r\nb\r\n")
    before = os.stat(root / "f")
    out = ws.edit_file("f", "rewrite", content="a\nb\n")  # as a model writes the text back
    assert out.structured == {"path": "f", "changed": False, "units_applied": 1, "bytes_written": 0}
    assert os.stat(root / "f").st_ino == before.st_ino


def test_a_crlf_rewrite_past_the_result_limit_is_too_large(ws: Workspace, root: Path) -> None:
    # the content fits, the CRLF result does not: refused, nothing written
    (root / "f").write_bytes(b"a\r\n")
    lines = LIMITS["MAX_TEXT_BYTES"] // 2 + 1  # 4 MiB + 1 of content, 8 MiB + 2 written
    err = fails("TOO_LARGE", ws.edit_file, "f", "rewrite", content="\n" * lines)
    assert "result" in err.message and (root / "f").read_bytes() == b"a\r\n"


def test_rewrite_to_same_bytes_does_not_touch_the_file(ws: Workspace, root: Path) -> None:
    (root / "f").write_text("same\n")
    before = os.stat(root / "f")
    out = ws.edit_file("f", "rewrite", content="same\n")
    assert out.structured == {"path": "f", "changed": False, "units_applied": 1, "bytes_written": 0}
    after = os.stat(root / "f")
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_rewrite_keeps_the_mode_and_publishes_a_new_inode(ws: Workspace, root: Path) -> None:
    f = root / "run.sh"
    f.write_text("#!/bin/sh\n")
    os.chmod(f, 0o751)
    ino = f.stat().st_ino
    ws.edit_file("run.sh", "rewrite", content="#!/bin/sh\necho hi\n")
    assert stat.S_IMODE(f.stat().st_mode) == 0o751
    assert f.stat().st_ino != ino  # published by rename, never written in place


@pytest.mark.parametrize("mode", ["rewrite", "edit"])
def test_update_needs_an_existing_utf8_regular_file(ws: Workspace, root: Path, mode: str) -> None:
    kw = {"content": "x"} if mode == "rewrite" else {"edits": [{"old_string": "a", "new_string": "b"}]}
    fails("NOT_FOUND", ws.edit_file, "missing", mode, **kw)
    (root / "d").mkdir()
    fails("NOT_A_FILE", ws.edit_file, "d", mode, **kw)
    fails("NOT_A_FILE", ws.edit_file, ".", mode, **kw)
    (root / "bin").write_bytes(b"a\xff")
    fails("NOT_UTF8", ws.edit_file, "bin", mode, **kw)
    assert (root / "bin").read_bytes() == b"a\xff"


def test_edit_applies_in_order_and_commits_once(ws: Workspace, root: Path) -> None:
    (root / "f").write_text("alpha beta gamma\n")
    out = ws.edit_file("f", "edit", edits=[
        {"old_string": "alpha", "new_string": "ALPHA"},
        {"old_string": "ALPHA beta", "new_string": "AB"},  # sees the first edit's result
        {"old_string": "gamma", "new_string": "γ", "replace_all": False},
    ])
    assert out.structured == {"path": "f", "changed": True, "units_applied": 3, "bytes_written": len("AB γ\n".encode())}
    assert (root / "f").read_text() == "AB γ\n"
    assert out.before == b"alpha beta gamma\n"


def test_edit_match_rules(ws: Workspace, root: Path) -> None:
    (root / "f").write_text("x = 1\nx = 1\ny = 2\naaa\n")
    e = fails("NOT_UNIQUE", ws.edit_file, "f", "edit", edits=[{"old_string": "x = 1", "new_string": "x = 3"}])
    assert "edit 0" in e.message
    fails("NOT_UNIQUE", ws.edit_file, "f", "edit", edits=[{"old_string": "aa", "new_string": "b"}])  # overlapping
    e = fails("NO_MATCH", ws.edit_file, "f", "edit", edits=[{"old_string": "y = 2", "new_string": "y = 4"},
                                                            {"old_string": "zzz", "new_string": "w"}])
    assert "edit 1" in e.message
    assert (root / "f").read_text() == "x = 1\nx = 1\ny = 2\naaa\n"  # nothing committed
    out = ws.edit_file("f", "edit", edits=[{"old_string": "x = 1", "new_string": "x = 3", "replace_all": True}])
    assert (root / "f").read_text() == "x = 3\nx = 3\ny = 2\naaa\n" and out.structured["units_applied"] == 1


def test_edit_that_changes_nothing(ws: Workspace, root: Path) -> None:
    (root / "f").write_text("keep\n")
    out = ws.edit_file("f", "edit", edits=[{"old_string": "keep", "new_string": "keep"}])
    assert out.structured == {"path": "f", "changed": False, "units_applied": 1, "bytes_written": 0}


@pytest.mark.parametrize("mode,kw", [
    ("create", {}),
    ("create", {"content": "x", "edits": [{"old_string": "a", "new_string": "b"}]}),
    ("create", {"edits": [{"old_string": "a", "new_string": "b"}]}),
    ("rewrite", {}),
    ("rewrite", {"content": 5}),
    ("edit", {"content": "x"}),
    ("edit", {"content": "x", "edits": [{"old_string": "a", "new_string": "b"}]}),
    ("edit", {}),
    ("edit", {"edits": []}),
    ("edit", {"edits": "a->b"}),
    ("edit", {"edits": ["a"]}),
    ("edit", {"edits": [{"old_string": "", "new_string": "b"}]}),
    ("edit", {"edits": [{"old_string": "a"}]}),
    ("edit", {"edits": [{"old_string": "a", "new_string": None}]}),
    ("edit", {"edits": [{"old_string": "a", "new_string": "b", "replace_all": "yes"}]}),
    ("edit", {"edits": [{"old_string": "a", "new_string": "b", "regex": True}]}),
    ("append", {"content": "x"}),
    ("rewrite", {"content": "\ud800"}),
])
def test_wrong_argument_combinations(ws: Workspace, root: Path, mode: str, kw: dict) -> None:
    (root / "f").write_text("a\n")
    fails("INVALID_ARGUMENT", ws.edit_file, "f", mode, **kw)
    assert (root / "f").read_text() == "a\n"


@pytest.mark.parametrize("count,code", [(UNITS, None), (UNITS + 1, "TOO_MANY_UNITS")])
def test_edit_count_edge(ws: Workspace, root: Path, count: int, code: str | None) -> None:
    (root / "f").write_text("".join(f"<{i}>" for i in range(count)))
    edits = [{"old_string": f"<{i}>", "new_string": f"[{i}]"} for i in range(count)]
    if code:
        fails(code, ws.edit_file, "f", "edit", edits=edits)
    else:
        assert ws.edit_file("f", "edit", edits=edits).structured["units_applied"] == UNITS


@pytest.mark.parametrize("extra", [0, 1])
def test_create_content_size_edge(ws: Workspace, root: Path, extra: int) -> None:
    content = "a" * (MAX + extra)
    if extra:
        fails("TOO_LARGE", ws.edit_file, "big", "create", content=content)
        assert not (root / "big").exists()
    else:
        assert ws.edit_file("big", "create", content=content).structured["bytes_written"] == MAX


@pytest.mark.parametrize("extra", [0, 1])
def test_edit_input_size_edge(ws: Workspace, root: Path, extra: int) -> None:
    (root / "f").write_text("<>")
    edits = [{"old_string": "<", "new_string": "b" * (MAX // 2 - 1)},
             {"old_string": ">", "new_string": "c" * (MAX // 2 - 1 + extra)}]  # old+new total MAX (+1)
    if extra:
        fails("TOO_LARGE", ws.edit_file, "f", "edit", edits=edits)
    else:
        assert ws.edit_file("f", "edit", edits=edits).structured["bytes_written"] == MAX - 2


@pytest.mark.parametrize("extra", [0, 1])
def test_original_size_edge(ws: Workspace, root: Path, extra: int) -> None:
    (root / "f").write_bytes(b"a" * (MAX - 1 + extra) + b"Z")
    edits = [{"old_string": "Z", "new_string": "Y"}]
    if extra:
        fails("TOO_LARGE", ws.edit_file, "f", "edit", edits=edits)
        fails("TOO_LARGE", ws.edit_file, "f", "rewrite", content="small")
    else:
        assert ws.edit_file("f", "edit", edits=edits).structured["bytes_written"] == MAX


@pytest.mark.parametrize("extra", [0, 1])
def test_result_size_edge(ws: Workspace, root: Path, extra: int) -> None:
    half = MAX // 2
    (root / "f").write_bytes(b"a" * (half - 1) + b"Z")  # 4 MiB original, small input
    edits = [{"old_string": "a", "new_string": "aa", "replace_all": True},  # -> MAX - 1 bytes
             {"old_string": "Z", "new_string": "ZZ" + "Z" * extra}]       # -> MAX (+1)
    if extra:
        fails("TOO_LARGE", ws.edit_file, "f", "edit", edits=edits)
        assert (root / "f").stat().st_size == half
    else:
        assert ws.edit_file("f", "edit", edits=edits).structured["bytes_written"] == MAX


def test_replace_all_growth_is_stopped_early(ws: Workspace, root: Path) -> None:
    (root / "f").write_text("a")
    edits = [{"old_string": "a", "new_string": "aa", "replace_all": True}] * UNITS  # 2**128 bytes
    fails("TOO_LARGE", ws.edit_file, "f", "edit", edits=edits)


def test_an_edit_its_caller_gave_up_on_writes_nothing(jws: Workspace, root: Path) -> None:
    # The executor asks whether the caller still waits once the edit is computed (a big patch
    # can take long): a call whose caller hit its deadline must not write over what the next
    # call wrote meanwhile.
    (root / "f.txt").write_text("one\ntwo\n")
    asked: list[bool] = []

    def gone() -> bool:
        asked.append(True)
        return False

    jws.still_wanted = gone
    for call in (lambda: jws.patch_file("f.txt", "@@\n one\n-two\n+TWO\n", call_id="c1"),
                 lambda: jws.edit_file("f.txt", "rewrite", content="new\n", call_id="c2"),
                 lambda: jws.edit_file("g.txt", "create", content="new\n", call_id="c3")):
        with pytest.raises(FileToolError) as info:
            call()
        assert info.value.code == "CANCELLED" and "nothing was changed" in info.value.message
    assert asked == [True, True, True]
    assert (root / "f.txt").read_text() == "one\ntwo\n" and not (root / "g.txt").exists()
    jws.still_wanted = lambda: True  # the same call id, retried: applied afresh (nothing journaled)
    assert jws.patch_file("f.txt", "@@\n one\n-two\n+TWO\n", call_id="c1").structured["changed"] is True
    assert (root / "f.txt").read_text() == "one\nTWO\n"


def test_a_long_read_stops_once_its_caller_gave_up(ws: Workspace, root: Path) -> None:
    # Finding a line far past the end of a huge sparse file reads all of it; the executor's
    # "caller still waits" check is asked every 64 reads of 1 MiB (a test-sized file here).
    with (root / "sparse.bin").open("wb") as f:
        f.truncate(200 * 1024 * 1024)  # 200 MiB of holes: no disk used
    asked = []
    ws.still_wanted = lambda: asked.append(True) or False
    with pytest.raises(FileToolError) as info:
        ws.read_file("sparse.bin", start_line=10**18)
    assert info.value.code == "CANCELLED" and asked == [True]  # stopped at the first check
    ws.still_wanted = lambda: True
    assert ws.read_file("sparse.bin", start_line=10**18)["content"] == ""  # read whole: past the end
