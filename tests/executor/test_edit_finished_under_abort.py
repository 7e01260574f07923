"""An editing call that completed under a call id: the executor's ``Stop`` by that id answers
with the call's reply (``StopReply.call``), from its call journal, so that Core can record a
change made after its caller had gone.

A real executor process over gRPC.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.executor_client import ExecutorClient, ExecutorToolError


async def test_a_stop_answer_carries_the_reply_of_the_editing_call_that_completed_by_its_id(
        client: ExecutorClient, workspace: Path) -> None:
    (workspace / "stopped.txt").write_text("one\n")
    edit = {"path": "stopped.txt", "mode": "edit", "edits": [{"old_string": "one", "new_string": "two"}]}
    await client.call("edit_file", edit, call_id="ses_f:done")
    reply = await client.stop("ses_f:done", 5)  # (ended before its Stop: its journal record answers)
    assert not reply.found and reply.HasField("call")
    assert (reply.call.ok, reply.call.before, reply.call.after, reply.call.written_path) == (
        True, b"one\n", b"two\n", b"stopped.txt")
    assert '"changed": true' in reply.call.result_json
    # A call that failed, an id no call ran under, a command's run id: no reply.
    with pytest.raises(ExecutorToolError):
        await client.call("edit_file", {**edit, "edits": [{"old_string": "none", "new_string": "x"}]},
                          call_id="ses_f:failed")
    async with client.run("true", run_id="ses_f:command") as stream:
        async for _ in stream:
            pass
    for id_ in ("ses_f:failed", "ses_f:never", "ses_f:command"):
        assert not (await client.stop(id_, 5)).HasField("call"), id_
