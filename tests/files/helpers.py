"""Assertion helpers shared by the file-tool tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from tools.files import FileToolError


def fails(code: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> FileToolError:
    """Call ``fn`` and assert it raises FileToolError with ``code``; returns the error."""
    with pytest.raises(FileToolError) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, f"expected {code}, got {info.value.code}: {info.value.message}"
    return info.value


def leftovers(directory: Path) -> list[str]:
    """Temp files of the atomic commit left in a directory tree (there must never be any)."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if ".lens-" in p.name)
