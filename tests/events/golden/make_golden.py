"""Write the golden stored rows of tests/events/golden/ — once per kind, never again.

    python3 tests/events/golden/make_golden.py

For every kind of ``events.types`` that has no golden file yet, build one event whose fields all
hold a non-default value, encode it with the codec of today and write ``<kind>.json``:

    {"kind", "dict_id", "raw_size", "body_hex", "expected_body"}

``expected_body`` is the decoded body as ``lens log decode`` prints it. Existing files are never
rewritten: they record bytes an older Lens wrote, which every later Lens must still decode
(tests/events/test_golden.py). The same goes for ``dictionary/``: one dictionary-compressed row
plus the dictionary it needs, written the first time only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi

from events.codec import Codec, train_dictionary
from events.types import KIND_TO_TYPE, body_of

HERE = Path(__file__).resolve().parent
DICT_DIR = HERE / "dictionary"


def sample(t: mi.Type, name: str, default: Any = mi.NODEFAULT) -> Any:
    """A deterministic value of type ``t`` for field ``name``, different from ``default``."""
    if isinstance(t, mi.StrType):
        return f"{name}: héllo ✓"
    if isinstance(t, mi.BoolType):
        return not default if isinstance(default, bool) else True
    if isinstance(t, mi.IntType):
        return 4_294_967_297  # needs 64 bits
    if isinstance(t, mi.FloatType):
        return 1.5
    if isinstance(t, mi.AnyType):
        return {"nested": [1, -2, "three", None, True, {"deep": 2.5}]}
    if isinstance(t, mi.LiteralType):
        return [v for v in t.values if v != default][-1]
    if isinstance(t, mi.UnionType):
        members = [m for m in t.types if not isinstance(m, mi.NoneType)]
        return sample(members[0], name)
    if isinstance(t, mi.ListType):
        item = t.item_type
        if isinstance(item, mi.UnionType):  # one of each member, e.g. text and image parts
            return [sample(m, name) for m in item.types if not isinstance(m, mi.NoneType)]
        return [sample(item, f"{name}[0]"), sample(item, f"{name}[1]")]
    if isinstance(t, mi.DictType):
        return {"alpha": sample(t.value_type, f"{name}.alpha"), "beta": sample(t.value_type, f"{name}.beta")}
    if isinstance(t, mi.StructType):
        return t.cls(**{f.name: sample(f.type, f.name, f.default) for f in t.fields})
    raise TypeError(f"no sample for msgspec type {t!r}: extend sample()")


def row(codec: Codec, event: Any) -> dict[str, Any]:
    encoded = codec.encode(event)
    assert codec.decode(encoded.kind, encoded.body, encoded.dict_id) == event
    return {
        "kind": encoded.kind,
        "dict_id": encoded.dict_id,
        "raw_size": encoded.raw_size,
        "body_hex": encoded.body.hex(),
        "expected_body": msgspec.to_builtins(body_of(event)),
    }


def write_new(path: Path, content: Any, binary: bool = False) -> bool:
    if path.exists():
        return False
    if binary:
        path.write_bytes(content)
    else:
        path.write_text(json.dumps(content, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    return True


def main() -> int:
    codec = Codec()
    events = {kind: sample(mi.type_info(cls), kind) for kind, cls in sorted(KIND_TO_TYPE.items())}
    written = [kind for kind, event in events.items() if write_new(HERE / f"{kind}.json", row(codec, event))]

    DICT_DIR.mkdir(exist_ok=True)
    dict_path, row_path = DICT_DIR / "dictionary.zstd-dict", DICT_DIR / "row.json"
    if not dict_path.exists() and not row_path.exists():
        samples = [codec.pack(e) for e in events.values()] * 4
        dict_id, data = train_dictionary(samples, size=4096)
        with_dict = Codec(dictionaries={dict_id: data}, active_dict_id=dict_id)
        write_new(dict_path, data, binary=True)
        write_new(row_path, row(with_dict, events["model.responded"]))
        written.append("dictionary/")
    print(f"wrote {len(written)} golden files: {', '.join(written) or 'none (all present)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
