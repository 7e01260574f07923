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
