"""The ``review`` skill the context tests load in a later turn: its description (``REVIEW-DESC``)
belongs in the system prompt, its steps (``REVIEW-STEPS``) only where it was loaded."""

from __future__ import annotations

from pathlib import Path


def write_review_skill(workspace: str | Path) -> None:
    """Write ``skills/review/SKILL.md`` into the project's ``workspace``."""
    skill = Path(workspace, "skills", "review")
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: review\ndescription: REVIEW-DESC\n---\nREVIEW-STEPS: read twice.\n")
