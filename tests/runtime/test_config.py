"""Config validation: every number in a range that keeps the daemon usable, checked at its edges;
hosts, paths and model ids checked for shape. The same check runs at start-up and on every
``PUT /config/files/lens.jsonc`` (see tests/daemon/test_configfiles.py)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from runtime.config import (ConfigError, check_config_file_mode, check_private_config_file, config_directories,
                            config_place_problem, parse_config, split_model_ref)

# (section, key, lowest, highest, step past the edge)
RANGES = [
    ("server", "port", 0, 65535, 1),
    ("server", "maxBodyBytes", 64 * 1024, 1024**3, 1),
    ("server", "heartbeatSeconds", 0.1, 86400, 0.01),
    ("server", "sseBufferEvents", 1, 10_000_000, 1),
    ("server", "maxPendingPairings", 1, 100_000, 1),
    ("log", "maxEventBytes", 64 * 1024, 1024**3, 1),
    ("log", "compressionLevel", 1, 22, 1),
    ("sessions", "idleSeconds", 0.1, 365 * 86400, 0.01),
    ("sessions", "snapshotEvery", 1, 10_000_000, 1),
    ("sessions", "maxRestarts", 0, 1000, 1),
]


def cfg(**sections: Any) -> str:
    return json.dumps(sections)


@pytest.mark.parametrize(("section", "key", "lo", "hi", "step"), RANGES, ids=[f"{s}.{k}" for s, k, *_ in RANGES])
def test_numbers_are_accepted_exactly_at_their_edges_and_refused_one_step_past(section: str, key: str, lo: float,
                                                                               hi: float, step: float) -> None:
    for ok in (lo, hi):
        parse_config(cfg(**{section: {key: ok}}))
    for bad in (lo - step, hi + step):
        with pytest.raises(ConfigError) as info:
            parse_config(cfg(**{section: {key: bad}}))
        assert info.value.code == "CONFIG_INVALID", bad
        assert f"{section}.{key} must be {lo} to {hi}, not {bad!r}" in info.value.message, info.value.message


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::1", "[::1]", "::", "localhost", "lens.example.com",
                                  "example.com.", "a" * 63 + ".org"])
def test_hosts_that_can_be_bound(host: str) -> None:
    assert parse_config(cfg(server={"host": host})).server.host == host


@pytest.mark.parametrize("host", ["", "not a host", "a..b", "-x.com", "x_y.com", "host:80", "a" * 64 + ".org",
                                  "1.2.3.4.5" + ".x" * 200, "[127.0.0.1", "127.0.0.1\n"])
def test_hosts_that_cannot(host: str) -> None:
    with pytest.raises(ConfigError, match="server.host"):
        parse_config(cfg(server={"host": host}))


@pytest.mark.parametrize(("body", "words"), [
    ({"dataDir": ""}, "dataDir"),
    ({"dataDir": "a\0b"}, "dataDir"),
    ({"defaultModel": "faux/"}, "defaultModel"),
    ({"defaultModel": "/echo"}, "defaultModel"),
    ({"defaultModel": "echo"}, "defaultModel"),
    ({"providers": [{"id": "p", "protocol": "faux", "models": [{"id": "m", "contextWindow": 0}]}]}, "contextWindow"),
])
def test_paths_and_model_ids_are_checked(body: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_config(json.dumps(body))


@pytest.mark.parametrize("value", ["", "faux", "faux/", "/faux-1"])
def test_a_default_model_that_names_no_model_is_refused_naming_it(value: str) -> None:
    """``"defaultModel": ""`` was taken for null: the daemon started on the built-in
    ``faux/faux-1`` without a word, as if the key were absent. Only null (or leaving the key
    out) means "no default"; any string must be ``<provider id>/<model id>``."""
    with pytest.raises(ConfigError) as info:
        parse_config(json.dumps({"defaultModel": value}), "c.jsonc")
    assert info.value.code == "CONFIG_INVALID"
    assert info.value.message == f"c.jsonc: defaultModel must be '<provider id>/<model id>', not {value!r}", \
        info.value.message
    assert parse_config(json.dumps({"defaultModel": None}), "c.jsonc").default_model is None


def test_nesting_past_the_limit_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="nested deeper than 200 arrays and objects at line 1, column 211"):
        parse_config('{"server": ' + "[" * 5000 + "]" * 5000 + "}")


@pytest.mark.parametrize(("body", "words"), [
    ({"mcpServers": {"docs": {"command": "d"}, "search": {"command": 7}}}, "at `$.mcpServers['search'].command`"),
    ({"mcpServers": {"docs": {"command": "d", "env": {"A": "1", "B": None}}}}, "at `$.mcpServers['docs'].env['B']`"),
    ({"mcpServers": {"docs": {}}}, "Object missing required field `command` - at `$.mcpServers['docs']`"),
    ({"tools": {"policy": {"read_file": {"approval": 3}}}},
     "Expected `str | null`, got `int` - at `$.tools.policy['read_file'].approval`"),
    ({"mcpServers": {"s": {"command": "d"}}, "server": {"port": "1"}}, "at `$.server.port`"),
])
def test_a_value_of_the_wrong_type_in_a_map_names_its_key(body: dict, words: str) -> None:
    # msgspec shows a map's keys as `[...]`: "at `$.mcpServers[...].command`" did not say which
    # server's command, with several configured.
    with pytest.raises(ConfigError) as info:
        parse_config(json.dumps(body))
    assert words in info.value.message and "[...]" not in info.value.message, info.value.message


def test_defaults_pass_their_own_check() -> None:
    assert parse_config("{}") is not None


@pytest.mark.parametrize(("text", "value"), [("[1,]", [1]), ('{"a": 1,}', {"a": 1}), ("// c\n[1, /* x */ 2,\n]", [1, 2]),
                                             ('["a,]", "b",]', ["a,]", "b"])])
def test_jsonc_takes_comments_and_trailing_commas(text: str, value: object) -> None:
    from runtime import jsonc

    assert jsonc.loads(text) == value


@pytest.mark.parametrize(("text", "where"), [("[,]", "line 1, column 2"), ("{,}", "line 1, column 2"),
                                             ("[1,,]", "line 1, column 4"),
                                             ('{\n  "a": 1,\n  "b": x\n}', "line 3, column 8"),
                                             ('// é\n["é", x]', "line 2, column 7"),
                                             ('{"a": 1} x', "line 1, column 10"),
                                             ('1 2', "line 1, column 3"),
                                             ('[1]\n/* é */ ]', "line 2, column 9"),
                                             ('{"é": 1}x', "line 1, column 9")])
def test_jsonc_errors_say_where_the_problem_is(text: str, where: str) -> None:
    # `[,]` and `{,}` were read as empty (the comma taken for a trailing one); errors said "byte N";
    # trailing characters were placed one column to the right (msgspec names the byte after).
    from runtime import jsonc

    with pytest.raises(jsonc.JsoncError) as info:
        jsonc.loads(text)
    assert where in str(info.value) and "byte" not in str(info.value)


def test_unknown_keys_are_named_at_any_depth(tmp_path) -> None:
    # Only top-level keys were noted: a typo such as server.prot or providers[].apikeyEnv was
    # dropped without a word (the provider then looked available with no key).
    from runtime.config import load_config

    path = tmp_path / "lens.jsonc"
    path.write_text('{"server": {"prot": 1, "port": 2}, "zzz": 1, "providers": [{"id": "x", "protocol": "faux", '
                    '"apikeyEnv": "K", "models": [{"id": "m", "ctx": 1}]}]}')
    cfg, _, notes = load_config(path)
    assert cfg.server.port == 2 and cfg.providers[0].api_key_env is None
    text = " ".join(notes)
    for key in ("server.prot", "zzz", "providers[0].apikeyEnv", "providers[0].models[0].ctx"):
        assert key in text, (key, notes)
    assert "server.port" not in text


def test_the_unknown_keys_note_lists_a_few_keys_whole_and_cuts_many_or_long_ones(tmp_path) -> None:
    # The note listed every unknown key whole, however many and however long: a file with 3,000
    # of them and one of 5,000 characters made one start-up line of some 25,000 characters.
    from runtime.config import load_config

    path = tmp_path / "lens.jsonc"
    path.write_text('{"zzz": 1, "server": {"prot": 1}}')
    assert load_config(path)[2] == [f'{path}: ignoring unknown keys server.prot (did you mean "port"?), zzz']
    path.write_text(json.dumps({"a" + "x" * 5000: 1, **{f"k{i:04}": 1 for i in range(3000)}}))
    (note,) = load_config(path)[2]
    listed = note.removeprefix(f"{path}: ignoring unknown keys ")
    assert listed.startswith("a" + "x" * 79 + "…, k0000, k0001, "), note[:200]
    shown, _, more = listed.rpartition(" and ")
    assert more.endswith(" more") and len(shown.split(", ")) + int(more.removesuffix(" more")) == 3001, note
    assert len(shown) <= 400 + 80, len(shown)


def test_the_unknown_keys_note_names_the_key_each_may_have_meant(tmp_path) -> None:
    # A misspelt key was named without the key meant: `contextWindw` was "ignoring unknown keys
    # providers[0].models[0].contextWindw", and the user had to find `contextWindow` elsewhere.
    from runtime.config import load_config

    path = tmp_path / "lens.jsonc"
    path.write_text(json.dumps({
        "provders": [], "DataDir": "d", "zzz": 1,
        "mcpServers": {"docs": {"command": "x", "comand": "y", "startupTimeout": 5}},
    }))
    assert load_config(path)[2] == [f"{path}: ignoring unknown keys "
                                    'DataDir (did you mean "dataDir"?), '
                                    'mcpServers.docs.comand (did you mean "command"?), '
                                    'mcpServers.docs.startupTimeout (did you mean "startupTimeoutSeconds"?), '
                                    'provders (did you mean "providers"?), zzz']
    path.write_text(json.dumps({"providers": [{
        "id": "x", "protocol": "faux", "api_key_env": "K",
        "models": [{"id": "m", "contextWindw": 1, "ctx": 2, "ContextWindow": 3}]}]}))
    assert load_config(path)[2] == [f"{path}: ignoring unknown keys "
                                    'providers[0].api_key_env (did you mean "apiKeyEnv"?), '
                                    'providers[0].models[0].ContextWindow (did you mean "contextWindow"?), '
                                    'providers[0].models[0].contextWindw (did you mean "contextWindow"?), '
                                    "providers[0].models[0].ctx"]


def test_a_number_out_of_range_is_shown_up_to_80_characters(tmp_path) -> None:
    # A port of 400 digits was echoed whole in its error, and so was an MCP server's number.
    for text, words in [
        (cfg(server={"port": 70000}), "server.port must be 0 to 65535, not 70000"),
        (cfg(server={"port": int("9" * 400)}), "server.port must be 0 to 65535, not " + "9" * 80 + "…"),
        (cfg(mcpServers={"s": {"command": "x", "maxRestarts": 101}}), "maxRestarts must be 0 to 100, not 101"),
        (cfg(mcpServers={"s": {"command": "x", "maxRestarts": int("9" * 400)}}),
         "maxRestarts must be 0 to 100, not " + "9" * 80 + "…"),
    ]:
        with pytest.raises(ConfigError) as info:
            parse_config(text, "c.jsonc")
        assert info.value.message.endswith(words), info.value.message[:300]


def test_a_config_link_to_nothing_is_an_error_not_the_defaults(tmp_path) -> None:
    from runtime.config import ConfigError, load_config

    path = tmp_path / "lens.jsonc"
    path.symlink_to(tmp_path / "moved-away.jsonc")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "cannot read config file" in info.value.message


@pytest.mark.parametrize(("key", "lo", "hi", "step"), [("timeoutSeconds", 1, 86400, 0.01), ("maxRetries", 0, 10, 1)])
def test_provider_timeout_and_retries_are_accepted_at_their_edges_and_refused_past(key: str, lo: float, hi: float,
                                                                                    step: float) -> None:
    def provider(value: float) -> str:
        return cfg(providers=[{"id": "faux2", "protocol": "faux"}, {"id": "x", "protocol": "openai-chat", key: value}])

    for ok in (lo, hi):
        parsed = parse_config(provider(ok))
        assert getattr(parsed.providers[1], "timeout_seconds" if key == "timeoutSeconds" else "max_retries") == ok
    for bad in (lo - step, hi + step):
        with pytest.raises(ConfigError) as info:
            parse_config(provider(bad))
        assert f"providers[1].{key} must be" in info.value.message, bad


@pytest.mark.parametrize("url", ["", "ftp://host/v1", "127.0.0.1:11434/v1", "not a url", "http://", "http://h:99999/v1",
                                 "http://127.0.0.1:9/v1\x07", "http://a\x00b/v1", "http://a\u200b.com/v1",
                                 "http://\uff41.com/v1", "http://\u0663.com/v1"])
def test_a_base_url_that_is_no_http_url_is_refused(url: str) -> None:
    # Accepted before: "" then meant the vendor's public API (a "local" provider's prompts went
    # there), the others failed every request as a retried CONNECTION_FAILED. A control character
    # or a host IDNA refuses (a zero-width space, a full-width letter) passed too, and every
    # request then raised InvalidURL from the SDK: the session's actor crashed, then quarantined.
    with pytest.raises(ConfigError) as info:
        parse_config(cfg(providers=[{"id": "local", "protocol": "openai-chat", "baseUrl": url}]))
    assert f"provider 'local': baseUrl must be an http:// or https:// URL with a host, not {url!r}" in info.value.message


def test_base_urls_that_are_http_urls_are_accepted() -> None:
    for url in ("http://127.0.0.1:11434/v1", "https://api.example.com", "http://[::1]:8080/v1", "http://llm.lan/v1",
                "http://bücher.example/v1", "http://xn--bcher-kva.example/v1"):
        assert parse_config(cfg(providers=[{"id": "p", "protocol": "openai-chat", "baseUrl": url}])).providers[0].base_url == url


@pytest.mark.parametrize("url", ["https://alice:S3cretPw@api.example.com/v1", "http://alice@127.0.0.1:11434/v1",
                                 "http://:S3cretPw@[::1]:8080/v1", "https://@api.example.com", "https://a@b:S3cretPw@x.example/v1",
                                 "HTTPS://alice:S3cretPw@API.example.com", "http://alice:S3cretPw@b\u00fccher.example/v1"])
@pytest.mark.parametrize("protocol", ["openai-chat", "openai-responses", "anthropic"])
def test_a_base_url_with_credentials_is_refused_without_quoting_them(url: str, protocol: str) -> None:
    # Accepted before: the password sat in the config file (which the config-file API serves),
    # and the SDKs' HTTP client sent `user:password` as Basic auth in place of the key's header,
    # so the key of `apiKeyEnv` was never sent. Keys come only from the environment (F-MOD-6).
    with pytest.raises(ConfigError) as info:
        parse_config(cfg(providers=[{"id": "p", "protocol": protocol, "baseUrl": url, "apiKeyEnv": "K"}]), "c.jsonc")
    message = info.value.message
    assert message == ("c.jsonc: provider 'p': baseUrl must not carry a user name or password (user:pass@host): "
                       "a key comes only from the environment variable apiKeyEnv names"), message
    assert "S3cretPw" not in message and "alice" not in message


@pytest.mark.parametrize("models", [[{"id": ""}], [{"id": "m"}, {"id": "m"}]])
def test_model_ids_are_non_empty_and_unique(models: list) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(cfg(providers=[{"id": "p", "protocol": "openai-chat", "models": models}]))
    assert "provider 'p': model ids must be non-empty and unique" in info.value.message


@pytest.mark.parametrize("address", ["127.0.0.1:7421", "executor.example.com:1", "[::1]:65535", "localhost:443"])
def test_executor_addresses_that_can_be_dialled(address: str) -> None:
    assert parse_config(cfg(executor={"address": address, "tokenEnv": "TOK"})).executor.address == address


@pytest.mark.parametrize("address", ["alice:S3cretPw@127.0.0.1:7421", "grpc://alice:S3cretPw@executor.example:1",
                                     "S3cretPw@[::1]:65535", "alice:S3cretPw@host:port"])
def test_an_executor_address_with_credentials_is_refused_without_quoting_them(address: str) -> None:
    # The refusal quoted the address as written, the password with it (in the answer to a config
    # write and in `lens serve`'s error); the token comes from tokenEnv.
    with pytest.raises(ConfigError) as info:
        parse_config(cfg(executor={"address": address, "tokenEnv": "TOK"}))
    message = info.value.message
    assert "executor.address must be 'host:port' with a port from 1 to 65535, without a user name or password, " \
           f"not {address.rpartition('@')[2]!r}" in message, message
    assert "S3cretPw" not in message and "alice" not in message


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:", ":7421", "::1:7421",
                                     "host:port", "a b:1", "127.0.0.1:+80", "127.0.0.1:٣", "", "127.0.0.1:000001"])
def test_executor_addresses_that_cannot(address: str) -> None:
    # These were accepted at start and by PUT, and failed later as EXECUTOR_UNAVAILABLE warnings.
    with pytest.raises(ConfigError) as info:
        parse_config(cfg(executor={"address": address, "tokenEnv": "TOK"}))
    assert "executor.address must be 'host:port' with a port from 1 to 65535" in info.value.message


def test_web_keys_default_to_public_addresses_only_and_the_exa_backend() -> None:
    c = parse_config("{}")
    assert c.web.allow_private_addresses is False and c.web.allowed_private_networks == []
    assert (c.web_search.base_url, c.web_search.api_key_env) == ("https://api.exa.ai", "EXA_API_KEY")
    c = parse_config(cfg(web={"allowPrivateAddresses": True, "allowedPrivateNetworks": ["10.0.0.0/8", "fd00::/8",
                                                                                       "127.0.0.2"]},
                         webSearch={"baseUrl": None, "apiKeyEnv": None}))
    assert c.web.allow_private_addresses and c.web.allowed_private_networks == ["10.0.0.0/8", "fd00::/8", "127.0.0.2"]
    assert c.web_search.base_url is None and c.web_search.api_key_env is None


@pytest.mark.parametrize(("body", "words"), [
    ({"web": {"allowedPrivateNetworks": ["10.0.0.0/33"]}}, "web.allowedPrivateNetworks"),
    ({"web": {"allowedPrivateNetworks": ["intranet"]}}, "web.allowedPrivateNetworks"),
    ({"webSearch": {"baseUrl": "ftp://search.example"}}, "webSearch.baseUrl"),
    ({"webSearch": {"baseUrl": "https://user:key@search.example"}}, "webSearch.baseUrl"),
    ({"webSearch": {"baseUrl": "search.example"}}, "webSearch.baseUrl"),
    ({"webSearch": {"apiKeyEnv": ""}}, "webSearch.apiKeyEnv"),
    ({"webSearch": {"apiKeyEnv": "A=B"}}, "webSearch.apiKeyEnv"),
])
def test_web_keys_are_checked(body: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_config(json.dumps(body))


ENV_NAME_KEYS = [
    ("providers[].apiKeyEnv", lambda v: {"providers": [{"id": "p", "protocol": "faux", "apiKeyEnv": v,
                                                        "models": [{"id": "m"}]}]}, "provider 'p': apiKeyEnv"),
    ("executor.tokenEnv", lambda v: {"executor": {"address": "127.0.0.1:7421", "tokenEnv": v}}, "executor.tokenEnv"),
    ("webSearch.apiKeyEnv", lambda v: {"webSearch": {"apiKeyEnv": v}}, "webSearch.apiKeyEnv"),
]


@pytest.mark.parametrize(("body", "words"), [k[1:] for k in ENV_NAME_KEYS], ids=[k[0] for k in ENV_NAME_KEYS])
def test_every_key_naming_an_environment_variable_refuses_a_name_none_can_have(body: Any, words: str) -> None:
    # `apiKeyEnv` and `executor.tokenEnv` took `A=B` or a NUL, and then reported a missing key
    # or token ("executor.tokenEnv A=B is not set in the environment", though `A=B=x` was):
    # a name no variable can have is refused at once, by the check webSearch.apiKeyEnv had.
    refused = ("A=B", "A\0B", "=") if words.startswith("provider") else ("A=B", "A\0B", "=", "")
    for name in refused:
        with pytest.raises(ConfigError) as info:
            parse_config(json.dumps(body(name)), "c.jsonc")
        assert f"{words} must name " in info.value.message, (name, info.value.message)
    if words.startswith("provider"):  # a provider's "" is no key, as null (decided earlier)
        assert parse_config(json.dumps(body(""))).providers[-1].api_key_env == ""
    for name in ("MY_KEY", "lower.dotted-name", "K\u00e9Y"):
        parse_config(json.dumps(body(name)))


def test_the_search_key_variable_is_kept_from_executors() -> None:
    from runtime.credentials import secret_env_names

    assert "EXA_API_KEY" in secret_env_names(parse_config("{}"))
    assert "MY_SEARCH_KEY" in secret_env_names(parse_config(cfg(webSearch={"apiKeyEnv": "MY_SEARCH_KEY"})))


def test_the_template_parses_with_every_key_known() -> None:
    from pathlib import Path

    from runtime.config import unknown_keys

    text = (Path(__file__).resolve().parents[2] / "config" / "lens.example.jsonc").read_text()
    c = parse_config(text)
    assert unknown_keys(text) == []
    assert c.web.allow_private_addresses is False and c.web_search.api_key_env == "EXA_API_KEY"


@pytest.mark.parametrize("url", ["http://alice:Pw/S3cret@proxy.example/v1", "https://alice:Pw#S3cret@proxy.example/v1",
                                 "https://alice:Pw?S3cret@proxy.example", "http://alice:Pw\\S3cret@proxy.example",
                                 "http://alice:Pw/S3cret@proxy.example:99999/v1"])
@pytest.mark.parametrize(("body", "words"), [
    (lambda url: {"providers": [{"id": "p", "protocol": "openai-chat", "baseUrl": url}]}, "provider 'p': baseUrl must"),
    (lambda url: {"webSearch": {"baseUrl": url}}, "webSearch.baseUrl must"),
])
def test_a_refused_url_with_a_slash_in_its_password_is_not_quoted(url: str, body: Any, words: str) -> None:
    # A password with an unescaped '/', '?' or '#' ends the URL's authority early (the host is
    # `alice`, the port `Pw`): the URL is invalid, and its refusal quoted it, password and all,
    # since only the authority's user name and password are left out of a quoted URL.
    with pytest.raises(ConfigError) as info:
        parse_config(json.dumps(body(url)), "c.jsonc")
    message = info.value.message
    assert words in message and "S3cret" not in message and "alice" not in message, message


def test_the_keys_a_config_names_are_known_also_when_it_is_no_valid_config(tmp_path: Path):
    # (lens serve and the CLI scrub their errors with them: the error may be a key pasted into
    # that very config)
    from events.secrets import marker
    from runtime.config import configured_secrets

    env = {"K1": "k1-value-long", "K2": "k2-value-long", "K3": "k3-value-long", "OPENAI_API_KEY": "sdk-value-long"}
    providers = [{"id": "a", "protocol": "openai-chat", "apiKeyEnv": "K1", "models": [{"id": "m"}]}]
    cases = {
        "valid": ({"providers": providers, "executor": {"address": "127.0.0.1:1", "tokenEnv": "K2"}}, False),
        "a bad value": ({"providers": providers, "executor": {"tokenEnv": "K2"}, "server": {"port": -1}}, True),
    }
    for name, (config, noted) in cases.items():
        path = tmp_path / f"{name}.jsonc"
        path.write_text(json.dumps(config))
        secrets, note = configured_secrets(path, env)
        assert (note is not None) == noted, (name, note)
        text = secrets.scrub_text("k1-value-long k2-value-long k3-value-long sdk-value-long")
        assert text == f"{marker('K1')} {marker('K2')} k3-value-long {marker('OPENAI_API_KEY')}", name
    path = tmp_path / "broken.jsonc"  # no JSONC at all: the names are read from its text
    path.write_text('{"providers": [{"apiKeyEnv": "K3", "id": } // broken')
    secrets, note = configured_secrets(path, env)
    assert note and secrets.scrub_text("k3-value-long k1-value-long") == f"{marker('K3')} k1-value-long"
    secrets, note = configured_secrets(tmp_path / "missing.jsonc", env)  # (only the SDKs' own)
    assert note and "does not exist" in note and secrets.scrub_text("sdk-value-long") == marker("OPENAI_API_KEY")


def _template() -> str:
    return (Path(__file__).resolve().parents[2] / "config" / "lens.example.jsonc").read_text()


def test_the_template_shows_the_built_in_defaults() -> None:
    # Its first line says every key it sets shows its built-in default: loading it changes nothing.
    import msgspec

    assert msgspec.to_builtins(parse_config(_template())) == msgspec.to_builtins(parse_config("{}"))


def test_the_templates_commented_examples_load_with_every_key_known() -> None:
    # The template's commented-out entries (a provider, a faux script, an MCP server, tool
    # policies, localPtc) are what a user uncomments: each must load as shown, with no key the
    # daemon would ignore. A comment line whose text is JSON (it opens with a brace, a bracket or
    # a quoted key and its value) is uncommented; prose (`"enabled": false disables one`) stays.
    import re

    from runtime.config import unknown_keys

    scalar = r'(?:true|false|null|-?\d[\d.]*|"[^"]*")\s*(?:[,}\]]|$|//)'
    json_like = re.compile(r'^(\s*)//\s*(?=[{}\]]|"[^"]+":\s*(?:[{\[]|' + scalar + r'))')
    lines = [json_like.sub(r"\1", line) for line in _template().splitlines()]
    text = "\n".join(lines)
    assert sum(a != b for a, b in zip(lines, _template().splitlines())) >= 30  # (the examples were found)
    assert unknown_keys(text) == []
    c = parse_config(text, "the template, uncommented")
    assert [p.id for p in c.providers] == ["local", "demo"]
    assert c.providers[0].api_key_env == "LOCAL_API_KEY" and c.providers[0].models[0].id == "qwen3"
    assert c.providers[1].script and c.providers[1].protocol == "faux"
    assert list(c.mcp_servers) == ["github"] and c.mcp_servers["github"].env_from == ["GITHUB_PERSONAL_ACCESS_TOKEN"]
    assert sorted(c.tools.policy) == ["mcp__*", "run_command"]
    assert c.tools.policy["run_command"].workspace_allowlist == ["src", "tests"]
    assert c.local_ptc is not None and c.local_ptc.native_capabilities == ["read_file", "edit_file", "run_command"]


def test_keep_recent_tokens_is_accepted_exactly_at_its_edges_and_refused_one_past() -> None:
    def parsed(value: Any) -> Any:
        return parse_config(cfg(context={"compaction": {"keepRecentTokens": value}}))

    assert parsed(0).context.compaction.keep_recent_tokens == 0
    assert parsed(1_000_000_000).context.compaction.keep_recent_tokens == 1_000_000_000
    assert parse_config(cfg()).context.compaction.keep_recent_tokens == 20_000
    for bad in (-1, 1_000_000_001):
        with pytest.raises(ConfigError) as info:
            parsed(bad)
        assert info.value.code == "CONFIG_INVALID"
        assert f"context.compaction.keepRecentTokens must be 0 to 1000000000, not {bad!r}" in info.value.message


def _stat(mode: int, uid: int) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, uid, 0, 0, 0, 0))


def test_the_mode_check_of_a_config_write_judges_the_write_bits_and_not_the_owner() -> None:
    # A config write replaces the file by a new one of the daemon's user: whose the old one was
    # does not hold at the next start; the mode, which the write keeps, does.
    other = os.geteuid() + 4321
    check_config_file_mode(Path("lens.jsonc"), _stat(stat.S_IFREG | 0o644, other))
    with pytest.raises(ConfigError, match=r"owned by another user \(uid \d+\)"):
        check_private_config_file(Path("lens.jsonc"), _stat(stat.S_IFREG | 0o600, other))
    for uid in (os.geteuid(), other):
        with pytest.raises(ConfigError, match=r"writable by other users \(mode 0602\).*chmod go-w lens.jsonc"):
            check_config_file_mode(Path("lens.jsonc"), _stat(stat.S_IFREG | 0o602, uid))


def test_the_config_place_problem_is_its_own_directory_its_link_targets_then_those_above(tmp_path) -> None:
    # The one check of a config's place, shared by the start and a write through the config-file
    # API: each words its own message from the folder, the reason and the directory it is above.
    own, target = tmp_path / "own", tmp_path / "target"
    own.mkdir(mode=0o700)
    target.mkdir(mode=0o700)
    (target / "lens.jsonc").write_text("{}")
    link = own / "lens.jsonc"
    link.symlink_to(target / "lens.jsonc")
    assert config_directories(link) == [own, target]
    assert config_directories(target / "lens.jsonc") == [target]
    assert config_place_problem(link) is None
    target.chmod(0o770)
    assert config_place_problem(link) == (target, "writable by other users (mode 0770)", None)
    own.chmod(0o702)
    assert config_place_problem(link) == (own, "writable by other users (mode 0702)", None)
    own.chmod(0o700)
    target.chmod(0o700)
    tmp_path.chmod(0o1777)  # (above: sticky, this user's, passes)
    assert config_place_problem(link) is None
    tmp_path.chmod(0o777)
    assert config_place_problem(link) == (tmp_path, "writable by other users (mode 0777)", own)
    tmp_path.chmod(0o700)
    missing = tmp_path / "gone" / "lens.jsonc"
    folder, why, below = config_place_problem(missing)  # type: ignore[misc]
    assert folder == tmp_path / "gone" and below is None
    assert isinstance(why, FileNotFoundError)


@pytest.mark.parametrize(("ref", "parts"), [
    ("faux/faux-1", ("faux", "faux-1")),
    ("openrouter/meta/llama-3", ("openrouter", "meta/llama-3")),  # a model id may hold '/'; a provider id has none
    ("faux", ("faux", "")),
    ("faux/", ("faux", "")),
    ("/faux-1", ("", "faux-1")),
    ("", ("", "")),
])
def test_a_model_reference_splits_at_its_first_slash_and_a_missing_part_is_empty(ref: str,
                                                                                  parts: tuple[str, str]) -> None:
    assert split_model_ref(ref) == parts


@pytest.mark.parametrize(("name", "words"), [
    ("sk-" + "a" * 40, "executor.tokenEnv holds what looks like a key itself"),
    ("A=B", "executor.tokenEnv must name an environment variable"),
    ("", "executor.tokenEnv must name an environment variable"),
], ids=["key", "no-name", "empty"])
def test_a_token_variable_without_an_address_is_told_what_is_wrong_with_its_value_first(name: str, words: str) -> None:
    # A key pasted into executor.tokenEnv with no executor.address was told only "tokenEnv is set
    # but executor.address is not": what was wrong with the value itself went unsaid (and the
    # fix it offered, an address, would have left the key there).
    with pytest.raises(ConfigError) as info:
        parse_config(cfg(executor={"tokenEnv": name}), "c.jsonc")
    assert words in info.value.message, info.value.message
    assert "a" * 20 not in info.value.message  # (the key itself is never shown)
