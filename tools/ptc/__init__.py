"""Programmatic tool calling (PTC): a restricted Python-subset interpreter whose programs call
tools (:mod:`tools.ptc.interpreter`, described in docs/ptc.md) and the ``programmatic_tool_run``
tool over it (:mod:`tools.ptc.tool`)."""
