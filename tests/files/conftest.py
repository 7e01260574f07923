"""Fixtures of the file-tool suite: a real workspace directory in tmp_path, no mocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.files import Workspace


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "ws"
    r.mkdir()
    return r


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A sibling of the root whose name shares its prefix (the classic ``/w/ws-evil`` trick)."""
    o = tmp_path / "ws-evil"
    o.mkdir()
    (o / "secret.txt").write_bytes(b"top secret\n")
    return o


@pytest.fixture
def ws(root: Path) -> Workspace:
    return Workspace(root)


@pytest.fixture
def jws(root: Path, tmp_path: Path) -> Workspace:
    return Workspace(root, journal_dir=tmp_path / "journal")
