"""Programmatic tool calling (PTC): a restricted Python-subset interpreter whose programs call tools.

See :mod:`tools.ptc.interpreter` and docs/ptc.md.
"""

from .interpreter import (
    MAX_INT_BITS,
    ErrorValue,
    Limits,
    Outcome,
    ProgramError,
    ToolCallFailed,
    ToolCaller,
    check_program,
    run_program,
)

__all__ = [
    "MAX_INT_BITS",
    "ErrorValue",
    "Limits",
    "Outcome",
    "ProgramError",
    "ToolCallFailed",
    "ToolCaller",
    "check_program",
    "run_program",
]
