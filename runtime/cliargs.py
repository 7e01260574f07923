"""Argument handling shared by Lens's command lines (``lens log``, ``serve``, ``pair``, ``executor serve`` and
the benchmarks)."""

from __future__ import annotations

import argparse
from typing import Any


class Once(argparse.Action):
    """An option that takes one value: given again (``--session A --session B``) it is a usage
    error, as a query parameter given twice is for the HTTP routes, rather than the last one
    winning silently (which read as "A or B" beside the repeatable ``--kind``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"argument {'/'.join(self.option_strings)}: given more than once (it takes one value)")
        setattr(namespace, self.dest, values)
