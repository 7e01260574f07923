"""A write by another process between an update's read and its publish is not lost: the call
answers FILE_CHANGED and writes nothing. The other writer is a real process, run from the commit
seam (``Workspace.commit_hook``, called with the temp file written, right before the publish), so
it lands in that window every time."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from tools.files import Workspace

from .helpers import fails, leftovers

ORIGINAL = b"one\ntwo\n"

# (call, whose bytes it would write): every update that reads the file, changes it and renames
UPDATES: dict[str, Callable[[Workspace], object]] = {
    "rewrite": lambda ws: ws.edit_file("d/f.txt", "rewrite", content="ours\n"),
    "edit": lambda ws: ws.edit_file("d/f.txt", "edit", edits=[{"old_string": "two", "new_string": "TWO"}]),
    "patch": lambda ws: ws.patch_file("d/f.txt", "@@\n one\n-two\n+TWO\n"),
    "restore": lambda ws: ws.restore("d/f.txt", b"ours\n", hashlib.sha256(ORIGINAL).hexdigest()),
    "restore-removing": lambda ws: ws.restore("d/f.txt", None, hashlib.sha256(ORIGINAL).hexdigest()),
}


def _other_process(script: str, path: Path) -> None:
    """Run ``script`` (Python, ``p`` is the file's path) in another process, to its end."""
    subprocess.run([sys.executable, "-c", f"import os, sys; p = sys.argv[1]\n{script}", str(path)],
                   check=True, timeout=30)


# How the other process changes the file: in place (same inode), in place with the same size and
# its mtime put back (a stat comparison alone would miss it), replaced by a rename, removed.
WRITERS = {
    "in-place": "open(p, 'wb').write(b'theirs, longer\\n')",
    "same-size-same-mtime": ("st = os.stat(p); f = open(p, 'r+b'); f.write(b'ONE'); f.close(); "
                             "os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))"),
    "renamed-over": "open(p + '.new', 'wb').write(b'theirs\\n'); os.rename(p + '.new', p)",
    "removed": "os.unlink(p)",
}


def _expected_after(writer: str) -> bytes | None:
    return {"in-place": b"theirs, longer\n", "same-size-same-mtime": b"ONE\ntwo\n",
            "renamed-over": b"theirs\n", "removed": None}[writer]


@pytest.fixture
def target(root: Path) -> Path:
    (root / "d").mkdir()
    f = root / "d" / "f.txt"
    f.write_bytes(ORIGINAL)
    return f


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("update", sorted(UPDATES))
def test_another_writer_in_the_window_is_file_changed_and_nothing_is_written(
        ws: Workspace, root: Path, target: Path, update: str, writer: str) -> None:
    stages: list[str] = []

    def other_writer(stage: str) -> None:
        stages.append(stage)
        _other_process(WRITERS[writer], target)

    ws.commit_hook = other_writer
    err = fails("FILE_CHANGED", UPDATES[update], ws)
    assert stages == ["before_publish"]
    assert "d/f.txt" in err.message and "read the file again" in err.message
    assert str(root) not in err.message
    want = _expected_after(writer)
    if want is None:
        assert not target.exists()
    else:
        assert target.read_bytes() == want  # theirs, whole: nothing of ours landed
    assert leftovers(root) == []


def test_without_another_writer_the_update_is_written(ws: Workspace, target: Path) -> None:
    ws.commit_hook = lambda stage: None  # the seam alone changes nothing
    out = ws.edit_file("d/f.txt", "edit", edits=[{"old_string": "two", "new_string": "TWO"}])
    assert out.structured["changed"] and target.read_bytes() == b"one\nTWO\n"


def test_a_call_refused_so_is_not_journaled_and_can_run_again(jws: Workspace, target: Path) -> None:
    jws.commit_hook = lambda stage: _other_process(WRITERS["in-place"], target)
    fails("FILE_CHANGED", jws.edit_file, "d/f.txt", "rewrite", content="ours\n", call_id="c1")
    jws.commit_hook = None
    # the same call again (the model read the file and asks for the same rewrite): applied, not a
    # CONFLICT over a pending record of a write that never happened
    out = jws.edit_file("d/f.txt", "rewrite", content="ours\n", call_id="c1")
    assert out.before == b"theirs, longer\n" and target.read_bytes() == b"ours\n"
