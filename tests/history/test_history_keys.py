"""F-MOD-6 in the history index: it holds each item scrubbed of the keys it was built with, so a
search for a key or a piece of it finds nothing, and an index built with another set of keys
(events stored before a key was configured) is rebuilt. Through the real store and projector."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from events import types as t
from events.reader import LogReader
from events.secrets import MIN_SECRET, Secrets, marker
from events.store import Draft, open_store
from projections.history import HistoryIndex, HistoryProjection
from projections.projector import Projector, open_projections_db

P = "prj_keys"
KEY = ("ANTHROPIC_API_KEY", "sk-ant-api03-Hq7Lz2Wn5Rb8Tc4Vd1Xf6Yg9")
EIGHT = ("LENS_TEST_EIGHT_KEY", "Qz8vK2pL")  # the shortest value scrubbed
SEVEN = ("LENS_TEST_SEVEN_KEY", "Wm4tR9x")  # one character short: never scrubbed
# Words of the key as the index splits it, and the key whole (a phrase of those words).
PROBES = ["api03", "Hq7Lz2Wn5Rb8Tc4Vd1Xf6Yg9", "Hq7L*", f'"{KEY[1]}"', KEY[1], EIGHT[1]]


def secrets(*pairs: tuple[str, str]) -> Secrets:
    return Secrets({value: name for name, value in pairs})


async def write_log(data: Path, *texts: str) -> None:
    """A session whose inputs are ``texts``, stored as written (the store knows no key)."""
    async with open_store(data) as store:
        await store.append(Draft(t.SessionCreated(), project_id=P, session_id="s1", agent_id="main"))
        for n, text in enumerate(texts):
            rid = f"r{n}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"  # (each call its own)
            for ev in (t.InputSubmitted(content=[t.TextPart(text)]), t.InputPlaced(input_request_id=rid)):
                await store.append(Draft(ev, project_id=P, session_id="s1", agent_id="main", task_id="t1",
                                         request_id=rid if isinstance(ev, t.InputSubmitted) else None))


def opened(data: Path, known: Secrets | None) -> Projector:
    projector = Projector(LogReader(data), open_projections_db(data), [HistoryProjection(known)])
    projector.catch_up()
    return projector


def found(projector: Projector, query: str) -> list[str]:
    return [h.context_item_id for h in HistoryIndex(projector.conn).search(P, query, limit=100)[0]]


QUOTE = f"quokka says the key is {KEY[1]} and {EIGHT[1]} or {SEVEN[1]}"


async def test_an_index_built_without_a_key_is_rebuilt_when_the_key_is_known(tmp_path: Path) -> None:
    data = tmp_path / "data"
    await write_log(data, QUOTE, "an unrelated wombat")
    before = opened(data, None)  # the daemon started without the keys: the index holds them
    for probe in PROBES:
        assert found(before, probe), probe
    before.close()

    known = secrets(KEY, EIGHT, SEVEN)
    after = opened(data, known)  # started with them: rebuilt, and nothing of the keys is found
    for probe in PROBES:
        assert found(after, probe) == [], probe
    (item,) = found(after, "quokka")  # a key-free word of the same item still finds it
    assert found(after, SEVEN[1]) == [item]  # (7 characters: no key, never scrubbed)
    page = HistoryIndex(after.conn, known).read(item)
    text = f"quokka says the key is {marker(KEY[0])} and {marker(EIGHT[0])} or {SEVEN[1]}"
    # Offsets, size and digest are those of the text the index holds: the scrubbed one.
    assert (page["text"], page["size"], page["digest"], page["eof"]) == (
        text, len(text.encode()), hashlib.sha256(text.encode()).hexdigest(), True)
    half = HistoryIndex(after.conn, known).read(item, limit=30)
    assert half["nextOffset"] == 30 and half["text"] == text[:30]
    # What is recorded of the key set is a salted digest: no piece of a key, in any table.
    dump = repr(list(after.conn.execute("SELECT * FROM inputs"))) + repr(after.dump("history"))
    for value in (KEY[1], EIGHT[1]):
        assert not any(value[i:i + MIN_SECRET] in dump for i in range(len(value) - MIN_SECRET + 1)), value
    salt, digest = after.conn.execute("SELECT salt, digest FROM inputs WHERE name = 'history'").fetchone()
    assert len(salt) == 16 and digest == known.fingerprint(salt)
    after.close()


async def test_the_same_keys_keep_the_index_and_other_keys_rebuild_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    await write_log(data, QUOTE)
    opened(data, secrets(KEY)).close()
    # A row only the index built before holds: it stays while the key set is the same, in any order
    # of the variables (the digest is of the set).
    with open_projections_db(data) as conn:
        conn.execute("INSERT INTO history_sessions(session_id, project_id) VALUES ('sentinel', NULL)")
    same = opened(data, Secrets({KEY[1]: KEY[0]}))
    assert same.conn.execute("SELECT count(*) FROM history_sessions WHERE session_id = 'sentinel'").fetchone() == (1,)
    assert found(same, "api03") == []
    assert found(same, EIGHT[1]), "the eight-character value is not known yet"
    same.close()
    more = opened(data, secrets(KEY, EIGHT))  # one key more: rebuilt
    assert more.conn.execute("SELECT count(*) FROM history_sessions WHERE session_id = 'sentinel'").fetchone() == (0,)
    assert found(more, EIGHT[1]) == [] and found(more, "api03") == []
    more.close()
    renamed = opened(data, Secrets({KEY[1]: "OTHER_KEY_VARIABLE", EIGHT[1]: EIGHT[0]}))  # another marker
    (item,) = found(renamed, "quokka")
    assert marker("OTHER_KEY_VARIABLE") in HistoryIndex(renamed.conn).read(item)["text"]
    renamed.close()
    none = opened(data, None)  # no keys: the index holds the text as stored, and says so
    assert found(none, "api03")
    assert none.conn.execute("SELECT count(*) FROM inputs").fetchone() == (0,)
    none.close()


async def test_a_rebuild_with_other_keys_beside_a_running_projector_is_undone_at_its_next_fold(
        tmp_path: Path) -> None:
    """`lens log rebuild` run where the keys are not set, beside a daemon that knows them: the
    daemon's projector folds the next events into an index built with its own keys again."""
    data = tmp_path / "data"
    await write_log(data, QUOTE)
    daemon = opened(data, secrets(KEY))
    assert found(daemon, "api03") == []
    other = Projector(LogReader(data), open_projections_db(data), [HistoryProjection(None)])
    other.rebuild()
    other.close()
    assert found(daemon, "api03"), "the rebuild without the key indexed it"
    await write_log(data, "a later numbat")  # (another session's start and input: the next fold)
    daemon.catch_up()
    assert found(daemon, "api03") == []
    assert found(daemon, "quokka") and found(daemon, "numbat")
    daemon.close()


@pytest.mark.parametrize("value, scrubbed", [(EIGHT[1], True), (SEVEN[1], False)],
                         ids=["the minimum length", "one character short"])
async def test_a_key_at_and_below_the_scrubbers_minimum(tmp_path: Path, value: str, scrubbed: bool) -> None:
    data = tmp_path / "data"
    await write_log(data, f"platypus {value} end")
    projector = opened(data, Secrets({value: "LENS_TEST_KEY"}))
    assert bool(found(projector, value)) is not scrubbed
    assert found(projector, "platypus")
    recorded = projector.conn.execute("SELECT count(*) FROM inputs").fetchone()
    assert recorded == ((1,) if scrubbed else (0,))  # a value never scrubbed is no input of the index
    projector.close()


def lens_log(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``lens log ARGS`` as a real process in ``cwd`` (no config file there: the SDKs' two
    variables are the credential variables) with the environment ``env``."""
    return subprocess.run([sys.executable, "-m", "runtime.cli", "log", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


# (another projection only: the history index built without the key is started over all the
# same, as one of another version is, and folded by the next projector that catches up)
@pytest.mark.parametrize("projection", [None, "stats"], ids=["every projection", "another projection only"])
async def test_lens_log_rebuild_forgets_the_keys_of_its_environment_as_the_daemon_does(
        tmp_path: Path, projection: str | None) -> None:
    data = tmp_path / "data"
    await write_log(data, QUOTE)
    base = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    extra = ["--projection", projection] if projection else []
    out = lens_log(tmp_path, base, "rebuild", "--data", str(data), *extra)
    assert out.returncode == 0, out.stderr
    without = opened(data, None)
    assert found(without, "api03")  # no key in its environment: the index holds it as stored
    without.close()

    out = lens_log(tmp_path, {**base, KEY[0]: KEY[1]}, "rebuild", "--data", str(data), *extra)
    assert out.returncode == 0, out.stderr
    assert KEY[1][:MIN_SECRET] not in out.stdout + out.stderr
    # Read as it was left (no fold here: a projector without the key would rebuild it again).
    with open_projections_db(data) as conn:
        index = HistoryIndex(conn)
        assert [h.context_item_id for h in index.search(P, "api03")[0]] == []
        salt, digest = conn.execute("SELECT salt, digest FROM inputs WHERE name = 'history'").fetchone()
        assert digest == secrets(KEY).fingerprint(salt)
    # A daemon started with the same key keeps that index (its digest matches).
    with open_projections_db(data) as conn:
        conn.execute("INSERT INTO history_sessions(session_id, project_id) VALUES ('sentinel', NULL)")
    same = opened(data, secrets(KEY))
    assert same.conn.execute("SELECT count(*) FROM history_sessions WHERE session_id = 'sentinel'").fetchone() == (1,)
    assert found(same, "quokka") and found(same, "api03") == []
    same.close()
