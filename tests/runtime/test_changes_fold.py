"""The "changes this session" fold (runtime.workspace_api.changes): a pure function of a session's
events; what it makes of several edits of one file, reverts (whole, partial, and those of logs
from before ``partial`` was kept, which the session state's fold reads the same way), removals and
the spellings of a path."""

from __future__ import annotations

import json
from pathlib import Path

from events import types as t
from events.codec import Codec
from events.reader import StoredEvent
from projections.session_state import SessionState, fold
from runtime.workspace_api import changes

WS = "/srv/project"


def ev(seq: int, event: t._Event, agent: str = "main", task: str | None = "tsk_1") -> StoredEvent:
    return StoredEvent(seq=seq, ts=seq, project_id="prj_1", session_id="ses_1", session_seq=seq, agent_id=agent,
                       task_id=task, kind=type(event).__struct_config__.tag, request_id=None, event=event)


def stored(aid: str, size: int) -> t.ArtifactStored:
    return t.ArtifactStored(artifact_id=aid, sha256=aid, mime="application/octet-stream", size=size,
                            source="file-history")


def edit(call: str, path: str, before: str | None, after: str | None) -> t.FileEdited:
    return t.FileEdited(call_id=call, path=path, before_artifact_id=before, after_artifact_id=after,
                        before_sha256=before, after_sha256=after)


def test_several_edits_of_one_file_under_its_spellings_fold_into_one_entry():
    events = [
        ev(1, t.ToolStarted(call_id="c1", name="edit_file", arguments="{}")),
        ev(2, stored("a1", 10)), ev(3, edit("c1", "src/x.py", None, "a1")),
        ev(4, t.ToolStarted(call_id="c2", name="patch_file", arguments="{}"), agent="sub_c9"),
        ev(5, stored("a2", 12), agent="sub_c9"), ev(6, edit("c2", "./src//x.py", "a1", "a2"), agent="sub_c9"),
        ev(7, t.ToolStarted(call_id="c3", name="edit_file", arguments="{}")),
        ev(8, stored("a3", 3)), ev(9, edit("c3", f"{WS}/src/../src/x.py", "a2", "a3")),
    ]
    [f] = changes(events, WS)
    assert (f["path"], f["status"], f["bytes"], f["bytesBefore"]) == ("src/x.py", "created", 3, None)
    assert f["agents"] == ["main", "sub_c9"]
    assert [(e["callId"], e["tool"], e["change"], e["bytesBefore"], e["bytesAfter"], e["seq"]) for e in f["edits"]] == [
        ("c1", "edit_file", "created", None, 10, 3), ("c2", "patch_file", "modified", 10, 12, 6),
        ("c3", "edit_file", "modified", 12, 3, 9)]


def test_a_revert_of_the_last_edit_goes_back_to_the_one_before():
    events = [
        ev(1, stored("o", 5)), ev(2, stored("m1", 6)), ev(3, edit("c1", "a.txt", "o", "m1")),
        ev(4, stored("m2", 7)), ev(5, edit("c2", "a.txt", "m1", "m2")),
        ev(6, t.FileReverted(call_id="r1", reverted_call_id="c2", paths=["a.txt"])),
    ]
    [f] = changes(events)
    assert (f["status"], f["bytes"], f["bytesBefore"]) == ("modified", 6, 5)
    assert [e["reverted"] for e in f["edits"]] == [False, True]
    assert f["edits"][1]["revertedBy"] == {"callId": "r1", "agentId": "main", "seq": 6}
    events.append(ev(7, t.FileReverted(call_id="r2", reverted_call_id="c1", paths=["a.txt"])))
    [f] = changes(events)
    assert (f["status"], f["bytes"]) == ("reverted", 5)


def test_removed_unchanged_and_unknown_sizes():
    events = [
        ev(1, stored("o", 4)), ev(2, edit("c1", "gone.txt", "o", None)),
        ev(3, stored("p", 2)), ev(4, stored("q", 2)), ev(5, edit("c2", "same.txt", "p", "q")),
        ev(6, edit("c3", "same.txt", "q", "p")),
        ev(7, edit("c4", "nosize.txt", None, "zz")),  # its artifact record not in these events
        ev(8, t.FileReverted(call_id="r", reverted_call_id="nope", paths=[])),  # nothing it names
    ]
    files = {f["path"]: f for f in changes(events)}
    assert (files["gone.txt"]["status"], files["gone.txt"]["bytes"]) == ("deleted", None)
    assert files["gone.txt"]["edits"][0]["change"] == "deleted"
    assert files["same.txt"]["status"] == "unchanged"
    assert (files["nosize.txt"]["status"], files["nosize.txt"]["bytes"]) == ("created", None)
    assert changes([]) == []


def test_a_fork_reverting_an_inherited_edit_lists_it_and_inherited_events_list_nothing():
    inherited = [
        ev(1, t.ToolStarted(call_id="c1", name="edit_file", arguments="{}")),
        ev(2, stored("o", 5)), ev(3, stored("m", 9)), ev(4, edit("c1", f"{WS}/a.txt", "o", "m")),
        ev(5, stored("n", 2)), ev(6, edit("c2", "b.txt", None, "n")),
        ev(7, t.FileReverted(call_id="r0", reverted_call_id="c2", paths=["b.txt"])),  # reverted before the fork
    ]
    assert changes([], WS, inherited) == []
    own = [ev(20, t.ToolStarted(call_id="r1", name="revert_call", arguments="{}")),
           ev(21, t.FileReverted(call_id="r1", reverted_call_id="c1", paths=["a.txt"])),
           ev(22, t.FileReverted(call_id="r2", reverted_call_id="c2", paths=["b.txt"]))]  # nothing to list
    [f] = changes(own, WS, inherited)
    assert (f["path"], f["status"], f["bytes"], f["bytesBefore"]) == ("a.txt", "modified", 5, 9)
    assert [(e["callId"], e["tool"], e["change"], e["seq"], e["reverted"]) for e in f["edits"]] == [
        ("r1", "revert_call", "modified", 21, False)]
    # without what it inherited, the fold lists no change for such a revert (the source's log has it)
    assert changes(own, WS) == []


def test_an_edit_is_listed_by_the_file_it_wrote_when_the_log_says_which():
    # `l/../f.txt` through a link `l` -> `d/e` wrote `d/f.txt`; tidied as text it read `f.txt`.
    # A row from before the written path was kept is listed by its path as given, as before.
    events = [
        ev(1, stored("a1", 4)), ev(2, stored("a2", 5)),
        ev(3, t.FileEdited(call_id="c1", path="l/../f.txt", before_artifact_id="a1", after_artifact_id="a2",
                           before_sha256="a1", after_sha256="a2", written_path="d/f.txt")),
        ev(4, stored("a3", 6)),
        ev(5, t.FileEdited(call_id="c2", path="lf", before_artifact_id="a2", after_artifact_id="a3",
                           before_sha256="a2", after_sha256="a3", written_path="d/f.txt")),
        ev(6, edit("c3", "l/../g.txt", None, "a1")),
    ]
    files = {f["path"]: f for f in changes(events, WS)}
    assert list(files) == ["d/f.txt", "g.txt"]
    assert [e["callId"] for e in files["d/f.txt"]["edits"]] == ["c1", "c2"]
    assert (files["d/f.txt"]["status"], files["d/f.txt"]["bytes"], files["d/f.txt"]["bytesBefore"]) == ("modified", 6, 4)


def test_a_whole_revert_of_a_call_that_edited_one_file_twice_goes_back_to_before_the_first():
    # revert_call restores the call's edits last first: the file ends as it was before the call.
    events = [
        ev(1, stored("o", 5)), ev(2, stored("m1", 6)), ev(3, edit("c1", "a.txt", "o", "m1")),
        ev(4, stored("m2", 7)), ev(5, edit("c1", "a.txt", "m1", "m2")),
        ev(6, t.FileReverted(call_id="r1", reverted_call_id="c1", paths=["a.txt", "a.txt"])),
    ]
    [f] = changes(events)
    assert (f["status"], f["bytes"]) == ("reverted", 5)


def test_a_partial_revert_drops_the_calls_last_edits_it_restored_and_a_second_the_rest():
    events = [
        ev(1, stored("o", 5)), ev(2, stored("m1", 6)), ev(3, edit("c1", "a.txt", "o", "m1")),
        ev(4, stored("m2", 7)), ev(5, edit("c1", "a.txt", "m1", "m2")),
        ev(6, stored("b", 3)), ev(7, edit("c1", "b.txt", None, "b")),
        # (restored b.txt, then the second edit of a.txt; refused on the first)
        ev(8, t.FileReverted(call_id="r1", reverted_call_id="c1", paths=["b.txt", "a.txt"], partial=True)),
    ]
    files = {f["path"]: f for f in changes(events)}
    assert (files["a.txt"]["status"], files["a.txt"]["bytes"]) == ("modified", 6)
    assert [e["reverted"] for e in files["a.txt"]["edits"]] == [False, True]
    assert (files["b.txt"]["status"], [e["reverted"] for e in files["b.txt"]["edits"]]) == ("reverted", [True])
    state = fold(SessionState("ses_1"), events)
    assert [(e.path, e.after_sha256) for e in state.file_edits["c1"]] == [("a.txt", "m1")]
    events.append(ev(9, t.FileReverted(call_id="r2", reverted_call_id="c1", paths=["a.txt"])))
    files = {f["path"]: f for f in changes(events)}
    assert (files["a.txt"]["status"], files["a.txt"]["bytes"]) == ("reverted", 5)
    assert files["a.txt"]["edits"][0]["revertedBy"] == {"callId": "r2", "agentId": "main", "seq": 9}
    assert "c1" not in fold(SessionState("ses_1"), events).file_edits


def test_a_fork_reverting_part_of_an_inherited_call_lists_what_it_restored():
    inherited = [ev(1, stored("o", 5)), ev(2, stored("m", 9)), ev(3, edit("c1", "a.txt", "o", "m")),
                 ev(4, stored("n", 2)), ev(5, edit("c1", "b.txt", None, "n"))]
    own = [ev(20, t.FileReverted(call_id="r1", reverted_call_id="c1", paths=["b.txt"], partial=True))]
    assert [(f["path"], f["status"]) for f in changes(own, WS, inherited)] == [("b.txt", "deleted")]
    own.append(ev(21, t.FileReverted(call_id="r2", reverted_call_id="c1", paths=["a.txt"])))
    files = {f["path"]: f["status"] for f in changes(own, WS, inherited)}
    assert files == {"a.txt": "modified", "b.txt": "deleted"}  # (a.txt back from "m" to "o")



def test_a_fork_reverting_the_rest_of_a_call_its_source_reverted_in_part_lists_that_rest():
    # The source restored b.txt and stopped (partial) before the fork; the fork's state holds
    # a.txt's edit alone, which its revert_call restores: the file history says a.txt went back.
    inherited = [ev(1, stored("o", 5)), ev(2, stored("m", 9)), ev(3, edit("c1", "a.txt", "o", "m")),
                 ev(4, stored("n", 2)), ev(5, edit("c1", "b.txt", None, "n")),
                 ev(6, t.FileReverted(call_id="r0", reverted_call_id="c1", paths=["b.txt"], partial=True))]
    assert changes([], WS, inherited) == []
    assert [e.path for e in fold(SessionState("ses_1"), inherited).file_edits["c1"]] == ["a.txt"]
    own = [ev(20, t.FileReverted(call_id="r1", reverted_call_id="c1", paths=["a.txt"]))]
    [f] = changes(own, WS, inherited)
    assert (f["path"], f["status"], f["bytes"], f["bytesBefore"]) == ("a.txt", "modified", 5, 9)
    assert [(e["callId"], e["seq"], e["reverted"]) for e in f["edits"]] == [("r1", 20, False)]

GOLDEN_REVERT = Path(__file__).resolve().parents[1] / "events" / "golden" / "file.reverted.json"


def test_a_file_reverted_recorded_before_partial_was_kept_drops_every_edit_of_its_call():
    # The golden row, written by a Lens before `partial` was kept: it names two paths and its call
    # made three edits; it was a whole revert (none other was recorded), and reads as one.
    golden = json.loads(GOLDEN_REVERT.read_text(encoding="utf-8"))
    old = Codec().decode(golden["kind"], bytes.fromhex(golden["body_hex"]), golden["dict_id"])
    assert isinstance(old, t.FileReverted) and old.partial is False
    call = old.reverted_call_id
    events = [ev(1, stored("o", 5)), ev(2, stored("m", 6)), ev(3, edit(call, "a.txt", "o", "m")),
              ev(4, edit(call, "b.txt", None, "m")), ev(5, edit(call, "c.txt", None, "o")), ev(6, old)]
    assert call not in fold(SessionState("ses_1"), events).file_edits
    assert {f["path"]: [e["reverted"] for e in f["edits"]] for f in changes(events)} == {
        "a.txt": [True], "b.txt": [True], "c.txt": [True]}
