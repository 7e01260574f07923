"""Which artifacts the log names (``projections/artifact_names.py``), folded from a real log:
every place an event can carry an artifact id counts, in any session, whatever became of it."""

from __future__ import annotations

import hashlib
from pathlib import Path

from events.store import Draft
from events.types import (ArtifactStored, FileEdited, ImagePart, InputSubmitted, Opaque, SessionDeleted,
                          SessionQuarantined, TextPart, ToolFinished)
from projections.artifact_names import ArtifactNames, named_ids

from tests.projections.test_projector import close, make_projector, write


def aid(n: int) -> str:
    return hashlib.sha256(b"artifact %d" % n).hexdigest()


def drafts() -> list[Draft]:
    env = dict(project_id="p1", session_id="s1", agent_id="main")
    other = dict(project_id="p1", session_id="s2", agent_id="main")
    return [
        Draft(InputSubmitted(content=[TextPart("look"), ImagePart(aid(1), "image/png")]), **env),
        Draft(FileEdited(call_id="c1", path="a.txt", before_artifact_id=aid(2), after_artifact_id=aid(3)), **env),
        Draft(ArtifactStored(artifact_id=aid(4), sha256=aid(4), mime="application/pdf", size=3), **env),
        # named only in a text line (an MCP binary too large to show) and in structured content
        Draft(ToolFinished(call_id="c2", name="mcp", content=[TextPart(f"[audio: audio/wav, 9 bytes, saved as "
                                                                       f"artifact {aid(5)}]")],
                           structured_content={"nested": [{"artifact_id": aid(6)}]}), **other),
        Draft(SessionQuarantined(reason="crashed 3 times"), **env),
        Draft(SessionDeleted(reason="gone"), **other),
    ]


def test_every_id_an_event_carries_is_named_in_any_session(tmp_path: Path) -> None:
    write(tmp_path, drafts())
    projector = make_projector(tmp_path, [ArtifactNames()])
    try:
        projector.catch_up()
        asked = [aid(n) for n in range(0, 8)]  # 0 and 7: stored, named by nothing
        assert ArtifactNames.named(projector.conn, asked) == {aid(n) for n in range(1, 7)}
        assert ArtifactNames.named(projector.conn, []) == set()
        # more than one lookup's worth of ids
        many = [hashlib.sha256(b"%d" % i).hexdigest() for i in range(1200)] + [aid(3)]
        assert ArtifactNames.named(projector.conn, many) == {aid(3)}
    finally:
        close(projector)


def test_a_kind_this_build_does_not_know_names_what_it_carries() -> None:
    assert named_ids(Opaque("future.kind", {"kind": "future.kind", "blob": {"ref": aid(8)}})) == {aid(8)}
    assert named_ids(InputSubmitted(content=[TextPart(aid(9).upper() + " " + aid(9)[:63])])) == set()


def test_an_id_after_a_length_byte_that_is_a_hex_digit_is_named(tmp_path: Path) -> None:
    """A string's length is written just before its bytes: a text of 99 bytes (str8, length
    0x63, "c") or of 6,499 (str16, 0x1963) that begins with an id put one hex digit before the
    id, and the id read from the run's start was off by one: named by no row, so a sweep could
    take an artifact an event names. Found by naming many ids in one text."""
    ids = [hashlib.sha256(b"%d" % i).hexdigest() for i in range(100)]
    for text in [ids[0] + " " + "x" * 34,  # 99 bytes
                 ids[1] + " " + "y" * 38,  # 0x67 is "g", not hex; 0x66 is "f": 102 bytes
                 " ".join(ids)]:  # 6,499 bytes
        assert len(text) in (99, 103, 6499), len(text)
        event = InputSubmitted(content=[TextPart(text)])
        assert {i for i in ids if i in text} <= named_ids(event), text[:70]
    event = InputSubmitted(content=[TextPart(ids[2] + " " + "z" * 37)])  # 102 bytes: "f" before the id
    assert ids[2] in named_ids(event)
    event = InputSubmitted(content=[TextPart(ids[3] + "cafe " + "z" * 30)])  # 99: hex on both sides of it
    assert ids[3] in named_ids(event)
    write(tmp_path, [Draft(InputSubmitted(content=[TextPart(" ".join(ids))]), project_id="p", session_id="s",
                           agent_id="main")])
    projector = make_projector(tmp_path, [ArtifactNames()])
    try:
        projector.catch_up()
        assert ArtifactNames.named(projector.conn, ids) == set(ids)
    finally:
        close(projector)
