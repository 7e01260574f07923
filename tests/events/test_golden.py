"""Golden stored rows: bytes written by an earlier Lens must decode to the same event forever.

Each ``golden/<kind>.json`` holds one stored row (kind, dict_id, raw_size, body) and the body it
decodes to, generated once by ``golden/make_golden.py`` and committed. These files are never
regenerated: a failure here means a change to events/types.py or the codec broke old logs.

The comparison allows what the evolution rules of events/types.py allow: a field added later
(with a default) shows up in the decoded body with its default value; every recorded field keeps
its value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw
import msgspec
import msgspec.inspect as mi
import pytest

from events.codec import Codec
from events.errors import UnknownDictionary
from events.reader import LogReader
from events.store import open_store
from events.types import KIND_TO_TYPE, Opaque, body_of, kind_of

GOLDEN = Path(__file__).resolve().parent / "golden"
DICT_DIR = GOLDEN / "dictionary"
GOLDEN_FILES = sorted(GOLDEN.glob("*.json"))
MAKE = "python3 tests/events/golden/make_golden.py"


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def plain(value: Any) -> Any:
    """``value`` as the JSON that `lens log decode` would print, read back."""
    return msgspec.json.decode(msgspec.json.encode(value))


def covers(expected: Any, actual: Any, where: str = "body") -> None:
    """Every recorded value is still there, unchanged; dicts may have gained (defaulted) keys."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected an object, got {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{where}.{key} disappeared"
            covers(value, actual[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{where}: {actual!r}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            covers(e, a, f"{where}[{i}]")
    else:
        assert type(actual) is type(expected) and actual == expected, f"{where}: {actual!r} != {expected!r}"


def assert_decodes_as_recorded(golden: dict[str, Any], event: Any) -> None:
    kind = golden["kind"]
    assert not isinstance(event, Opaque), f"{kind} decoded as Opaque: the kind left the union"
    assert kind_of(event) == kind
    assert type(event) is KIND_TO_TYPE[kind]
    decoded = plain(body_of(event))
    expected = golden["expected_body"]
    covers(expected, decoded)
    # top-level keys added since the row was written must be defaulted fields of the event
    fields = {f.name: f for f in mi.type_info(type(event)).fields}
    for extra in set(decoded) - set(expected):
        field = fields[extra]
        assert not field.required, f"{kind}.{extra} is a new required field: old rows lack it"
        default = field.default if field.default is not mi.NODEFAULT else field.default_factory()
        assert decoded[extra] == plain(default)


def test_golden_files_exist() -> None:
    assert len(GOLDEN_FILES) >= 30
    assert (DICT_DIR / "row.json").exists() and (DICT_DIR / "dictionary.zstd-dict").exists()


def test_every_kind_has_a_golden_row() -> None:
    """A kind added to the union must get its golden row in the same change."""
    recorded = {load(p)["kind"] for p in GOLDEN_FILES}
    missing = sorted(set(KIND_TO_TYPE) - recorded)
    assert not missing, f"no golden row for {missing}: run `{MAKE}` and commit the new files"


def test_no_golden_kind_left_the_union() -> None:
    """Tags are never removed or renamed: old rows of that kind would decode as Opaque."""
    recorded = {load(p)["kind"] for p in GOLDEN_FILES}
    assert recorded <= set(KIND_TO_TYPE), sorted(recorded - set(KIND_TO_TYPE))


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=[p.stem for p in GOLDEN_FILES])
def test_golden_row_decodes_as_recorded(path: Path) -> None:
    golden = load(path)
    assert path.stem == golden["kind"]
    assert golden["dict_id"] == 0
    body = bytes.fromhex(golden["body_hex"])
    codec = Codec()
    raw = codec.decompress(body, golden["dict_id"])
    assert len(raw) == golden["raw_size"]
    event = codec.decode(golden["kind"], body, golden["dict_id"])
    assert_decodes_as_recorded(golden, event)
    # and today's encoder writes something that decodes to the same event
    again = codec.encode(event)
    assert codec.decode(again.kind, again.body) == event


def test_golden_dictionary_row_decodes_as_recorded() -> None:
    golden = load(DICT_DIR / "row.json")
    data = (DICT_DIR / "dictionary.zstd-dict").read_bytes()
    dict_id = golden["dict_id"]
    assert dict_id != 0
    body = bytes.fromhex(golden["body_hex"])
    event = Codec(dictionaries={dict_id: data}).decode(golden["kind"], body, dict_id)
    assert_decodes_as_recorded(golden, event)
    with pytest.raises(UnknownDictionary) as info:
        Codec().decode(golden["kind"], body, dict_id)
    assert str(dict_id) in str(info.value)


async def test_golden_rows_read_back_from_a_log(data_dir: Path) -> None:
    """The same rows, as an older Lens would have left them in events.db, through LogReader."""
    async with open_store(data_dir):
        pass
    goldens = [load(p) for p in GOLDEN_FILES] + [load(DICT_DIR / "row.json")]
    conn = apsw.Connection(str(data_dir / "events.db"))
    try:
        with conn:
            conn.execute(
                "INSERT INTO dictionaries(dict_id, data, created_ts, sample_count) VALUES (?, ?, 0, 0)",
                (goldens[-1]["dict_id"], (DICT_DIR / "dictionary.zstd-dict").read_bytes()),
            )
            for seq, g in enumerate(goldens, start=1):
                conn.execute(
                    "INSERT INTO events(seq, ts, session_id, session_seq, kind, dict_id, raw_size, body) "
                    "VALUES (?, ?, 'golden', ?, ?, ?, ?, ?)",
                    (seq, 1_700_000_000_000 + seq, seq, g["kind"], g["dict_id"], g["raw_size"],
                     bytes.fromhex(g["body_hex"])),
                )
    finally:
        conn.close()
    with LogReader(data_dir) as reader:
        events = list(reader.events())
    assert [e.seq for e in events] == list(range(1, len(goldens) + 1))
    for golden, stored in zip(goldens, events):
        assert stored.kind == golden["kind"]
        assert_decodes_as_recorded(golden, stored.event)
        covers(golden["expected_body"], plain(stored.to_json()["body"]))
