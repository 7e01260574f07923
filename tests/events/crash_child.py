"""Child process of test_crash.py: appends under load through the real store until killed.

    python crash_child.py DATA_DIR RUN [SESSION:REQUEST_ID ...]

First re-sends each SESSION:REQUEST_ID given (a client retrying after the daemon restarted) and
prints ``R <session> <request_id> <seq> <duplicate 0|1> .``; then PRODUCERS tasks append for
ever, each to its own session, and print ``A <seq> <session> <session_seq> <token> .`` for every
event, flushed, only after its append was acknowledged. The trailing ``.`` marks a complete line.
Every fifth append carries two events: ``<token>`` (with request_id = token) and ``<token>+``.
"""

from __future__ import annotations

import sys

import trio

from events.store import Draft, open_store
from events.types import InstructionAppended

PRODUCERS = 8


def text_for(token: str) -> str:
    """The body text of the event printed as ``token`` (test_crash.py has the same rule)."""
    return token + "|" + "x" * (len(token) * 37 % 400)


def emit(line: str) -> None:
    sys.stdout.write(line + " .\n")
    sys.stdout.flush()


async def main(data_dir: str, run: str, retries: list[str]) -> None:
    async with open_store(data_dir) as store:
        for item in retries:
            session, rid = item.split(":")
            r = await store.append(
                Draft(InstructionAppended(text="retried"), session_id=session, request_id=rid)
            )
            emit(f"R {session} {rid} {r.seq} {int(r.duplicate)}")

        async def producer(p: int) -> None:
            session = f"s{p}"
            i = 0
            while True:
                token = f"{run}.{p}.{i}"
                event = InstructionAppended(text=text_for(token))
                drafts = [Draft(event, session_id=session, request_id=token)]
                if i % 5 == 4:
                    extra = InstructionAppended(text=text_for(token + "+"))
                    drafts.append(Draft(extra, session_id=session))
                r = await store.append(*drafts)
                for tok, seq, sseq in zip((token, token + "+"), r.seqs, r.session_seqs):
                    emit(f"A {seq} {session} {sseq} {tok}")
                i += 1

        async with trio.open_nursery() as nursery:
            for p in range(PRODUCERS):
                nursery.start_soon(producer, p)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3:])
