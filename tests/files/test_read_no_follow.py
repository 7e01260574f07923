"""read_file with ``follow_symlinks: false`` (used by skill discovery): no symlink on the path
is followed, wherever it is, while the default keeps following symlinks inside the workspace."""

from __future__ import annotations

import os
from pathlib import Path

from tools.files import Workspace

from .helpers import fails


def test_a_symlink_anywhere_on_the_path_is_refused(ws: Workspace, root: Path) -> None:
    (root / "real").mkdir()
    (root / "real" / "SKILL.md").write_text("real text\n")
    os.symlink("real", root / "linked_dir")
    os.symlink("SKILL.md", root / "real" / "linked_file")
    # followed by default (inside the workspace)
    assert ws.read_file("linked_dir/SKILL.md")["content"] == "real text\n"
    assert ws.read_file("real/linked_file")["content"] == "real text\n"
    # not followed on request: a link as the final component, as a parent, as the listed directory
    fails("SYMLINK_NOT_FOLLOWED", ws.read_file, "real/linked_file", follow_symlinks=False)
    fails("SYMLINK_NOT_FOLLOWED", ws.read_file, "linked_dir/SKILL.md", follow_symlinks=False)
    fails("SYMLINK_NOT_FOLLOWED", ws.read_file, "linked_dir", follow_symlinks=False)
    assert ws.read_file("real/SKILL.md", follow_symlinks=False)["content"] == "real text\n"
    listing = ws.read_file("real", follow_symlinks=False)
    assert listing["entries"] == ["SKILL.md", "linked_file"]  # a link is listed by name, never as a dir
    assert ws.read_file(".", follow_symlinks=False)["entries"] == ["linked_dir", "real/"]


def test_a_dangling_or_outside_link_is_refused_the_same_way(ws: Workspace, root: Path, outside: Path) -> None:
    os.symlink(str(outside / "secret.txt"), root / "out")
    os.symlink("missing", root / "dangling")
    fails("SYMLINK_NOT_FOLLOWED", ws.read_file, "out", follow_symlinks=False)
    fails("SYMLINK_NOT_FOLLOWED", ws.read_file, "dangling", follow_symlinks=False)
    fails("INVALID_ARGUMENT", ws.read_file, "x", follow_symlinks="no")
