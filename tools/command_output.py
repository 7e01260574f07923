"""A command's stdout and stderr joined into one output without splitting a UTF-8 character.

The executor passes on each stream's bytes as it reads them (at most 64 KiB a read), so a
chunk may end inside a character, and the next chunk may be the other stream's. Appending the
chunks as they come put the other stream's bytes inside the character: valid UTF-8 output read
back as two U+FFFD around the other stream's text. :class:`StreamJoin` holds back, per stream,
an incomplete character at a chunk's end (at most 3 bytes) until that stream's next chunk, and
writes what is left at :meth:`StreamJoin.flush` (the command ended, or its reader stopped).
Bytes that are not UTF-8 are passed on as they come; only a lead byte whose sequence the chunk
cuts short is held. Used by ``run_command`` and by background jobs.

``run_command`` also keeps each stream's *lines* whole (``whole_lines``): a line the command
writes in several pieces, or one longer than a read (a 100 KiB JSON line, a minified file
printed), came in several chunks, and a line of the other stream that arrived between them was
put in its middle. Its result is read once the command has ended, so holding a stream's
unfinished line until its end (or the command's) delays nothing; the hold is bounded by the
output cap. A background job's output is read while it runs, so it is written as it comes:
a line held back would hide a prompt or a progress line without its newline for as long as
it stays unfinished. There the other stream's output may come inside a line, as in a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterable, Callable


def incomplete_tail(data: bytes) -> int:
    """Where a UTF-8 character that ``data`` cuts short at its end begins (``len(data)``: none)."""
    n = len(data)
    for back in range(1, min(n, 4) + 1):
        b = data[n - back]
        if b & 0xC0 == 0x80:
            continue  # a continuation byte: its lead, if any, comes before
        need = 2 if b >> 5 == 0b110 else 3 if b >> 4 == 0b1110 else 4 if b >> 3 == 0b11110 else 1
        return n - back if need > back else n
    return n


class StreamJoin:
    """Writes chunks of named streams to ``sink`` in the order they come, each stream's
    characters whole (and with ``whole_lines``, each stream's lines: a stream's bytes after its
    last newline wait for the next one). Call :meth:`flush` once the streams ended (or their
    reader stops)."""

    def __init__(self, sink: Callable[[bytes], object], *, whole_lines: bool = False) -> None:
        self._sink = sink
        self._held: dict[str, bytes] = {}
        self._whole_lines = whole_lines
        self._lines: dict[str, bytearray] = {}  # (with whole_lines: each stream's unfinished line)
        self._last: str | None = None  # the stream of the last chunk written

    @property
    def began(self) -> bool:
        """Whether any bytes came (written to the sink or still held); an empty chunk is none."""
        return self._last is not None

    def write(self, stream: str, data: bytes) -> None:
        if not data:  # (nothing to write: it neither begins the output nor is its last chunk)
            return
        self._last = stream
        if self._whole_lines:  # (a line in many chunks is gathered in place, not copied at each)
            line = self._lines.setdefault(stream, bytearray())
            end = data.rfind(b"\n")
            if end < 0:
                line += data
                return
            line += data[:end + 1]
            self._sink(bytes(line))
            self._lines[stream] = bytearray(data[end + 1:])
            return
        data = self._held.pop(stream, b"") + data
        cut = incomplete_tail(data)
        if cut < len(data):
            self._held[stream] = data[cut:]
        if cut:
            self._sink(data[:cut])

    def flush(self) -> None:
        """Write what is held (characters the command never finished: they read as U+FFFD),
        the stream of the last chunk last: where a cap cut the output (in its last chunk), the
        text still ends at the cut, so the piece of a key before it is found at the end
        (``Secrets.mend``), not followed by another stream's unfinished line."""
        held, self._held = self._held, {}
        lines, self._lines = self._lines, {}
        streams = sorted({*held, *lines}, key=lambda s: s == self._last)  # (stable: the others in order)
        for stream in streams:
            for data in (held.get(stream, b""), bytes(lines.get(stream, b""))):
                if data:
                    self._sink(data)


async def drain(events: AsyncIterable[Any], join: StreamJoin) -> Any | None:
    """Read an executor run's stream: its stdout and stderr chunks through ``join``, an error in
    the stream raised; its ``exit`` message once it comes (None: the stream ended without one).
    The caller flushes ``join``."""
    async for ev in events:
        if isinstance(ev, Exception):
            raise ev
        which = ev.WhichOneof("event")
        if which in ("stdout", "stderr"):
            join.write(which, getattr(ev, which))
        elif which == "exit":
            return ev.exit
    return None


async def drain_rest(events: AsyncIterable[Any], join: StreamJoin) -> Any | None:
    """Read what is left of an executor run's stream, as :func:`drain` does, until its exit, an
    error or its end, which all end it quietly: a reader an abort cancelled keeps the output
    still on its way for as long as the caller's (shielded, bounded) scope lets it. Returns the
    ``exit`` message when it came (None: an error, the end without one)."""
    async for ev in events:
        if isinstance(ev, Exception):
            return None
        which = ev.WhichOneof("event")
        if which in ("stdout", "stderr"):
            join.write(which, getattr(ev, which))
        elif which == "exit":
            return ev.exit
    return None


@dataclass(frozen=True)
class CommandEnd:
    """How a command an abort cut off ended, from its exit: ``exit_code`` (-N: signal N),
    ``signal`` its name (None: it exited), ``stopped``: the abort's stop ended it (False: it
    had ended by itself before the stop reached it)."""

    exit_code: int
    signal: str | None
    stopped: bool
