"""The daemon's GC policy: full collections freeze their survivors; a thaw period reclaims dead frozen cycles."""

from __future__ import annotations

import gc
import weakref

from runtime.gcpolicy import FreezeSurvivors


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector can free it


def test_full_collections_freeze_survivors_and_a_thaw_reclaims_dead_cycles() -> None:
    now = [0.0]
    policy = FreezeSurvivors(thaw_seconds=10.0, clock=lambda: now[0])
    with policy:
        assert gc.get_freeze_count() > 0  # start-up objects: frozen at install
        assert policy.freezes == 0
        node = Node()
        dead = weakref.ref(node)
        survivors = [[i] for i in range(1000)]
        gc.collect(1)  # a young collection freezes nothing
        assert policy.freezes == 0
        before = gc.get_freeze_count()
        gc.collect()
        assert policy.freezes == 1 and gc.get_freeze_count() >= before + len(survivors)
        del node  # a cycle that dies while frozen...
        gc.collect()
        assert dead() is not None  # ...is not walked, so not reclaimed, until the thaw
        now[0] = 10.0
        gc.collect()  # the period is over (exactly at thaw_seconds): this collection thaws
        assert policy.thaws == 1 and gc.get_freeze_count() == 0
        gc.collect()  # the next full collection walks everything and reclaims the dead cycle
        assert dead() is None
        assert policy.freezes == 3 and gc.get_freeze_count() >= len(survivors)
    assert gc.get_freeze_count() == 0  # uninstall unfreezes and removes the callback
    count = policy.freezes
    gc.collect()
    assert policy.freezes == count and gc.get_freeze_count() == 0


def test_install_and_uninstall_are_idempotent() -> None:
    policy = FreezeSurvivors()
    callbacks = len(gc.callbacks)
    policy.install()
    policy.install()
    assert len(gc.callbacks) == callbacks + 1
    policy.uninstall()
    policy.uninstall()
    assert len(gc.callbacks) == callbacks and gc.get_freeze_count() == 0
