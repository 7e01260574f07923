"""A model stream that never grows (F-MOD-1): a server that, once its answer has begun (or
before), sends only keep-alive comments, pings or empty deltas, for ever. It is never silent, so
the SDK's read timeout (``timeoutSeconds``: a silence) never fired, and it adds nothing to the
answer, so the size bound never did either: the session stayed running until the user aborted.
The read now ends after ``timeoutSeconds`` without a byte of the answer, with ``TIMEOUT``
(retryable), as a silent server's does. The servers send each frame once the client has read the
one before (``Reply.endless``)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from runtime.providers.base import ProviderError
from runtime.providers.sdk import AnswerSize

from .conftest import PROTOCOLS, Ctx, Deltas
from .scripts import reply
from .servers.base import Reply
from .test_endless_streams import endless

STALL = 1.0  # the provider's timeout (timeoutSeconds): its least value
FILLERS = {
    "keep-alive": b": keep-alive\n\n",
    "empty frame": b"data:\n\n",
    "ping": b'event: ping\ndata: {"type": "ping"}\n\n',
}


def never_growing(protocol: str, filler: str, begun: bool = True) -> Reply:
    """A stream of ``protocol`` that begins an answer (``begun``: its first text delta, "a") or
    sends nothing of it, then ``filler`` for ever: a raw frame, or an empty text delta."""
    start = endless(protocol, "text", "a")
    assert start.events is not None
    events = start.events if begun else start.events[:-1]
    if filler == "empty delta":
        return Reply(events=events, endless=endless(protocol, "text", "").endless)
    return Reply(events=events, endless=FILLERS[filler])


@pytest.mark.parametrize("filler, begun", [*((f, True) for f in (*FILLERS, "empty delta")), ("keep-alive", False)])
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_stream_that_never_grows_times_out(protocol, filler, begun, server, make):
    # (A process's first request imports and builds what reading a stream needs, which took
    # 1.7 s for Responses here: the bound counts the client's time too, so that is done first.)
    server.push(reply(protocol, text="warm"), never_growing(protocol, filler, begun), reply(protocol, text="after"))
    await make(protocol, max_retries=0).stream(Ctx().user("hello").request(), Deltas())
    provider = make(protocol, max_retries=0, timeout=STALL)
    deltas = Deltas()
    with trio.fail_after(30):  # (a bound only: without the fix the request never ended)
        with pytest.raises(ProviderError) as err:
            await provider.stream(Ctx().user("hello").request(), deltas)
    assert (err.value.code, err.value.retryable) == ("TIMEOUT", True)
    assert err.value.message == (f"provider {provider.id!r}: the request timed out: the stream sent nothing of "
                                 f"the answer for {STALL:g} s"), err.value.message
    assert deltas.text() == ("a" if begun else "")
    await server.disconnected.wait()  # the stream was closed
    result = await provider.stream(Ctx().user("hello").request(), Deltas())
    assert result.text == "after"


class _Opened:
    """What ``AnswerSize.reading`` enters: an SDK stream (or the manager that opens one)."""

    async def __aenter__(self) -> "_Opened":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        pass


async def test_each_byte_of_the_answer_moves_the_deadline_and_nothing_else_does(autojump_clock):
    size = AnswerSize("p", 1 << 20, stall=1.0)
    async with size.reading(_Opened()):
        for _ in range(10):  # 9 s of a slow answer: never 1 s without a byte
            await trio.sleep(0.9)
            size.add("x")
    empty = 0
    with pytest.raises(ProviderError) as err:
        async with size.reading(_Opened()):
            await trio.sleep(0.9)
            size.add("é")
            while True:
                await trio.sleep(0.3)
                size.add("")  # (an empty delta adds nothing)
                size.add(None)  # (nor a piece that is no text)
                empty += 1
    assert err.value.code == "TIMEOUT"
    assert empty == 3  # cancelled 1 s after the "é", in the fourth wait
