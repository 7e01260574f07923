"""The executor's test-only hold (``TEST_HOLD_ENV``, read only with ``TEST_HOOKS_ENV=1``), set for
the executors started from here on: the first call (or start) reaching ``point`` blocks there and
says which process holds it, so a test can kill that process at an exact point."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.executor.server import TEST_HOLD_ENV, TEST_HOOKS_ENV


def held_at(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, point: str) -> Path:
    """Executors started from here on (their environment is this process's) hold at ``point``;
    returns the file that names the process holding (it appears once one holds)."""
    hold = tmp_path / "hold"
    hold.write_text(point)
    monkeypatch.setenv(TEST_HOOKS_ENV, "1")
    monkeypatch.setenv(TEST_HOLD_ENV, str(hold))
    return Path(f"{hold}.held")
