"""``ArtifactStore.keep`` and ``let_go``: bytes an event will name after their lease ended (an edit
that completed while its call was cut off) are held until that event committed or never will be.
Each ``keep`` is released by its own ``let_go``: two sessions may hold the same bytes (the same
file's copies), and one letting go must not leave the other's unheld for a sweep."""

from __future__ import annotations

from pathlib import Path

from tools.artifacts import ArtifactStore


def sweep(artifacts: ArtifactStore) -> list[str]:
    """Remove every artifact not in flight, as a sweep finding none of them named does; what is left."""
    kept, failed = artifacts.remove(artifacts.leftovers(2 ** 62).artifacts)
    assert failed == []
    return sorted(kept)


def test_each_keep_holds_until_its_own_let_go(tmp_path: Path) -> None:
    artifacts = ArtifactStore(tmp_path / "artifacts")
    with artifacts.lease() as lease:
        aid = artifacts.put(b"the same copy\n")
        lease.recorded()
    artifacts.keep([aid])  # (one session's cut-off edit)
    artifacts.keep([aid])  # (another's, over the same bytes)
    artifacts.let_go([aid])  # (the first recorded its file.edited)
    assert artifacts.held_for_good() == {aid}
    assert sweep(artifacts) == [aid] and artifacts.get(aid) == b"the same copy\n"
    artifacts.let_go([aid])
    assert artifacts.held_for_good() == set()
    assert sweep(artifacts) == [] and not (artifacts.root / aid).exists()


def test_one_keep_naming_an_id_twice_is_released_by_the_let_go_naming_it_twice(tmp_path: Path) -> None:
    # (a call's two edits whose copies share bytes: kept, and let go, from the same events)
    artifacts = ArtifactStore(tmp_path / "artifacts")
    with artifacts.lease() as lease:
        aid = artifacts.put(b"x\n")
        lease.recorded()
    artifacts.keep([aid, aid])
    artifacts.keep([aid])
    artifacts.let_go([aid, aid])
    assert sweep(artifacts) == [aid]
    artifacts.let_go([aid])
    assert sweep(artifacts) == []


def test_let_go_of_what_was_never_kept_leaves_a_put_s_own_hold(tmp_path: Path) -> None:
    # (put outside a lease: held for good until an event names it, whatever let_go is given)
    artifacts = ArtifactStore(tmp_path / "artifacts")
    aid = artifacts.put(b"put outside a lease\n")
    artifacts.let_go([aid])
    assert artifacts.held_for_good() == {aid} and sweep(artifacts) == [aid]
    artifacts.release_named([aid])
    assert sweep(artifacts) == []


def test_let_go_more_times_than_kept_counts_nothing_below_none(tmp_path: Path) -> None:
    artifacts = ArtifactStore(tmp_path / "artifacts")
    with artifacts.lease() as lease:
        aid = artifacts.put(b"y\n")
        lease.recorded()
    artifacts.let_go([aid])  # (before any keep: nothing to release, no debt for later)
    artifacts.keep([aid])
    assert sweep(artifacts) == [aid]


def test_a_keep_named_in_the_log_is_released_and_its_later_let_go_is_harmless(tmp_path: Path) -> None:
    artifacts = ArtifactStore(tmp_path / "artifacts")
    with artifacts.lease() as lease:
        aid = artifacts.put(b"z\n")
        lease.recorded()
    artifacts.keep([aid])
    artifacts.release_named([aid])  # (a live sweep found it named)
    assert artifacts.held_for_good() == set()
    artifacts.let_go([aid])
    artifacts.keep([aid])  # (held again afresh: one let_go's worth)
    assert sweep(artifacts) == [aid]


def test_a_let_go_while_a_sweep_is_under_way_leaves_the_id_to_the_next_sweep(tmp_path: Path) -> None:
    # The sweep judged "named by nothing" before the event naming the bytes committed and the
    # hold was let go: it must not remove them now (the event may name them); the next sweep
    # reads the log afresh.
    artifacts = ArtifactStore(tmp_path / "artifacts")
    with artifacts.lease() as lease:
        aid = artifacts.put(b"w\n")
        lease.recorded()
    artifacts.keep([aid])
    with artifacts.sweeping():
        artifacts.let_go([aid])
        assert artifacts.held_for_good() == set()
        assert sweep(artifacts) == [aid]
    assert sweep(artifacts) == []
