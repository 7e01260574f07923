"""Audit of the tool planes against SPEC F-TOOL-2 (tools/catalog.py): each test failed before
its fix. Saved session maps are read entry by entry; the workspace allowlist reads paths as the
executor does; enum restrictions compare JSON values, not Python ones; a call without a ``cwd``
is checked at the root only when it runs a command."""

from __future__ import annotations

import json
from typing import Any

from tools.base import ToolContext, ToolRegistry, ToolResult, ToolSpec
from tools.catalog import ToolCatalog
from tools.catalog_policy import parse_policy_map
from runtime.config import parse_config


async def _ok(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    return ToolResult.text("ran")


def catalog(specs: list[ToolSpec], config: dict[str, Any] | None = None) -> ToolCatalog:
    return ToolCatalog(ToolRegistry(specs), parse_config(json.dumps({"tools": config or {}})).tools)


def spec(name: str, properties: dict[str, Any] | None = None) -> ToolSpec:
    return ToolSpec(name, "", {"type": "object", "properties": properties or {}}, _ok)


async def code(cat: ToolCatalog, name: str, args: dict[str, Any], session: dict[str, Any] | None = None) -> str | None:
    check = cat.check(loaded=[], allowed=None, session=session)
    ctx = ToolContext("p1", "ses_1", "main", None, "call_1", True)
    return (await cat.registry.run(name, json.dumps(args), ctx, check=check)).error_code


def test_a_saved_session_map_applies_entry_by_entry():
    # A saved map over the entry limit (or with one entry that no longer converts) was ignored
    # as a whole: every restriction it held stopped applying, silently.
    cat = catalog([spec("run")])
    saved = {f"x{i}": {"approval": "warn"} for i in range(1500)}
    saved["run"] = {"enabled": False}
    assert cat.profile("run", saved)["enabled"] == {"value": False, "source": "session"}
    saved = {"run": {"enabled": False}, "other": {"enabled": "not a boolean"}}
    assert cat.profile("run", saved)["enabled"] == {"value": False, "source": "session"}
    assert cat.profile("other", saved)["enabled"] == {"value": True, "source": "default"}
    assert parse_policy_map({"run": {"enabled": False}}, "toolPolicy")["run"].enabled is False


async def test_the_allowlist_reads_a_backslash_as_part_of_a_name_as_the_executor_does():
    # "x\..\src\f" was read as "src/f" and let through; the executor (POSIX) creates the file
    # "x\..\src\f" at the workspace root, outside the allowlist.
    cat = catalog([spec("edit", {"path": {"type": "string"}})], {"policy": {"edit": {"workspaceAllowlist": ["src"]}}})
    for bad in ["x\\..\\src\\f", "src\\f", "\\src\\f", "src\\..\\..\\f"]:
        assert await code(cat, "edit", {"path": bad}) == "PATH_NOT_ALLOWED", bad
    for ok in ["src/f", "src/a\\b", "src/x\\..\\..\\f"]:  # (one name below src/, backslashes and all)
        assert await code(cat, "edit", {"path": ok}) is None, ok


async def test_a_call_that_runs_no_command_has_no_cwd_to_check():
    # A tool taking a cwd was checked at the root ("." ) whenever the call gave none, so with an
    # allowlist of "src" the job tool could not even list, read or stop jobs.
    job = spec("job", {"action": {"type": "string"}, "command": {"type": "string"}, "cwd": {"type": "string"},
                       "job_id": {"type": "string"}})
    cat = catalog([job], {"policy": {"job": {"workspaceAllowlist": ["src"]}}})
    assert await code(cat, "job", {"action": "list"}) is None
    assert await code(cat, "job", {"action": "read", "job_id": "j1"}) is None
    assert await code(cat, "job", {"action": "start", "command": "make"}) == "PATH_NOT_ALLOWED"  # (runs at the root)
    assert await code(cat, "job", {"action": "start", "command": "make", "cwd": "src"}) is None


async def test_an_enum_restriction_compares_json_values():
    # Python's == let true through an enum of [1] and false through [0] (also inside lists).
    cat = catalog([spec("t")], {"policy": {"t": {"paramRestrictions": {
        "n": {"enum": [0, 1]}, "flag": {"enum": [True]}, "pair": {"enum": [[1, 2]]}, "obj": {"enum": [{"a": 1}]}}}}})
    for bad in [{"n": True}, {"n": False}, {"n": "1"}, {"flag": 1}, {"pair": [True, 2]}, {"obj": {"a": True}},
                {"obj": {"a": 1, "b": 2}}]:
        assert await code(cat, "t", bad) == "PARAM_NOT_ALLOWED", bad
    for ok in [{"n": 0}, {"n": 1}, {"n": 1.0}, {"flag": True}, {"pair": [1, 2.0]}, {"obj": {"a": 1}}]:
        assert await code(cat, "t", ok) is None, ok


def test_a_config_enum_past_64_bits_is_refused_like_a_session_one():
    import pytest

    from runtime.config import ConfigError

    with pytest.raises(ConfigError, match=r"tools.policy.t.paramRestrictions.n.enum: the values contain an integer outside 64 bits"):
        parse_config('{"tools": {"policy": {"t": {"paramRestrictions": {"n": {"enum": [18446744073709551616]}}}}}}')
    parse_config('{"tools": {"policy": {"t": {"paramRestrictions": {"n": {"enum": [9223372036854775807]}}}}}}')
