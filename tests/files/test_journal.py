"""Atomic commit, call replay (F-EXE-5) and restore (revert_call)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from pathlib import Path

import pytest

from tools.files import EditOutcome, FileToolError, Workspace

from ..unwritable import unwritable
from .helpers import fails, leftovers


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fail_before_publish(stage: str) -> None:
    assert stage == "before_publish"
    raise OSError(errno.EIO, "injected failure", "/host/secret/path")


class _Died(BaseException):
    """The process died at the hook's point (a kill, no error of the call): nothing after it ran."""


def _die_before_publish(stage: str) -> None:
    assert stage == "before_publish"
    raise _Died


def _interrupted(call, *args, **kwargs) -> None:
    """``call`` interrupted as a kill interrupts it: its record written, the file not yet."""
    with pytest.raises(_Died):
        call(*args, **kwargs)


# ---------------------------------------------------------------- atomic commit

@pytest.mark.parametrize("call", [
    lambda ws: ws.edit_file("d/f.txt", "rewrite", content="new\n"),
    lambda ws: ws.edit_file("d/f.txt", "edit", edits=[{"old_string": "old", "new_string": "new"}]),
    lambda ws: ws.patch_file("d/f.txt", "@@\n-old\n+new\n"),
    lambda ws: ws.edit_file("d/g.txt", "create", content="new\n"),
    lambda ws: ws.restore("d/f.txt", b"new\n", sha(b"old\n")),
])
def test_forced_failure_leaves_no_temp_file(jws: Workspace, root: Path, tmp_path: Path, call) -> None:
    (root / "d").mkdir()
    (root / "d" / "f.txt").write_text("old\n")
    jws.commit_hook = _fail_before_publish
    err = fails("IO_ERROR", call, jws)
    assert "EIO" in err.message and "/host/secret" not in err.message and str(tmp_path) not in err.message
    assert (root / "d" / "f.txt").read_text() == "old\n"
    assert not (root / "d" / "g.txt").exists()
    assert leftovers(root) == [] and leftovers(tmp_path / "journal") == []
    assert sorted(p.name for p in (root / "d").iterdir()) == ["f.txt"]


# ---------------------------------------------------------------- call replay

def test_replay_does_not_apply_twice(jws: Workspace, root: Path) -> None:
    (root / "log.txt").write_text("line\n")
    edits = [{"old_string": "line\n", "new_string": "line\nline\n", "replace_all": True}]
    first = jws.edit_file("log.txt", "edit", edits=edits, call_id="call-1")
    again = jws.edit_file("log.txt", "edit", edits=edits, call_id="call-1")
    assert (root / "log.txt").read_text() == "line\nline\n"
    assert again == first == EditOutcome({"path": "log.txt", "changed": True, "units_applied": 1, "bytes_written": 10},
                                         b"line\n", b"line\nline\n", "log.txt")
    jws.edit_file("log.txt", "edit", edits=edits, call_id="call-2")  # a new id applies
    assert (root / "log.txt").read_text() == "line\n" * 4


def test_replay_survives_a_new_process(root: Path, tmp_path: Path) -> None:
    (root / "f").write_text("a\n")
    Workspace(root, journal_dir=tmp_path / "j").patch_file("f", "@@\n a\n+b\n", call_id="c")
    out = Workspace(root, journal_dir=tmp_path / "j").patch_file("f", "@@\n a\n+b\n", call_id="c")
    assert (root / "f").read_text() == "a\nb\n" and out.after == b"a\nb\n" and out.before == b"a\n"


def test_replay_of_create_and_of_unchanged_calls(jws: Workspace, root: Path) -> None:
    first = jws.edit_file("n.txt", "create", content="x", call_id="mk")
    assert jws.edit_file("n.txt", "create", content="x", call_id="mk") == first  # not ALREADY_EXISTS
    same = jws.edit_file("n.txt", "rewrite", content="x", call_id="noop")
    (root / "n.txt").write_text("changed meanwhile")
    assert jws.edit_file("n.txt", "rewrite", content="x", call_id="noop") == same
    assert (root / "n.txt").read_text() == "changed meanwhile"


def test_failed_calls_are_not_journaled(jws: Workspace, root: Path) -> None:
    (root / "f").write_text("a\n")
    fails("NO_MATCH", jws.patch_file, "f", "@@\n-b\n+c\n", call_id="c1")
    (root / "f").write_text("b\n")
    assert jws.patch_file("f", "@@\n-b\n+c\n", call_id="c1").structured["changed"]
    assert (root / "f").read_text() == "c\n"


def test_call_id_reused_for_other_arguments(jws: Workspace, root: Path) -> None:
    (root / "f").write_text("a\n")
    jws.edit_file("f", "rewrite", content="b\n", call_id="c1")
    fails("CALL_ID_REUSED", jws.edit_file, "f", "rewrite", content="c\n", call_id="c1")
    fails("CALL_ID_REUSED", jws.patch_file, "f", "@@\n-b\n+c\n", call_id="c1")
    assert (root / "f").read_text() == "b\n"


def _record(tmp_path: Path, call_id: str) -> Path:
    return tmp_path / "journal" / "calls" / (sha(call_id.encode()) + ".json")


def test_crash_before_the_commit_applies_once_on_retry(jws: Workspace, root: Path, tmp_path: Path) -> None:
    (root / "f").write_text("n=1\n")
    edits = [{"old_string": "\n", "new_string": "+1\n", "replace_all": True}]
    jws.commit_hook = _die_before_publish  # the crash: pending record written, file not published
    _interrupted(jws.edit_file, "f", "edit", edits=edits, call_id="c")
    assert json.loads(_record(tmp_path, "c").read_text())["state"] == "pending"
    jws.commit_hook = None
    out = jws.edit_file("f", "edit", edits=edits, call_id="c")
    assert (root / "f").read_text() == "n=1+1\n" and out.after == b"n=1+1\n"
    assert jws.edit_file("f", "edit", edits=edits, call_id="c") == out
    assert (root / "f").read_text() == "n=1+1\n"


def test_replaying_an_interrupted_call_removes_the_temp_file_it_left(jws: Workspace, root: Path) -> None:
    # A SIGKILL between writing the temp file and the rename left it in the workspace for good
    # (an audit found four 8 MiB ones after 25 rounds); the replay of that call removes it.
    (root / "d").mkdir()
    (root / "d" / "f").write_text("old\n")
    jws.commit_hook = _die_before_publish
    _interrupted(jws.edit_file, "d/f", "rewrite", content="new\n", call_id="c")
    jws.commit_hook = None
    left = root / "d" / ".f.lens-0123456789ab.tmp"  # what the killed process left
    left.write_bytes(b"n" * 4096)
    others = [root / "d" / ".g.lens-0123456789ab.tmp", root / "d" / ".f.lens-notatempname.tmp"]
    for other in others:
        other.write_text("not the interrupted call's")
    jws.edit_file("d/f", "rewrite", content="new\n", call_id="c")
    assert (root / "d" / "f").read_text() == "new\n"
    assert not left.exists() and all(other.exists() for other in others)


def test_a_replay_asks_whether_its_caller_waits_before_it_removes_the_temp_file(jws: Workspace, root: Path,
                                                                                tmp_path: Path) -> None:
    # The look comes first: a caller gone by then (a Stop by the call's id answered at once, and
    # the next write begun) finds nothing removed and nothing recorded; one that waits, asked
    # while the temp file is still there, has it removed and the call applied.
    (root / "d").mkdir()
    (root / "d" / "f").write_text("old\n")
    jws.commit_hook = _die_before_publish
    _interrupted(jws.edit_file, "d/f", "rewrite", content="new\n", call_id="c")
    jws.commit_hook = None
    left = root / "d" / ".f.lens-0123456789ab.tmp"  # the killed call's, or the next write's
    left.write_bytes(b"n" * 4096)
    jws.still_wanted = lambda: False
    with pytest.raises(FileToolError) as err:
        jws.edit_file("d/f", "rewrite", content="new\n", call_id="c")
    assert err.value.code == "CANCELLED" and "nothing was changed" in err.value.message
    assert left.exists() and (root / "d" / "f").read_text() == "old\n"
    assert json.loads(_record(tmp_path, "c").read_text())["state"] == "pending"
    looks: list[bool] = []
    jws.still_wanted = lambda: looks.append(left.exists()) or True
    jws.edit_file("d/f", "rewrite", content="new\n", call_id="c")
    assert looks[0] is True  # (asked before the removal)
    assert not left.exists() and (root / "d" / "f").read_text() == "new\n"


def test_replaying_an_interrupted_create_whose_directories_went_since_makes_it(jws: Workspace, root: Path,
                                                                              tmp_path: Path) -> None:
    # The replay looked at the file through its directories and answered NOT_FOUND when another
    # process had removed them since the interruption: a missing directory means the file is
    # absent, as the create found it, so the call is made again (its directories with it).
    jws.commit_hook = _die_before_publish
    _interrupted(jws.edit_file, "d/e/f", "create", content="new\n", call_id="c")
    jws.commit_hook = None
    assert json.loads(_record(tmp_path, "c").read_text())["state"] == "pending"
    for entry in sorted(root.rglob("*"), reverse=True):  # (another process removes d/)
        entry.rmdir() if entry.is_dir() else entry.unlink()
    out = jws.edit_file("d/e/f", "create", content="new\n", call_id="c")
    assert (root / "d" / "e" / "f").read_text() == "new\n" and out.structured["changed"] is True
    # A rewrite replayed the same way finds the file absent, which is not what it left: CONFLICT,
    # as when the file alone was removed, and nothing is made.
    (root / "g").mkdir()
    (root / "g" / "f").write_text("old\n")
    jws.commit_hook = _die_before_publish
    _interrupted(jws.edit_file, "g/f", "rewrite", content="b\n", call_id="r")
    jws.commit_hook = None
    (root / "g" / "f").unlink()
    (root / "g").rmdir()
    fails("CONFLICT", jws.edit_file, "g/f", "rewrite", content="b\n", call_id="r")
    assert not (root / "g").exists()


def test_crash_after_the_commit_is_not_applied_again(jws: Workspace, root: Path, tmp_path: Path) -> None:
    (root / "f").write_text("n=1\n")
    edits = [{"old_string": "\n", "new_string": "+1\n", "replace_all": True}]
    out = jws.edit_file("f", "edit", edits=edits, call_id="c")
    rec = _record(tmp_path, "c")
    data = json.loads(rec.read_text())
    data["state"] = "pending"  # as if the process died between the rename and the "done" record
    rec.write_text(json.dumps(data))
    again = jws.edit_file("f", "edit", edits=edits, call_id="c")
    assert again == out and (root / "f").read_text() == "n=1+1\n"
    assert json.loads(rec.read_text())["state"] == "done"


def test_a_replay_names_the_file_the_call_wrote_not_where_its_path_leads_now(jws: Workspace, root: Path,
                                                                           tmp_path: Path) -> None:
    (root / "a.txt").write_text("a\n")
    (root / "b.txt").write_text("b\n")
    (root / "l").symlink_to("a.txt")
    out = jws.edit_file("l", "rewrite", content="x\n", call_id="c")
    assert out.written == "a.txt"
    (root / "l").unlink()
    (root / "l").symlink_to("b.txt")  # retargeted before the call is replayed
    assert jws.edit_file("l", "rewrite", content="x\n", call_id="c") == out
    assert (root / "b.txt").read_text() == "b\n"
    assert json.loads(_record(tmp_path, "c").read_text())["written_path"] == "a.txt"
    # A record journaled before the written path was kept replays without one (Core then asks).
    rec = _record(tmp_path, "c")
    data = json.loads(rec.read_text())
    del data["written_path"]
    rec.write_text(json.dumps(data))
    old = jws.edit_file("l", "rewrite", content="x\n", call_id="c")
    assert old.written is None and (old.structured, old.before, old.after) == (out.structured, out.before, out.after)


def test_pending_call_with_a_foreign_file_state_is_a_conflict(jws: Workspace, root: Path, tmp_path: Path) -> None:
    (root / "f").write_text("a\n")
    jws.commit_hook = _die_before_publish
    _interrupted(jws.edit_file, "f", "rewrite", content="b\n", call_id="c")
    jws.commit_hook = None
    (root / "f").write_text("someone else\n")
    fails("CONFLICT", jws.edit_file, "f", "rewrite", content="b\n", call_id="c")
    assert (root / "f").read_text() == "someone else\n"


# A call whose write failed once its record was journaled, each run again under its call id after
# another writer put the bytes it meant to write in place: what the call does to the file as it
# is now (it claimed "changed", from a pending record of the write that never happened).
FAILED_WRITES = [
    pytest.param("d/f.txt", lambda ws: ws.edit_file("d/f.txt", "rewrite", content="new\n", call_id="c"), None,
                 id="rewrite"),
    pytest.param("d/f.txt", lambda ws: ws.edit_file("d/f.txt", "edit", edits=[{"old_string": "old",
                                                                                "new_string": "new"}],
                                                    call_id="c"), "NO_MATCH", id="edit"),
    pytest.param("d/f.txt", lambda ws: ws.patch_file("d/f.txt", "@@\n-old\n+new\n", call_id="c"), "NO_MATCH",
                 id="patch"),
    pytest.param("d/g.txt", lambda ws: ws.edit_file("d/g.txt", "create", content="new\n", call_id="c"),
                 "ALREADY_EXISTS", id="create"),
    pytest.param("d/f.txt", lambda ws: ws.restore("d/f.txt", b"new\n", sha(b"old\n"), call_id="c"), None,
                 id="restore"),
]


@pytest.mark.parametrize("how", ["a failing disk", "a read-only directory"])
@pytest.mark.parametrize("target,call,again", FAILED_WRITES)
def test_a_write_that_failed_leaves_no_record_and_runs_again_afresh(jws: Workspace, root: Path, tmp_path: Path,
                                                                   how: str, target: str, call, again) -> None:
    (root / "d").mkdir()
    (root / "d" / "f.txt").write_text("old\n")
    with contextlib.ExitStack() as stack:
        if how == "a failing disk":
            jws.commit_hook = _fail_before_publish
            code, words = "IO_ERROR", "operating-system error EIO"
        else:  # (the file read and journaled, its directory takes no new entry)
            stack.enter_context(unwritable(root / "d"))
            code, words = "PERMISSION_DENIED", "permission denied"
        err = fails(code, call, jws)
    jws.commit_hook = None
    assert err.message == f"{target}: {words}"
    assert list((tmp_path / "journal" / "calls").iterdir()) == []
    assert (root / "d" / "f.txt").read_text() == "old\n" and leftovers(root) == []
    (root / "d" / target.rsplit("/", 1)[1]).write_text("new\n")  # (another writer)
    if again is None:
        out = call(jws)
        assert out.structured["changed"] is False and out.before == out.after == b"new\n"
    else:
        fails(again, call, jws)
    assert (root / target).read_text() == "new\n"


def test_a_file_written_whose_record_cannot_be_marked_done_is_written_and_said_so(jws: Workspace, root: Path,
                                                                                 tmp_path: Path) -> None:
    # The file was published, then the journal refused the "done" record: the call answered
    # PERMISSION_DENIED (or IO_ERROR, a full disk) for a file it had changed, so no history kept
    # the change and revert_call could not undo it. The call succeeds; its pending record, over
    # a file holding its bytes, replays as done and is not applied twice.
    (root / "f").write_text("n=1\n")
    edits = [{"old_string": "\n", "new_string": "+1\n", "replace_all": True}]
    calls = tmp_path / "journal" / "calls"
    with contextlib.ExitStack() as stack:
        jws.commit_hook = lambda stage: stack.enter_context(unwritable(calls))
        out = jws.edit_file("f", "edit", edits=edits, call_id="c")
    jws.commit_hook = None
    assert out == EditOutcome({"path": "f", "changed": True, "units_applied": 1, "bytes_written": 6},
                              b"n=1\n", b"n=1+1\n", "f")
    assert (root / "f").read_text() == "n=1+1\n"
    assert json.loads(_record(tmp_path, "c").read_text())["state"] == "pending"
    assert jws.edit_file("f", "edit", edits=edits, call_id="c") == out
    assert (root / "f").read_text() == "n=1+1\n"
    assert json.loads(_record(tmp_path, "c").read_text())["state"] == "done"


def test_without_a_journal_call_ids_are_ignored(ws: Workspace, root: Path) -> None:
    (root / "f").write_text("x")
    ws.edit_file("f", "edit", edits=[{"old_string": "x", "new_string": "xx"}], call_id="c")
    ws.edit_file("f", "edit", edits=[{"old_string": "xx", "new_string": "xxx"}], call_id="c")
    assert (root / "f").read_text() == "xxx"
    fails("INVALID_ARGUMENT", ws.edit_file, "f", "rewrite", content="y", call_id=7)


# ---------------------------------------------------------------- restore (revert_call)

def test_revert_several_calls_restores_the_exact_prior_bytes(jws: Workspace, root: Path) -> None:
    history: list[EditOutcome] = [
        jws.edit_file("src/m.py", "create", content="a = 1\r\nb = 2\r\n", call_id="1"),
        jws.edit_file("src/m.py", "edit", edits=[{"old_string": "a = 1", "new_string": "a = 10"}], call_id="2"),
        jws.patch_file("src/m.py", "@@\n b = 2\n+c = 3\n", call_id="3"),
        jws.edit_file("src/m.py", "rewrite", content="gone", call_id="4"),
        jws.patch_file("src/m.py", "@@\n-gone\n+back", call_id="5"),
    ]
    states = [h.before for h in history] + [history[-1].after]
    assert states == [None, b"a = 1\r\nb = 2\r\n", b"a = 10\r\nb = 2\r\n", b"a = 10\r\nb = 2\r\nc = 3\r\n", b"gone",
                      b"back"]
    for i, h in enumerate(reversed(history)):
        assert h.after is not None
        out = jws.restore("src/m.py", h.before, sha(h.after), call_id=f"revert-{i}")
        assert out.structured["changed"] and out.before == h.after and out.after == h.before
        if h.before is None:
            assert not (root / "src" / "m.py").exists() and (root / "src").is_dir()
        else:
            assert (root / "src" / "m.py").read_bytes() == h.before
    (root / "src" / "m.py").write_bytes(history[0].after or b"")  # as if created again meanwhile
    replayed = jws.restore("src/m.py", None, sha(history[0].after or b""), call_id="revert-4")
    assert replayed.structured["changed"] and (root / "src" / "m.py").exists()  # not applied twice
    fails("CALL_ID_REUSED", jws.restore, "src/m.py", None, sha(b"x"), call_id="revert-4")


def test_restore_outcomes(ws: Workspace, root: Path) -> None:
    (root / "f").write_bytes(b"now")
    fails("CONFLICT", ws.restore, "f", b"before", sha(b"something else"))
    fails("CONFLICT", ws.restore, "f", b"before", None)  # expected absent, but it exists
    assert (root / "f").read_bytes() == b"now"
    out = ws.restore("f", b"before\n", sha(b"now"))
    assert out == EditOutcome({"path": "f", "changed": True, "units_applied": 1, "bytes_written": 7}, b"now", b"before\n",
                              "f")
    same = ws.restore("f", b"before\n", sha(b"now"))  # already there: nothing to do
    assert same.structured == {"path": "f", "changed": False, "units_applied": 1, "bytes_written": 0}
    removed = ws.restore("f", None, sha(b"before\n"))
    assert removed == EditOutcome({"path": "f", "changed": True, "units_applied": 1, "bytes_written": 0},
                                  b"before\n", None, "f")
    assert not (root / "f").exists()
    assert not ws.restore("f", None, sha(b"before\n")).structured["changed"]
    fails("CONFLICT", ws.restore, "f", b"x", sha(b"y"))  # expected bytes, but it is absent
    assert ws.restore("new/dir/f", b"x", None).structured["changed"]
    assert (root / "new/dir/f").read_bytes() == b"x"
    fails("INVALID_ARGUMENT", ws.restore, "f", b"x", "not-a-sha")
    fails("INVALID_ARGUMENT", ws.restore, "f", b"x", sha(b"y") + "\n")  # checked whole (`$` took it: CONFLICT)
    fails("INVALID_ARGUMENT", ws.restore, "f", "text", None)


def test_a_restore_refused_for_a_file_whose_directory_is_gone_makes_no_directory(ws: Workspace,
                                                                                  root: Path) -> None:
    # A revert of a rewrite of d/e/f after d was removed: the file is not the edit's result, so
    # CONFLICT, and the directories on its way are not made for a file that is not written.
    err = fails("CONFLICT", ws.restore, "d/e/f", b"before\n", sha(b"after\n"))
    assert "changed since" in err.message
    assert list(root.iterdir()) == []


def test_a_restore_that_removes_a_file_whose_directory_is_gone_succeeds(ws: Workspace, root: Path) -> None:
    # A revert of the create of d/e/f after d was removed: the file is absent, as the revert
    # wants it, which is success with nothing changed (as for an absent file in a directory).
    out = ws.restore("d/e/f", None, sha(b"created\n"))
    assert out == EditOutcome({"path": "d/e/f", "changed": False, "units_applied": 1, "bytes_written": 0},
                              None, None, "d/e/f")
    assert list(root.iterdir()) == []


def test_restore_keeps_the_mode(ws: Workspace, root: Path) -> None:
    f = root / "tool.sh"
    f.write_bytes(b"v2")
    os.chmod(f, 0o700)
    ws.restore("tool.sh", b"v1", sha(b"v2"))
    assert f.read_bytes() == b"v1" and (f.stat().st_mode & 0o777) == 0o700


def test_a_record_names_its_workspace_and_one_journaled_before_it_was_kept_replays(jws: Workspace, root: Path,
                                                                                    tmp_path: Path) -> None:
    (root / "f.txt").write_text("x")
    edits = [{"old_string": "x", "new_string": "xy"}]
    out = jws.edit_file("f.txt", "edit", edits=edits, call_id="c")
    rec = _record(tmp_path, "c")
    data = json.loads(rec.read_text())
    assert data["workspace"] == os.path.realpath(root)
    del data["workspace"]  # (as a record written before the workspace was kept)
    rec.write_text(json.dumps(data))
    assert jws.edit_file("f.txt", "edit", edits=edits, call_id="c") == out
    assert (root / "f.txt").read_text() == "xy"
    # The same state directory under another workspace: that record is not this workspace's call.
    other = tmp_path / "other"
    other.mkdir()
    (other / "f.txt").write_text("x")
    data["workspace"] = os.path.realpath(root)
    rec.write_text(json.dumps(data))
    err = fails("CALL_ID_REUSED", lambda: Workspace(other, journal_dir=tmp_path / "journal")
                .edit_file("f.txt", "edit", edits=edits, call_id="c"))
    assert "another workspace" in err.message and str(root) not in err.message
    assert (other / "f.txt").read_text() == "x"
