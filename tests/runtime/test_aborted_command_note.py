"""How an aborted command's result says it ended (``decide.aborted_call_content``), for each end
its exit can tell: a pure function, no I/O."""

from __future__ import annotations

import pytest

from runtime.decide import ABORTED_TEXT, CutCall, aborted_call_content


@pytest.mark.parametrize("cut, note, structured", [
    (CutCall("out", False), "[killed by the abort]", {"exit_code": None, "signal": None, "killed_by_abort": None}),
    (CutCall("out", True, -15, "SIGTERM", True), "[killed by the abort: signal 15 (SIGTERM), output truncated]",
     {"exit_code": -15, "signal": "SIGTERM", "killed_by_abort": True}),
    (CutCall("out", False, 3, None, True), "[stopped by the abort: exit 3]",
     {"exit_code": 3, "signal": None, "killed_by_abort": True}),
    (CutCall("out", False, 0, None, False), "[exit 0: the command ended by itself during the abort]",
     {"exit_code": 0, "signal": None, "killed_by_abort": False}),
    (CutCall("out", False, -9, "SIGKILL", False),
     "[killed by signal 9 (SIGKILL): the command ended by itself during the abort]",
     {"exit_code": -9, "signal": "SIGKILL", "killed_by_abort": False}),
], ids=["no exit came", "killed by the stop", "stopped, own code", "ended by itself", "killed by another"])
def test_an_aborted_command_s_result_names_how_it_ended(cut: CutCall, note: str, structured: dict) -> None:
    [part], got = aborted_call_content(cut)
    assert part.text == f"out\n{note}\n{ABORTED_TEXT}"
    assert got == {"aborted": True, "truncated": cut.truncated, **structured}
