"""Running commands by the id Core gave them (``CommandRequest.run_id``), for ``Stop``.

A :class:`StopLatch` is set once, from the ``Stop`` handler's thread; its file descriptor turns
readable then, so the command's read loop (blocked in ``select``) wakes at once rather than at its
next poll. The ``Stop`` handler then waits on the same latch for the command's run to be over
(:meth:`StopLatch.wait_over`): its group ended and its exit sent on its stream, which the run says
with :meth:`StopLatch.over`. The registry holds the latches of the commands running now; it is the
service's, made by it (no global state). :class:`EditingCalls` holds those of the editing calls
running now, by call id: a ``Stop`` naming one that has not yet looked whether its caller waits
(:meth:`StopLatch.claim`) makes it write nothing, and waits for one that may be writing.

A ``Stop`` can overtake the call it names (the call still on its way, or waiting for a server
thread): each registry remembers the ids a ``Stop`` named (:class:`StoppedIds`, bounded in count
and age), and a command or an editing call registering later under one is refused
(:class:`Stopped`) before it does anything. An editing call Core runs again on purpose
(``rerun``) is refused only when it was sent before that ``Stop``: Core orders its sends
(``SendOrder``: an epoch per Core process, a sequence shared by its Calls and Stops), and the
registry keeps the last ``Stop``'s order with its id.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

MAX_RUN_ID_CHARS = 128
# How many ids a Stop named each registry remembers, and for how long: a call or command arriving
# later under one is refused. The age outlasts Core's deadline of a tool call (CALL_TIMEOUT_S,
# 120 s, from its send, which comes before its Stop): a call arriving later than that is past its
# deadline, and grpc runs it no more. A command's stream is cancelled by Core within seconds of
# its Stop. The count bounds the memory (an id is kept as a 16-byte digest, whatever its length,
# with when it was named and its Stop's order packed in 24 bytes): about 970 KiB a registry once
# ids come and go (measured: 968 KiB after 2,000 more than the count and after 30,000 more; its
# table, rebuilt as the oldest are dropped, is twice the size it had when first full: 761 KiB
# only while it first fills), 1.25 MiB for a moment while the table is rebuilt; the executor has
# two, about 1.9 MiB. For Stops at more than 30 a second, far past an abort's pace.
STOPPED_IDS_MOST = 4096
STOPPED_IDS_KEEP_S = 120.0
# What a registry keeps of a Stop: when it was named, and its order (epoch, seq; 0, 0: none).
_NAMED = struct.Struct("<dQQ")

Order = tuple[int, int]  # a send's place in Core's order: (epoch, seq), see proto SendOrder


def made_before(first: Order | None, then: Order | None) -> bool:
    """Whether the send at ``first`` was made before the one at ``then`` by one Core: both have an
    order (an epoch, never 0), of one epoch, and ``first``'s seq is lower. False when they are not
    ordered against each other (another epoch, or either has none)."""
    return (first is not None and then is not None and first[0] != 0 and first[0] == then[0]
            and first[1] < then[1])


class Stopped(Exception):
    """A call or command arriving under an id a ``Stop`` named before it came: nothing is run.
    ``code`` is ``CANCELLED``, as for a call whose caller went away before it wrote."""

    code = "CANCELLED"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StoppedIds:
    """The ids a ``Stop`` named, each kept :data:`STOPPED_IDS_KEEP_S` seconds at most and the
    last :data:`STOPPED_IDS_MOST` of them at most (the oldest forgotten first), with the last
    ``Stop``'s order (:meth:`sent_before`). Not thread-safe: its registry's lock guards it, so
    that a ``Stop``'s look and a registration are one step."""

    def __init__(self, most: int = STOPPED_IDS_MOST, keep_s: float = STOPPED_IDS_KEEP_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.most = most
        self.keep_s = keep_s
        self._clock = clock
        self._ids: OrderedDict[bytes, bytes] = OrderedDict()  # digest -> _NAMED (when, epoch, seq)

    @staticmethod
    def _key(id_: str) -> bytes:
        return hashlib.blake2b(id_.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def _forget_old(self) -> None:
        cutoff = self._clock() - self.keep_s
        while self._ids and _NAMED.unpack(next(iter(self._ids.values())))[0] < cutoff:
            self._ids.popitem(last=False)

    def remember(self, id_: str, order: Order | None = None) -> None:
        """``id_`` named by a ``Stop`` now, made at ``order`` in its Core's sends (None: a Core
        built before the order). A later ``Stop`` of the same epoch keeps the highest seq (Stops
        may overtake one another too); one of another epoch, or with none, replaces it."""
        if not id_:
            return  # (no call or command is registered under no id)
        key = self._key(id_)
        epoch, seq = order if order is not None and order[0] else (0, 0)
        before = self._ids.pop(key, None)  # (named again: kept from now)
        if before is not None and epoch:
            _, epoch_before, seq_before = _NAMED.unpack(before)
            if epoch_before == epoch:
                seq = max(seq, seq_before)
        self._ids[key] = _NAMED.pack(self._clock(), epoch, seq)
        while len(self._ids) > self.most:
            self._ids.popitem(last=False)
        self._forget_old()

    def __contains__(self, id_: str) -> bool:
        self._forget_old()
        return self._key(id_) in self._ids

    def sent_before(self, id_: str, order: Order | None) -> bool:
        """Whether a send made at ``order`` under ``id_`` was made before the ``Stop`` that named
        it: that ``Stop`` is remembered, of the same epoch, and later in its sequence. False when
        the two are not ordered (another epoch, or either has no order) or no ``Stop`` named it."""
        self._forget_old()
        named = self._ids.get(self._key(id_))
        if named is None:
            return False
        _, epoch, seq = _NAMED.unpack(named)
        return made_before(order, (epoch, seq))

    def __len__(self) -> int:
        self._forget_old()
        return len(self._ids)


class RunIdRefused(Exception):
    """A run id that cannot be used: ``code`` is ``INVALID_ARGUMENT`` or ``RUN_ID_IN_USE``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class StopLatch:
    """Set by ``Stop``; :meth:`fileno` is readable once it is. Closed by its command's run, which
    first says it is over (:meth:`over`), with the exit it sent when it sent one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read, self._write = os.pipe()
        self._set = False
        self._claimed = False
        self._closed = False
        self._over = threading.Event()
        self._exit: Any = None

    def set(self) -> None:
        with self._lock:  # (never writes to a descriptor closed, and maybe reused, meanwhile)
            if self._set or self._closed:
                return
            self._set = True
            os.write(self._write, b"s")

    def is_set(self) -> bool:
        return self._set

    def claim(self) -> bool:
        """An editing call's last look before it writes: False when a ``Stop`` came first (the
        call writes nothing); else the call may write, and a ``Stop`` coming later waits for
        its end (:attr:`claimed`)."""
        with self._lock:
            if self._set:
                return False
            self._claimed = True
            return True

    @property
    def claimed(self) -> bool:
        with self._lock:
            return self._claimed

    def fileno(self) -> int:
        return self._read

    def over(self, exit_: Any = None) -> None:
        """The command's run is over: its group has ended, and ``exit_`` (None: none was sent,
        the stream was given up) was sent on its stream. The first call counts."""
        with self._lock:
            if not self._over.is_set():
                self._exit = exit_
                self._over.set()

    def wait_over(self, timeout: float, given_up: Callable[[], bool] = lambda: False) -> tuple[bool, Any]:
        """Wait at most ``timeout`` seconds for :meth:`over` (``given_up()`` true, read every
        tenth of a second, ends the wait early): whether it came, and the exit it gave."""
        deadline = time.monotonic() + timeout
        while not self._over.is_set() and not given_up():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._over.wait(min(remaining, 0.1))
        return self._over.is_set(), self._exit

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._read)
                os.close(self._write)


class RunRegistry:
    def __init__(self, stopped: StoppedIds | None = None) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, StopLatch] = {}
        self._stopped = stopped if stopped is not None else StoppedIds()  # (guarded by _lock)

    @contextmanager
    def running(self, run_id: str) -> Iterator[StopLatch | None]:
        """The latch of a command running under ``run_id`` (None for an empty id: no ``Stop``
        can reach it), unregistered and closed on exit. Raises :class:`RunIdRefused`, and
        :class:`Stopped` when a ``Stop`` named ``run_id`` before it came."""
        if not run_id:
            yield None
            return
        if len(run_id) > MAX_RUN_ID_CHARS:
            raise RunIdRefused("INVALID_ARGUMENT", f"run_id must be at most {MAX_RUN_ID_CHARS} characters; "
                                                   f"it has {len(run_id)}")
        latch = StopLatch()
        with self._lock:
            if run_id in self._stopped:
                latch.close()
                raise Stopped("a Stop named this run_id before the command came; nothing was run")
            if run_id in self._runs:
                latch.close()
                raise RunIdRefused("RUN_ID_IN_USE", "another running command has this run_id")
            self._runs[run_id] = latch
        try:
            yield latch
        finally:
            with self._lock:
                del self._runs[run_id]
            latch.over()  # (a run that sent no exit, given up or failed: a Stop waits no longer)
            latch.close()

    def stop(self, run_id: str) -> StopLatch | None:
        """Set the latch of the command running under ``run_id`` and return it (to wait on for
        the run's end); None when none is. A command coming later under ``run_id`` is refused
        (:class:`StoppedIds`)."""
        with self._lock:
            self._stopped.remember(run_id)
            latch = self._runs.get(run_id)
            if latch is not None:
                latch.set()
        return latch


class EditingCalls:
    """The latches of the editing calls running now, by call id (Core's ``session:call``, not
    bounded by this protocol), for a ``Stop`` naming one. Several calls may run under one id (a
    call sent again while the first still runs): each has its latch, and a ``Stop`` by the id
    reaches all of them but those Core sent after it (:meth:`stop`)."""

    def __init__(self, stopped: StoppedIds | None = None) -> None:
        self._lock = threading.Lock()
        # call id -> the latch of each call running under it, with the order it was sent at
        self._calls: dict[str, list[tuple[StopLatch, Order | None]]] = {}
        self._stopped = stopped if stopped is not None else StoppedIds()  # (guarded by _lock)

    @contextmanager
    def running(self, call_id: str, *, rerun: bool = False, order: Order | None = None) -> Iterator[StopLatch]:
        """The latch of a call running under ``call_id``; on exit it is over (a ``Stop`` waiting
        for it answers), unregistered and closed. Raises :class:`Stopped` when a ``Stop`` named
        ``call_id`` before it came: it writes nothing; unless ``rerun`` (Core runs the call again
        on purpose, after giving up an earlier run: the call journal answers it or applies it
        once) and the call was not sent before that ``Stop`` (``order``, Core's place of the
        send: the same epoch as the ``Stop``'s and a lower seq is a re-run given up in its turn,
        whose ``Stop`` overtook it). The id stays remembered: an unmarked copy coming later is
        still refused."""
        with self._lock:
            if call_id in self._stopped and (not rerun or self._stopped.sent_before(call_id, order)):
                raise Stopped("a Stop named this call before it came (its caller gave up); nothing was changed")
            latch = StopLatch()
            running = (latch, order)
            self._calls.setdefault(call_id, []).append(running)
        try:
            yield latch
        finally:
            with self._lock:
                same = self._calls[call_id]
                same.remove(running)
                if not same:
                    del self._calls[call_id]
            latch.over()
            latch.close()

    def stop(self, call_id: str, bound: float, given_up: Callable[[], bool] = lambda: False,
             order: Order | None = None) -> bool | None:
        """Stop the calls running under ``call_id`` and wait, at most ``bound`` seconds in all
        (``given_up()`` true ends the wait), for those that may be writing: whether all of them
        have ended (a call that had not yet looked whether its caller waits will find the stop
        there and write nothing: it needs no wait); None when none runs by that id. A call coming
        later under ``call_id`` is refused (:class:`StoppedIds`); ``order``: the ``Stop``'s place
        in Core's sends (None: not known), against which a re-run's is judged. A call running that
        Core sent after the ``Stop`` (:func:`made_before`: a re-run made once its wait for this
        ``Stop`` ran out) is not this ``Stop``'s: it is neither stopped nor waited for."""
        with self._lock:
            self._stopped.remember(call_id, order)
            latches = [latch for latch, sent in self._calls.get(call_id, ()) if not made_before(order, sent)]
            for latch in latches:
                latch.set()
        if not latches:
            return None
        deadline = time.monotonic() + bound
        for latch in latches:
            if latch.claimed and not latch.wait_over(max(0.0, deadline - time.monotonic()), given_up)[0]:
                return False
        return True
