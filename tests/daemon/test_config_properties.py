"""The config model by property testing: SPEC section 9's keys (and F-TOOL-5's MCP servers) at
wrong types and at the edges of their ranges, unknown keys at every depth.

Generated configs go through what ``lens serve`` runs on its file before anything is made
(:func:`~runtime.config.load_config`, then :func:`~runtime.startcheck.check_startable`); a
refusal is one ``CONFIG_INVALID`` naming the key, a valid config loads (unknown keys named in a
start-up note: a newer config must not stop an older daemon). A handful of the same cases run
through the real ``lens serve --config F --port 0`` process for its exit path.
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runtime.config import ConfigError, load_config
from runtime.startcheck import check_startable

from .conftest import ServeProcess, run_lens, served_once

FAST = settings(deadline=None, derandomize=True, max_examples=200, suppress_health_check=[HealthCheck.too_slow])

# SPEC section 9's example, as a config a daemon starts from.
BASE: dict[str, Any] = {
    "server": {"host": "127.0.0.1", "port": 7420},
    "dataDir": ".lens",
    "providers": [
        {"id": "local", "protocol": "openai-chat", "baseUrl": "http://127.0.0.1:11434/v1",
         "apiKeyEnv": "LOCAL_API_KEY", "models": [{"id": "qwen3", "contextWindow": 131072, "images": False}]},
    ],
    "defaultModel": "local/qwen3",
}

# Every key of the section's list, with the JSON type it takes ("str?": a string or null).
KEYS: list[tuple[tuple[str | int, ...], str]] = [
    (("server",), "object"),
    (("server", "host"), "str"),
    (("server", "port"), "int"),
    (("dataDir",), "str"),
    (("providers",), "list"),
    (("providers", 0), "object"),
    (("providers", 0, "id"), "str"),
    (("providers", 0, "protocol"), "str"),
    (("providers", 0, "baseUrl"), "str?"),
    (("providers", 0, "apiKeyEnv"), "str?"),
    (("providers", 0, "models"), "list"),
    (("providers", 0, "models", 0), "object"),
    (("providers", 0, "models", 0, "id"), "str"),
    (("providers", 0, "models", 0, "contextWindow"), "int"),
    (("providers", 0, "models", 0, "images"), "bool"),
    (("defaultModel",), "str?"),
]
# (key, lowest, highest or None): at each limit the config loads, one past it is refused.
RANGES: list[tuple[tuple[str | int, ...], int, int | None]] = [
    (("server", "port"), 0, 65535),
    (("providers", 0, "models", 0, "contextWindow"), 1, None),
    (("providers", 0, "models", 0, "maxOutputTokens"), 1, None),
    (("providers", 0, "timeoutSeconds"), 1, 86400),
    (("providers", 0, "maxRetries"), 0, 10),
]
OTHERS = [None, True, False, 0, -1, 7, 1.5, 2**64, "", "x", [], [1], {}, {"a": 1}]
KNOWN = {"server", "dataDir", "providers", "defaultModel", "host", "port", "id", "protocol", "baseUrl", "apiKeyEnv",
         "models", "contextWindow", "images", "enabled", "script", "timeoutSeconds", "maxRetries", "cacheTtl",
         "explicitCache", "maxOutputTokens", "maxBodyBytes", "heartbeatSeconds", "sseBufferEvents",
         "maxPendingPairings", "pairFile", "log", "sessions", "executor", "web", "webSearch", "context", "mcpServers",
         "tools", "localPtc"}


# F-TOOL-5: MCP servers by name, a map msgspec showed as `[...]` (which server's `command`?).
MCP_BASE: dict[str, Any] = {**BASE, "mcpServers": {
    "docs": {"command": "docs-server"},
    "search": {"command": "search-server", "args": ["--stdio"], "env": {"REGION": "eu"}, "envFrom": ["HOME"]}}}
MCP_KEYS: list[tuple[tuple[str | int, ...], str, str]] = [
    (("mcpServers",), "object", "mcpServers"),
    (("mcpServers", "search"), "object", "mcpServers['search']"),
    (("mcpServers", "search", "command"), "str", "mcpServers['search'].command"),
    (("mcpServers", "search", "args"), "list", "mcpServers['search'].args"),
    (("mcpServers", "search", "env"), "object", "mcpServers['search'].env"),
    (("mcpServers", "search", "env", "REGION"), "str", "mcpServers['search'].env['REGION']"),
    (("mcpServers", "search", "envFrom"), "list", "mcpServers['search'].envFrom"),
    (("mcpServers", "search", "enabled"), "bool", "mcpServers['search'].enabled"),
    (("mcpServers", "search", "cwd"), "str?", "mcpServers['search'].cwd"),
]
MCP_RANGES = [("startupTimeoutSeconds", 0.1, 3600), ("callTimeoutSeconds", 0.1, 86400), ("maxRestarts", 0, 100)]


def wrong_for(kind: str, value: Any) -> bool:
    if kind == "object":
        return not isinstance(value, dict)
    if kind == "list":
        return not isinstance(value, list)
    if kind == "bool":
        return not isinstance(value, bool)
    if kind == "int":
        return isinstance(value, bool) or not isinstance(value, int)
    return not (isinstance(value, str) or (kind == "str?" and value is None))


def dotted(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def with_value(path: tuple[str | int, ...], value: Any, base: dict[str, Any] = BASE) -> dict[str, Any]:
    cfg = copy.deepcopy(base)
    node: Any = cfg
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return cfg


def start_checks(text: str) -> list[str]:
    """What ``lens serve --config F`` checks before anything is made; returns its notes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lens.jsonc"
        path.write_text(text)
        cfg, path, notes = load_config(path)
        check_startable(cfg, path, str(path))
        return notes


def refused(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        start_checks(text)
    assert info.value.code == "CONFIG_INVALID"
    return info.value.message


def test_the_specs_example_loads_as_it_is() -> None:
    assert start_checks(json.dumps(BASE)) == []


@FAST
@given(st.sampled_from(KEYS), st.sampled_from(OTHERS))
def test_a_key_of_the_wrong_type_is_refused_naming_the_key(key: tuple[tuple[str | int, ...], str], value: Any) -> None:
    path, kind = key
    text = json.dumps(with_value(path, value))
    if wrong_for(kind, value):
        message = refused(text)
        assert dotted(path) in message, (path, value, message)
    else:
        try:
            start_checks(text)
        except ConfigError as exc:  # a value of the right type that is still no good names its key too
            name = next(p for p in reversed(path) if isinstance(p, str))
            assert name in exc.message, (path, value, exc.message)


@FAST
@given(st.sampled_from(RANGES), st.sampled_from(["lo", "hi", "below", "above"]), st.booleans())
def test_numbers_load_at_their_limits_and_are_refused_one_past(case: tuple[tuple[str | int, ...], int, int | None],
                                                               where: str, as_float: bool) -> None:
    path, lo, hi = case
    value = {"lo": lo, "below": lo - 1, "hi": hi if hi is not None else 2**64,
             "above": hi + 1 if hi is not None else None}[where]
    if value is None:
        return
    integer = path[-1] in ("port", "contextWindow", "maxOutputTokens", "maxRetries")
    text = json.dumps(with_value(path, float(value) if as_float and not integer else value))
    if where in ("lo", "hi"):
        start_checks(text)
    else:
        assert str(path[-1]) in refused(text)


@FAST
@given(st.sampled_from(MCP_KEYS), st.sampled_from(OTHERS))
def test_an_mcp_server_key_of_the_wrong_type_is_refused_naming_the_server(key: tuple[tuple[str, ...], str, str],
                                                                         value: Any) -> None:
    path, kind, shown = key
    text = json.dumps(with_value(path, value, MCP_BASE))
    if wrong_for(kind, value):
        message = refused(text)
        assert shown in message, (path, value, message)
    else:
        try:
            start_checks(text)
        except ConfigError as exc:
            assert "'search'" in exc.message or "mcpServers" in exc.message, exc.message


@FAST
@given(st.sampled_from(MCP_RANGES), st.sampled_from(["lo", "hi", "below", "above"]))
def test_mcp_server_numbers_load_at_their_limits_and_are_refused_one_past(case: tuple[str, float, float],
                                                                          where: str) -> None:
    key, lo, hi = case
    step = 1 if isinstance(lo, int) else 0.01
    value = {"lo": lo, "hi": hi, "below": lo - step, "above": hi + step}[where]
    text = json.dumps(with_value(("mcpServers", "search", key), value, MCP_BASE))
    if where in ("lo", "hi"):
        start_checks(text)
    else:
        assert f"mcpServers['search']: {key} must be" in refused(text)


ODD = st.sampled_from(["", "", "\u200b", "\uff41", "\u0663", "%zz", " ", "\x00", "\x07", "\t", "\\", "é", "-", "_",
                       ".", "@", "?", "#", ":"])
URLS = st.tuples(st.sampled_from(["http://", "https://", "ftp://", ""]), ODD,
                 st.sampled_from(["127.0.0.1", "[::1]", "[zz]", "llm.lan", "bücher.de", ""]), ODD,
                 st.sampled_from(["", ":8080", ":99999", ":"]), st.sampled_from(["", "/", "/v1"]), ODD).map("".join)


@FAST
@given(URLS)
@example("http://u:p@127.0.0.1:8080/v1")
@example("https://u@llm.lan")
def test_a_base_url_is_refused_naming_it_or_one_the_sdks_client_can_send_to(url: str) -> None:
    import httpx2

    text = json.dumps(with_value(("providers", 0, "baseUrl"), url))
    try:
        start_checks(text)
    except ConfigError as exc:
        assert "baseUrl" in exc.message, exc.message
        return
    base = httpx2.URL(url)  # as the SDKs join a route to it, and send
    assert not base.userinfo, url  # (which the client would send as Basic auth instead of the key)
    httpx2.Request("POST", base.copy_with(raw_path=base.raw_path.rstrip(b"/") + b"/chat/completions"))


KEY_NAMES = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)
NESTED = st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=5)),
                      lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEY_NAMES, inner, max_size=3)),
                      max_leaves=8)


@FAST
@given(st.sampled_from([(), ("server",), ("providers", 0), ("providers", 0, "models", 0)]), KEY_NAMES, NESTED)
def test_unknown_keys_at_any_depth_load_and_are_named(where: tuple[str | int, ...], name: str, value: Any) -> None:
    if name in KNOWN:
        return
    cfg = copy.deepcopy(BASE)
    node: Any = cfg
    for p in where:
        node = node[p]
    node[name] = value
    notes = start_checks(json.dumps(cfg))
    assert len(notes) == 1 and "ignoring unknown keys" in notes[0], notes
    assert f"{dotted(where)}.{name}".lstrip(".") in notes[0], notes


def serve_refused(out: Any, *words: str) -> None:
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lens: CONFIG_INVALID: c.jsonc: "), out.stderr
    for w in words:
        assert w in lines[0], (w, out.stderr)


@pytest.mark.parametrize(("text", "words"), [
    (json.dumps(with_value(("server", "port"), "7420")), ["server.port"]),
    (json.dumps(with_value(("providers", 0, "models", 0, "contextWindow"), 0)), ["contextWindow"]),
    (json.dumps(with_value(("server", "port"), 65536)), ["server.port must be 0 to 65535, not 65536"]),
    # (a value is shown up to 80 characters, as a client's names are: 400 digits were echoed whole)
    (json.dumps(with_value(("server", "port"), int("9" * 400))), ["server.port must be 0 to 65535, not " + "9" * 80 + "…"]),
    ('{"server": {"port": 1e400}}', ["1e400 is out of range at line 1, column 21"]),
    ('{"dataDir": "a",\n "dataDir": "b"}', ["duplicate key 'dataDir' at line 2, column 2"]),
    ('{"providers": ' + "[" * 200 + "]" * 200 + "}", ["nested deeper than 200"]),
    (json.dumps(with_value(("mcpServers", "search", "command"), 7, MCP_BASE)),
     ["Expected `str`, got `int` - at `$.mcpServers['search'].command`"]),
    # (an object that takes no unknown key refuses one, naming the key meant)
    (json.dumps(with_value(("localPtc",), {"enabeld": True})),
     ['Object contains unknown field `enabeld` - at `$.localPtc` (did you mean "enabled"?)']),
], ids=["wrong-type", "context-window-0", "port-past", "port-of-400-digits", "1e400", "duplicate", "too-deep", "mcp-server-by-name",
        "misspelt-key-of-a-strict-object"])
async def test_lens_serve_refuses_with_one_line_naming_the_key(tmp_path: Path, text: str, words: list[str]) -> None:
    (tmp_path / "c.jsonc").write_text(text)
    out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "d", check=False)
    serve_refused(out, *words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonc"]


async def test_lens_serve_starts_from_a_valid_config_with_unknown_keys_named(tmp_path: Path) -> None:
    cfg = with_value(("server", "later"), {"nested": {"deeper": [1, {"x": None}]}})
    cfg["providers"][0]["models"][0]["futureFlag"] = True
    cfg["providers"][0]["models"][0]["contextWindw"] = 1000  # (misspelt: named with the key meant)
    (tmp_path / "c.jsonc").write_text("\ufeff// edited by hand\n" + json.dumps(cfg, indent=2)[:-1] + ",\n}\n")
    proc = ServeProcess(tmp_path, "--config", "c.jsonc")
    async with served_once(proc):
        pass
    note = next(line for line in proc.lines if "ignoring unknown keys" in line)
    assert "providers[0].models[0].futureFlag, " in note and "server.later" in note, note
    assert 'providers[0].models[0].contextWindw (did you mean "contextWindow"?)' in note, note
