"""How an aborted command's result says it ended (``decide.aborted_call_content``), for each end
its exit can tell, and how a cut-off call's result says what it changed all the same
(``decide.applied_edits_note``: edits, a revert's restores): pure functions, no I/O."""

from __future__ import annotations

import pytest

from events.types import FileEdited, FileReverted
from runtime.decide import (ABORTED_TEXT, NOTE_PATHS_MAX, CutCall, CutEdits, CutProgram, aborted_call_content,
                            applied_edits_note)


@pytest.mark.parametrize("cut, note, structured", [
    (CutCall("out", False), "[killed by the abort]", {"exit_code": None, "signal": None, "killed_by_abort": None}),
    (CutCall("out", True, -15, "SIGTERM", True), "[killed by the abort: signal 15 (SIGTERM), output truncated]",
     {"exit_code": -15, "signal": "SIGTERM", "killed_by_abort": True}),
    (CutCall("out", False, 3, None, True), "[stopped by the abort: exit 3]",
     {"exit_code": 3, "signal": None, "killed_by_abort": True}),
    (CutCall("out", False, 0, None, False), "[exit 0: the command ended by itself during the abort]",
     {"exit_code": 0, "signal": None, "killed_by_abort": False}),
    (CutCall("out", False, -9, "SIGKILL", False),
     "[killed by signal 9 (SIGKILL): the command ended by itself during the abort]",
     {"exit_code": -9, "signal": "SIGKILL", "killed_by_abort": False}),
], ids=["no exit came", "killed by the stop", "stopped, own code", "ended by itself", "killed by another"])
def test_an_aborted_command_s_result_names_how_it_ended(cut: CutCall, note: str, structured: dict) -> None:
    [part], got = aborted_call_content(cut)
    assert part.text == f"out\n{note}\n{ABORTED_TEXT}"
    assert got == {"aborted": True, "truncated": cut.truncated, **structured}


def test_an_aborted_program_s_result_keeps_what_it_and_its_cut_command_printed() -> None:
    calls = ({"call_id": "c.1", "name": "read_file", "ok": True},
             {"call_id": "c.2", "name": "run_command", "ok": False, "error_code": "ABORTED"})
    [part], got = aborted_call_content(CutProgram("so far\n", False, calls, "c.2",
                                                  CutCall("out\n", True, -15, "SIGTERM", True)))
    assert part.text == ("so far\n\n[call c.2 (run_command) was running at the abort; its output:]\nout\n\n"
                         f"[killed by the abort: signal 15 (SIGTERM), output truncated]\n{ABORTED_TEXT}")
    assert got == {"aborted": True, "output_truncated": False, "calls": [
        calls[0], {**calls[1], "truncated": True, "exit_code": -15, "signal": "SIGTERM", "killed_by_abort": True}]}
    assert calls[1] == {"call_id": "c.2", "name": "run_command", "ok": False, "error_code": "ABORTED"}  # (not changed)


@pytest.mark.parametrize("cut, text", [
    (CutProgram("", False, ()), f"(the program printed nothing)\n{ABORTED_TEXT}"),
    (CutProgram("", True, ()), f"\n[the program's output was cut]\n{ABORTED_TEXT}"),
    (CutProgram("p", False, (), "c.1", CutCall("")),
     f"p\n[call c.1 (run_command) was running at the abort; it printed nothing]\n[killed by the abort]\n{ABORTED_TEXT}"),
], ids=["printed nothing", "cut to nothing", "command printed nothing"])
def test_an_aborted_program_s_result_says_what_was_not_printed(cut: CutProgram, text: str) -> None:
    [part], _ = aborted_call_content(cut)
    assert part.text == text


def _edited(*paths: str) -> CutEdits:
    return CutEdits([FileEdited(call_id="c1", path=p) for p in paths])


def test_the_applied_edits_note_names_each_path_once() -> None:
    assert applied_edits_note(_edited("a.txt", "b.txt", "a.txt")) == (
        "[the edit was applied all the same before the call was cut off: a.txt, b.txt changed; "
        "revert_call can undo it]")
    assert applied_edits_note(CutEdits()) is None and applied_edits_note(None) is None


def _path_of(length: int) -> str:
    """A path of ``length`` characters."""
    path = "d/" * ((length - 1) // 2) + "f" * (1 + (length - 1) % 2)
    assert len(path) == length
    return path


@pytest.mark.parametrize("length", [NOTE_PATHS_MAX, NOTE_PATHS_MAX + 1, 4096])
def test_the_applied_edits_note_cuts_its_paths_past_their_limit(length: int) -> None:
    # (the note is one more copy of the paths in the record of the result it joins: a long one,
    # or many, must not push that record past the log's event size limit)
    path = _path_of(length)
    note = applied_edits_note(_edited(path))
    assert note is not None
    listed = note.removeprefix("[the edit was applied all the same before the call was cut off: ").removesuffix(
        " changed; revert_call can undo it]")
    assert listed == (path if length <= NOTE_PATHS_MAX else path[:NOTE_PATHS_MAX] + "…"), len(listed)


def test_the_applied_edits_note_says_which_edits_revert_call_cannot_undo() -> None:
    # (their copies could not be stored: a full disk; no file.edited names them)
    assert applied_edits_note(CutEdits(_edited("a.txt").events, ["b.txt", "a.txt", "b.txt"])) == (
        "[the edit was applied all the same before the call was cut off: a.txt changed; revert_call can undo it; "
        "b.txt changed, but the copies revert_call restores from could not be stored; revert_call cannot undo it]")


@pytest.mark.parametrize("partial", [False, True])
@pytest.mark.parametrize("length", [NOTE_PATHS_MAX, NOTE_PATHS_MAX + 1])
def test_a_cut_off_revert_s_note_names_the_files_restored_once_cut_past_their_limit(partial: bool, length: int) -> None:
    # (a file restored twice, its two edits: named once; the rest of the call's edits stand when
    # the revert stopped part way, and revert_call of the call again restores them)
    path = _path_of(length)
    listed = path if length <= NOTE_PATHS_MAX else path[:NOTE_PATHS_MAX] + "…"
    note = applied_edits_note(CutEdits([FileReverted(call_id="r1", reverted_call_id="c1", paths=[path, path],
                                                     partial=partial)]))
    assert note == (f"[the revert was applied in part before the call was cut off: {listed} restored; "
                    f"revert_call of call c1 again restores the rest]" if partial else
                    f"[the revert was applied all the same before the call was cut off: {listed} restored]")
