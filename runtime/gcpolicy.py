"""The daemon's garbage-collection policy: a full collection walks what is new, not every open stream.

CPython's cyclic collector walks every tracked object in a full (generation 2) collection, with
the GIL held: the event loop stops for as long as it takes. A daemon with hundreds of open SSE
streams holds a few hundred tracked objects per stream (server, request and task state that lives
as long as the connection); measured at 500 subscribers and 1,000 events/s (``bench/sse_bench.py``)
that was ~190,000 objects and 60-130 ms per full collection, every few seconds: the tail of every
stream's delivery latency.

So the daemon freezes survivors (``gc.freeze``: moved to the permanent generation, which no
collection walks): once after start-up, and again at the end of every full collection. A full
collection then walks only objects that survived since the previous one. Objects that die in a
reference cycle after being frozen are not reclaimed until the next *thaw*: every
:data:`THAW_SECONDS` the next full collection first unfreezes everything, so that one walks the
whole heap (one long pause per thaw period instead of one every few seconds) and memory held by
dead cycles stays bounded. Objects freed by reference counting (most of them) are freed at once
whether frozen or not.

Process-wide by nature, so only the process's owner installs it: ``lens serve`` around its
``trio.run`` (:func:`runtime.daemon.run`), never the library code that tests run in-process.
"""

from __future__ import annotations

import gc
import time
from typing import Any, Callable

THAW_SECONDS = 600.0


class FreezeSurvivors:
    """Install with :meth:`install`, remove with :meth:`uninstall` (or use it as a context manager).

    ``clock`` is injectable for tests. Counts of freezes and thaws are kept for inspection.
    """

    def __init__(self, *, thaw_seconds: float = THAW_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.thaw_seconds = thaw_seconds
        self.clock = clock
        self.freezes = 0
        self.thaws = 0
        self._thawed_at = 0.0
        self._installed = False

    def install(self) -> None:
        if self._installed:
            return
        gc.collect()
        gc.freeze()  # what start-up built (modules, classes, the app) is never walked again
        self._thawed_at = self.clock()
        gc.callbacks.append(self._after_collection)
        self._installed = True

    def uninstall(self) -> None:
        if not self._installed:
            return
        gc.callbacks.remove(self._after_collection)
        gc.unfreeze()
        self._installed = False

    def __enter__(self) -> "FreezeSurvivors":
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def _after_collection(self, phase: str, info: dict[str, Any]) -> None:
        # Runs in whichever thread collected, with the GIL held, after the collection finished.
        if phase != "stop" or info.get("generation") != 2:
            return
        if self.clock() - self._thawed_at >= self.thaw_seconds:
            gc.unfreeze()  # the next full collection walks everything, dead frozen cycles included
            self._thawed_at = self.clock()
            self.thaws += 1
        else:
            gc.freeze()
            self.freezes += 1
