"""Argument handling shared by Lens's command lines (``lens log``, ``serve``, ``pair``, ``executor serve`` and
the benchmarks)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

_WHOLE_RE = re.compile(r"[+-]?[0-9]+")


def whole_number(value: str) -> int:
    """An integer argument (a seq, a port): ASCII decimal digits with an optional sign only.
    ``int()`` also takes ``1_0``, `` 5`` and other scripts' digits (``lens serve --port 8_0``
    listened on port 80), which the HTTP routes and the config refuse. The range is the caller's
    to check."""
    if not _WHOLE_RE.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number")
    return int(value)


class Once(argparse.Action):
    """An option that takes one value: given again (``--session A --session B``) it is a usage
    error, as a query parameter given twice is for the HTTP routes, rather than the last one
    winning silently (which read as "A or B" beside the repeatable ``--kind``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"argument {'/'.join(self.option_strings)}: given more than once (it takes one value)")
        setattr(namespace, self.dest, values)


def text(value: str) -> str:
    """A text argument: it must be UTF-8 (ids and paths are stored and opened as UTF-8)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            f"{value.encode('utf-8', 'surrogateescape')!r} is not valid UTF-8"
        ) from None
    return value


def config_path(value: str) -> Path:
    """A ``--config`` argument (of every command that takes one): not empty (an empty one named
    the working directory: "cannot read config file .: it is a directory"). A name that is not
    UTF-8 is the daemon's to run from (docs/decisions.md, F-API-4); ``lens log`` refuses it with
    its other text arguments (:func:`text`)."""
    if not value:
        raise argparse.ArgumentTypeError("an empty path names no config file")
    return Path(value)
