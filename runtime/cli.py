"""The ``lens`` command line.

Every command reports failures as ``lens: CODE: message`` on stderr and a non-zero exit code,
never a traceback: errors of our packages carry stable codes (see ``events.errors``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from events.errors import LogError

from . import logcli, servecli
from .errors import LensError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lens", description="Lens: an event-sourced durable runtime for LLM coding agents."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    servecli.add_parsers(sub)
    logcli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (LogError, LensError) as exc:
        print(f"lens: {exc.code}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (e.g. `lens log decode | head`): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
