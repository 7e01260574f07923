"""The artifact store's verdicts (docs/decisions.md, "An artifact checked against its id once per
file"): a file is read whole against its id once per identity on disk, the verdict remembered
for at most :data:`tools.artifacts.VERIFIED_FILES` artifacts, the least recently used forgotten
first. Real files in a temporary directory; ``ArtifactStore.verifications`` counts the files the
store read whole to judge them."""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest

from tools.artifacts import VERIFIED_FILES, ArtifactError, ArtifactStore


def stored(root: Path, count: int) -> list[str]:
    """``count`` small artifacts written straight to ``root`` (no put: nothing judged yet)."""
    root.mkdir(parents=True, exist_ok=True)
    ids = []
    for i in range(count):
        data = b"artifact %d" % i
        aid = hashlib.sha256(data).hexdigest()
        (root / aid).write_bytes(data)
        ids.append(aid)
    return ids


def test_verdicts_are_kept_for_the_bound_exactly_and_one_past_forgets_the_oldest(tmp_path: Path) -> None:
    """``VERIFIED_FILES`` artifacts judged once each are all remembered (judged again: no file is
    read); one more forgets the least recently used, which alone is read again."""
    store = ArtifactStore(tmp_path / "artifacts")
    ids = stored(store.root, VERIFIED_FILES + 1)
    at_limit, past = ids[:VERIFIED_FILES], ids[VERIFIED_FILES]
    for i, aid in enumerate(at_limit):
        assert store.verify(aid) == len(b"artifact %d" % i)
    assert store.verifications == VERIFIED_FILES
    for aid in at_limit:
        store.verify(aid)
    assert store.verifications == VERIFIED_FILES  # (every one remembered at the bound)
    store.verify(past)
    assert store.verifications == VERIFIED_FILES + 1
    for aid in at_limit[1:]:  # (the first was the least recently used: the one forgotten)
        store.verify(aid)
    assert store.verifications == VERIFIED_FILES + 1
    store.verify(at_limit[0])
    assert store.verifications == VERIFIED_FILES + 2


def test_a_changed_file_is_judged_again_and_a_damaged_one_is_remembered(tmp_path: Path) -> None:
    """A verdict holds for one file: a write in place (even with the mtime put back), a rename
    onto the name, a truncation each make the next read judge it again; a damaged file's
    verdict is remembered too (asked again, not read again), until a put writes it again."""
    store = ArtifactStore(tmp_path / "artifacts")
    data = os.urandom(100_000)
    aid = store.put(data)
    path = store.root / aid
    store.verify(aid)
    store.verify(aid)
    assert store.verifications == 1
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(50_000)
        f.write(b"\0" if data[50_000] else b"\1")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    for _ in range(2):
        with pytest.raises(ArtifactError) as caught:
            store.verify(aid)
        assert caught.value.code == "ARTIFACT_CORRUPT"
    assert store.verifications == 2  # (the damage judged once, then remembered)
    assert store.put(data) == aid  # (written again: a new file)
    assert store.verify(aid) == len(data)
    assert store.verifications == 3  # (the put trusted the damage remembered; the read judged the new file)
    other = path.with_name("other")
    other.write_bytes(data)
    other.replace(path)
    store.verify(aid)
    assert store.verifications == 4
    os.truncate(path, 10)
    with pytest.raises(ArtifactError):
        store.verify(aid)
    assert store.verifications == 5



def test_a_file_whose_name_is_removed_or_linked_while_it_is_checked_is_judged_by_its_bytes(tmp_path: Path) -> None:
    """A link removed (a sweep's removal) or added to an artifact's file after an answer opened it
    changes the file's ``ctime``, not its bytes: the check reads it once more from the same
    descriptor and judges the bytes (it called an intact artifact damaged, "it changed while it
    was checked"). A write in place with its mtime put back changes ``ctime`` alone too: read
    again, it is judged damaged. A size or mtime changed is damage at once, as before."""
    store = ArtifactStore(tmp_path / "artifacts")
    data = os.urandom(300_000)
    aid = store.put(data)
    path = store.root / aid

    with store.open(aid) as opened:
        os.link(path, tmp_path / "a-second-name")
        store.check(opened)  # (intact: read twice, the second time as the file now is)
        assert store.verifications == 2
    with store.open(aid) as opened:  # (the verdict is for the file as it is now: not read again)
        store.check(opened)
    assert store.verifications == 2

    removed = os.urandom(200_000)
    rid = store.put(removed)
    with store.open(rid) as opened:
        (store.root / rid).unlink()  # (the descriptor still holds the file: its bytes are the id's)
        store.check(opened)
        assert opened.read_at(0, len(removed) + 1) == removed
    assert store.verifications == 4
    os.unlink(tmp_path / "a-second-name")

    aid = store.put(data)
    with store.open(aid) as opened:
        st = path.stat()
        fd = os.open(path, os.O_RDWR)
        try:
            os.pwrite(fd, bytes([data[1000] ^ 1]), 1000)
        finally:
            os.close(fd)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        with pytest.raises(ArtifactError) as caught:
            store.check(opened)
        assert caught.value.code == "ARTIFACT_CORRUPT" and "SHA-256" in caught.value.message, caught.value.message
    with store.open(aid) as opened:
        os.truncate(path, 10)
        with pytest.raises(ArtifactError) as caught:
            store.check(opened)
        assert "changed while it was checked" in caught.value.message


def sha256_calls(action: Callable[[], object]) -> tuple[int, object]:
    """How many times ``action`` (run in this thread) called ``hashlib.sha256`` (each a hash of
    an artifact's bytes begun: ``get``'s of the bytes it holds, ``check``'s of the file it
    reads), seen by the interpreter's profiler; and what it returned, or the error it raised."""
    calls = 0

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal calls
        if event == "c_call" and arg is hashlib.sha256:
            calls += 1

    sys.setprofile(profile)
    try:
        result: object = action()
    except ArtifactError as exc:
        result = exc
    finally:
        sys.setprofile(None)
    return calls, result


def test_get_hashes_a_file_once_and_shares_its_verdict_with_check(tmp_path: Path) -> None:
    """``get`` (an image sent to a model with every request, an edit's copies, a job's output)
    hashed the whole artifact at every call; it now judges by the verdict as ``check`` does:
    hashed once per file on disk, the verdict shared both ways with ``check``, a file changed
    since it was judged hashed again, a damaged one refused with the same error as before."""
    store = ArtifactStore(tmp_path / "artifacts")
    data = os.urandom(4 * 1024 * 1024)
    aid = store.put(data)
    path = store.root / aid
    reads = [sha256_calls(lambda: store.get(aid)) for _ in range(3)]
    assert [calls for calls, _ in reads] == [1, 0, 0] and all(got == data for _, got in reads)
    assert sha256_calls(lambda: store.verify(aid)) == (0, len(data))  # (get's verdict, trusted by check)
    assert store.verifications == 1

    other = os.urandom(1024 * 1024)
    oid = store.put(other)
    assert sha256_calls(lambda: store.verify(oid)) == (1, len(other))
    calls, got = sha256_calls(lambda: store.get(oid))
    assert calls == 0 and got == other  # (check's verdict, trusted by get)

    st = path.stat()
    with open(path, "r+b") as f:  # (one byte changed in place, its mtime put back)
        f.seek(3_000_000)
        f.write(bytes([data[3_000_000] ^ 1]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    refusals = [sha256_calls(lambda: store.get(aid)) for _ in range(2)] + [sha256_calls(lambda: store.verify(aid))]
    assert [calls for calls, _ in refusals] == [1, 0, 0]  # (judged once, then the damage remembered)
    for _, refused in refusals:
        assert isinstance(refused, ArtifactError) and refused.code == "ARTIFACT_CORRUPT", refused
        assert refused.message == (f"artifact {aid} is damaged on disk (its bytes no longer match its "
                                   "SHA-256)"), refused.message
    replacement = path.with_name("replacement")
    replacement.write_bytes(data)
    replacement.replace(path)  # (a new file: judged again, intact)
    calls, got = sha256_calls(lambda: store.get(aid))
    assert calls == 1 and got == data
    assert store.verifications == 4


def test_a_second_judge_of_a_file_being_judged_waits_for_its_verdict(tmp_path: Path) -> None:
    """Two first reads of one file at once hashed it twice; the second now waits for the first's
    verdict (a ``check`` and a ``get`` alike). The first is held at the start of its hash until
    the second has begun waiting (or, without the wait, ended), seen by the profiler."""
    for second_reader in ("verify", "get"):
        store = ArtifactStore(tmp_path / second_reader)
        data = os.urandom(2 * 1024 * 1024)
        aid = store.put(data)
        second_waits_or_ended = threading.Event()
        hashes = Counter[str]()
        results: dict[str, object] = {}

        def second() -> None:
            def profile(frame: FrameType, event: str, arg: object) -> None:
                if event == "call" and frame.f_code is threading.Event.wait.__code__:
                    second_waits_or_ended.set()
                elif event == "c_call" and arg is hashlib.sha256:
                    hashes["second"] += 1

            sys.setprofile(profile)
            try:
                results["second"] = getattr(store, second_reader)(aid)
            finally:
                sys.setprofile(None)
                second_waits_or_ended.set()

        second_thread = threading.Thread(target=second)

        def first() -> None:
            def profile(frame: FrameType, event: str, arg: object) -> None:
                if event == "c_call" and arg is hashlib.sha256:
                    hashes["first"] += 1
                    if not second_thread.is_alive() and second_thread.ident is None:
                        second_thread.start()
                        assert second_waits_or_ended.wait(30)

            sys.setprofile(profile)
            try:
                results["first"] = store.verify(aid)
            finally:
                sys.setprofile(None)

        first_thread = threading.Thread(target=first)
        first_thread.start()
        first_thread.join(60)
        second_thread.join(60)
        assert not first_thread.is_alive() and not second_thread.is_alive()
        assert hashes == {"first": 1}, (second_reader, hashes)
        assert results["first"] == len(data)
        assert results["second"] == (len(data) if second_reader == "verify" else data)
        assert store.verifications == 1


def test_a_waiting_judge_does_not_trust_a_check_that_failed(tmp_path: Path) -> None:
    """A check that fails without a verdict (its file cut while it was read) leaves nothing for
    the check waiting on it to trust: that one judges the file itself, and refuses it."""
    store = ArtifactStore(tmp_path / "artifacts")
    data = os.urandom(2 * 1024 * 1024)
    aid = store.put(data)
    second_waits = threading.Event()
    results: dict[str, object] = {}
    opened_second = store.open(aid)  # (opened before the cut: the identity the first was opened with)

    def second() -> None:
        def profile(frame: FrameType, event: str, arg: object) -> None:
            if event == "call" and frame.f_code is threading.Event.wait.__code__:
                second_waits.set()

        sys.setprofile(profile)
        try:
            store.check(opened_second)
        except ArtifactError as exc:
            results["second"] = exc
        finally:
            sys.setprofile(None)
            second_waits.set()

    second_thread = threading.Thread(target=second)

    def first() -> None:
        def profile(frame: FrameType, event: str, arg: object) -> None:
            if event == "c_call" and arg is hashlib.sha256 and second_thread.ident is None:
                second_thread.start()
                assert second_waits.wait(30)
                os.truncate(store.root / aid, len(data) // 2)  # (cut while the first reads it)

        sys.setprofile(profile)
        try:
            store.verify(aid)
        except ArtifactError as exc:
            results["first"] = exc
        finally:
            sys.setprofile(None)

    first_thread = threading.Thread(target=first)
    first_thread.start()
    first_thread.join(60)
    second_thread.join(60)
    opened_second.close()
    assert not first_thread.is_alive() and not second_thread.is_alive()
    for who in ("first", "second"):
        refused = results.get(who)
        assert isinstance(refused, ArtifactError) and "changed while it was checked" in refused.message, (who, refused)
    assert store.verifications == 2  # (each read the file: the failed check's outcome was not shared)


def test_a_failed_put_together_forgets_the_verdicts_of_the_files_it_removes(tmp_path: Path) -> None:
    """A fresh file of a failed ``put_together``, judged before the call failed (an answer for
    its id), was removed with its verdict kept, holding a place among the ``verified_files``:
    with a bound of two, it pushed out a verdict still of use, whose file was read again."""
    store = ArtifactStore(tmp_path / "artifacts", verified_files=2)
    kept = store.put(b"an artifact an event names\n")
    store.verify(kept)
    before, after = b"before\n", b"after\n"
    blocked = store.root / hashlib.sha256(after).hexdigest()
    (blocked / "x").mkdir(parents=True)  # (its rename fails, as on a full disk)

    class JudgedMeanwhile(list):  # the "before" answered while the "after" is stored
        def __iter__(self) -> Iterator[bytes]:
            yield before
            assert store.verify(hashlib.sha256(before).hexdigest()) == len(before)
            yield after

    with pytest.raises(OSError):
        store.put_together(JudgedMeanwhile())
    assert not (store.root / hashlib.sha256(before).hexdigest()).exists()
    assert store.verifications == 2
    store.verify(store.put(b"another artifact\n"))  # (the third verdict: past the bound of two)
    assert store.verifications == 3
    store.verify(kept)  # (its verdict kept: not read again)
    assert store.verifications == 3


def test_get_holds_an_artifact_once_in_memory(tmp_path: Path) -> None:
    """``get`` read an artifact in pieces of 4 MiB and joined them: a second copy of the whole
    for a moment (an 8 MiB image peaked at 16 MiB). It now reads it in one piece of its size;
    a file grown since it was opened is read on, to its end."""
    store = ArtifactStore(tmp_path / "artifacts")
    data = os.urandom(8 * 1024 * 1024)
    aid = store.put(data)
    tracemalloc.start()
    try:
        got = store.get(aid)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == data
    assert peak < 9 * 1024 * 1024, peak  # (the 8 MiB held, and less than 1 MiB besides)
    with store.open(aid) as opened:
        with open(store.root / aid, "ab") as f:
            f.write(b"grown")
        assert opened.read_whole() == data + b"grown"
