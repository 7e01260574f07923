"""Make a file or directory unwritable for the length of a test."""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


@contextmanager
def unwritable(path: Path) -> Iterator[None]:
    """``path`` cannot be written, nor (a directory) get new entries. Root ignores permissions,
    so it gets the immutable flag; where ``chattr +i`` is not available as root, the test is
    skipped."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode & 0o777
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    what = "a directory" if path.is_dir() else "a file"
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip(f"running as root where chattr +i is not available: cannot make {what} unwritable")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
