"""Compiled ignore files kept between listings (tools.files.ignore_cache): reused, never stale,
bounded, safe to share between threads. Observed through the cache's own counters."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from tools.files import Workspace
from tools.files.ignore_cache import IgnoreCache


def names(listing: dict) -> list[str]:
    return [e["path"] for e in listing["entries"]]


def test_a_listing_reuses_what_the_previous_one_compiled(ws: Workspace, root: Path):
    cache = ws.ignore_cache = IgnoreCache()
    (root / ".gitignore").write_text("*.log\n")
    (root / "sub").mkdir()
    (root / "sub" / ".gitignore").write_text("*.tmp\n")
    for name in ("a.log", "a.txt", "sub/b.tmp", "sub/b.txt"):
        (root / name).write_text("x")
    first = ws.browse_list(".", depth=2)
    assert names(first) == [".gitignore", "a.txt", "sub", "sub/.gitignore", "sub/b.txt"]
    assert cache.stats().compiles == 2 and cache.stats().hits == 0
    assert ws.browse_list(".", depth=2) == first
    assert names(ws.browse_list("sub")) == ["sub/.gitignore", "sub/b.txt"]  # (the root's rules, then sub's)
    stats = cache.stats()
    assert stats.compiles == 2 and stats.hits == 4 and stats.files == 2 and stats.bytes == 12


def test_an_edit_of_the_same_size_and_mtime_is_seen_on_the_next_listing(ws: Workspace, root: Path):
    cache = ws.ignore_cache = IgnoreCache()
    ignore = root / ".gitignore"
    ignore.write_text("*.log\n")
    (root / "a.log").write_text("x")
    (root / "a.txt").write_text("x")
    assert names(ws.browse_list(".")) == [".gitignore", "a.txt"]
    before = ignore.stat()
    ignore.write_text("*.txt\n")  # same size, same inode; then the same mtime too
    os.utime(ignore, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = ignore.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    assert names(ws.browse_list(".")) == [".gitignore", "a.log"]
    assert cache.stats().compiles == 2
    ignore.write_text("*.log\n")  # back to a text the cache still holds
    assert names(ws.browse_list(".")) == [".gitignore", "a.txt"]
    assert cache.stats().compiles == 2


def test_the_same_text_in_two_directories_is_two_entries_anchored_to_each():
    cache = IgnoreCache()
    top, sub = cache.get("", b"/x\n"), cache.get("sub", b"/x\n")
    assert top is not sub and top.patterns[0].base == "" and sub.patterns[0].base == "sub"
    assert cache.get("sub", b"/x\n") is sub and cache.stats().compiles == 2


def test_the_count_bound_holds_at_the_limit_and_one_past_it():
    cache = IgnoreCache(max_files=3)
    a, b, c = (cache.get("", t) for t in (b"a\n", b"b\n", b"c\n"))
    assert cache.stats().files == 3
    assert (cache.get("", b"a\n"), cache.get("", b"b\n"), cache.get("", b"c\n")) == (a, b, c)
    assert cache.stats().compiles == 3  # at the limit: all three held
    cache.get("", b"a\n")  # a is now the most recently used, b the least
    cache.get("", b"d\n")  # one past: b goes
    assert cache.stats().files == 3 and cache.stats().compiles == 4
    assert cache.get("", b"a\n") is a and cache.get("", b"c\n") is c and cache.stats().compiles == 4
    assert cache.get("", b"b\n") is not b and cache.stats().compiles == 5


def test_the_byte_bound_holds_at_the_limit_and_one_past_it():
    cache = IgnoreCache(max_bytes=10)
    a = cache.get("", b"a\n")        # 2 bytes
    b = cache.get("", b"bbbb\n")     # 5
    c = cache.get("", b"cc\n")       # 3: 10 in all, the limit
    stats = cache.stats()
    assert (stats.files, stats.bytes) == (3, 10)
    assert (cache.get("", b"a\n"), cache.get("", b"bbbb\n"), cache.get("", b"cc\n")) == (a, b, c)
    assert cache.stats().compiles == 3
    cache.get("", b"e")              # 1 more: 11, one past; a (least recently used) goes
    stats = cache.stats()
    assert (stats.files, stats.bytes, stats.compiles) == (3, 9, 4)
    assert cache.get("", b"bbbb\n") is b and cache.get("", b"cc\n") is c and cache.stats().compiles == 4
    assert cache.get("", b"a\n") is not a and cache.stats().compiles == 5


def test_a_file_larger_than_the_byte_bound_is_compiled_but_not_kept():
    cache = IgnoreCache(max_bytes=10)
    small = cache.get("", b"a\n")
    big = cache.get("", b"x" * 10 + b"\n")
    assert [p.text for p in big.patterns] == ["x" * 10]
    stats = cache.stats()
    assert (stats.files, stats.bytes, stats.compiles) == (1, 2, 2)
    assert cache.get("", b"a\n") is small
    cache.get("", b"x" * 10 + b"\n")
    assert cache.stats().compiles == 3


def test_threads_asking_for_the_same_file_at_once_share_one_compile():
    cache = IgnoreCache()
    text = "".join(f"dir{i}/**/*.o{i}\n!keep{i}\n" for i in range(2000)).encode()
    start = threading.Barrier(8)
    got: list[object] = []

    def ask() -> None:
        start.wait()
        compiled = cache.get("", text)
        compiled.groups(False)
        got.append(compiled)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(got) == 8 and all(g is got[0] for g in got)
    stats = cache.stats()
    assert stats.compiles == 1 and stats.hits == 7 and stats.files == 1
