"""Deterministic ids for runtimes under test: ``<prefix>_<n>``, one counter per prefix."""

from __future__ import annotations


class IdGen:
    """Deterministic ids: ``<prefix>_<n>``, one counter per prefix; share it across restarts."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = {}

    def __call__(self, prefix: str) -> str:
        n = self.counters.get(prefix, 0) + 1
        self.counters[prefix] = n
        return f"{prefix}_{n:04d}"
