"""A create that fails removes the directories it made, and only those: not one another call
walked into meanwhile, not one another party put in place of its own, not one another creator
made first. The calls run on one real Workspace in two threads, as the executor's pool runs
them, ordered by the test seams (``still_wanted``, ``resolve_hook``), never by timing."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable

from tools.files import Workspace
from tools.files.confine import resolve

from .helpers import fails

WAIT = 10  # seconds a step may wait for the other thread (a bound, not an ordering)


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``fn`` in a thread of its own; the dict gets its result or its error."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:  # (reported by the test, not lost in the thread)
            out["error"] = exc

    t = threading.Thread(target=run, name="first", daemon=True)
    t.start()
    return t, out


def step(event: threading.Event) -> None:
    assert event.wait(WAIT), "the other thread never got there"


def test_a_failed_create_leaves_the_directory_another_create_walked_into(ws: Workspace, root: Path) -> None:
    # A creates n/a.txt and makes n/; B, creating n/b.txt, finds n/ and walks in; A's caller is
    # gone (CANCELLED), so A removes the n/ it made, still empty. B wrote into a removed directory
    # and failed NOT_FOUND; it walks again, makes n/ anew and writes its file.
    a_planned, b_holds_n, a_done = threading.Event(), threading.Event(), threading.Event()
    b_asked = []

    def still_wanted() -> bool:
        if threading.current_thread().name == "first":
            a_planned.set()
            step(b_holds_n)
            return False
        b_asked.append(1)
        b_holds_n.set()
        step(a_done)
        return True

    ws.still_wanted = still_wanted

    def first() -> Any:
        try:
            return ws.edit_file("n/a.txt", "create", content="a")
        finally:
            a_done.set()

    thread, out = in_thread(first)
    step(a_planned)
    result = ws.edit_file("n/b.txt", "create", content="b")
    thread.join(WAIT)
    assert out["error"].code == "CANCELLED"
    assert result.structured == {"path": "n/b.txt", "changed": True, "units_applied": 1, "bytes_written": 1}
    assert len(b_asked) == 2  # (it walked twice: the second time into the n/ it made itself)
    assert tree(root) == ["n", "n/b.txt"]
    assert (root / "n" / "b.txt").read_bytes() == b"b"


def test_a_failed_create_leaves_a_directory_put_in_place_of_its_own(ws: Workspace, root: Path) -> None:
    # While A creates kept/a/f.txt (making kept/a), another party renames kept/a to kept/z and
    # makes its own empty kept/a. A fails: the kept/a there now is not the directory it made.
    (root / "kept").mkdir()
    a_planned, swapped = threading.Event(), threading.Event()

    def still_wanted() -> bool:
        a_planned.set()
        step(swapped)
        return False

    ws.still_wanted = still_wanted
    thread, out = in_thread(lambda: ws.edit_file("kept/a/f.txt", "create", content="x"))
    step(a_planned)
    os.rename(root / "kept" / "a", root / "kept" / "z")
    (root / "kept" / "a").mkdir()
    theirs = (root / "kept" / "a").stat().st_ino
    swapped.set()
    thread.join(WAIT)
    assert out["error"].code == "CANCELLED"
    # theirs stays; the one A made is left where it was moved (A cannot know its new name)
    assert tree(root) == ["kept", "kept/a", "kept/z"]
    assert (root / "kept" / "a").stat().st_ino == theirs


def test_a_directory_another_creator_made_first_is_not_the_failed_creates_to_remove(ws: Workspace,
                                                                                      root: Path) -> None:
    # Between the walk's look (no kept/a) and its mkdir, another creator makes kept/a: the mkdir
    # fails EEXIST and the walk goes on into theirs. The create then fails; kept/a is not its own.
    (root / "kept").mkdir()

    def other_creator(event: str, rel: str) -> None:
        if (event, rel) == ("mkdir", "kept/a"):
            (root / "kept" / "a").mkdir()

    ws.resolve_hook = other_creator
    ws.still_wanted = lambda: False
    fails("CANCELLED", ws.edit_file, "kept/a/b/f.txt", "create", content="x")
    assert tree(root) == ["kept", "kept/a"]  # kept/a/b, made by the create, is gone
    ws.resolve_hook = None
    fails("CANCELLED", ws.edit_file, "kept/c/f.txt", "create", content="x")
    assert tree(root) == ["kept", "kept/a"]  # (without the other creator its own goes)


def test_a_directory_made_before_the_walk_left_its_parent_is_not_removed_through_a_closed_fd(
        ws: Workspace, root: Path) -> None:
    # A create of k/n/l/f.txt makes k/n; a link k/n/l -> ../../m, planted as the walk opens k/n,
    # takes it back up past k (closing k's fd, whose number the next open reuses) and makes m.
    # Only m can still be removed through a directory the walk holds: k/n's parent fd is closed.
    (root / "k").mkdir()

    def plant(event: str, rel: str) -> None:
        if (event, rel) == ("open_dir", "k/n"):
            (root / "k" / "n" / "l").symlink_to("../../m")

    t = resolve(ws._root, "k/n/l/f.txt", follow_final=False, create_parents=True, hook=plant)
    with t:
        assert t.rel == "m/f.txt"
        assert [m.name for m in t.made] == ["m"]
        assert all(m.parent in t._fds for m in t.made)
        t.unmake()
    assert tree(root) == ["k", "k/n", "k/n/l"]
