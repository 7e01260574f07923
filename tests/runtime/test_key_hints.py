"""The key a user may have meant (runtime/key_hints.py), at its edges: a known key is never
"unknown", a key equal to a known one but for case or ``_`` is named with it, a key near none
gets no hint, and a list of many or long keys stays bounded."""

from __future__ import annotations

import json

import pytest

from runtime.config import Config, ConfigError, parse_config, unknown_keys
from runtime.key_hints import (MAX_HINTED, UnknownKey, meant_key, refused_key_hint, shown_key, unknown_keys_listed,
                               unknown_keys_meant)

SERVER = {"host", "port", "maxBodyBytes", "heartbeatSeconds"}


def test_a_known_key_is_not_unknown_and_has_no_hint() -> None:
    assert meant_key("port", SERVER) is None
    assert unknown_keys(json.dumps({"server": {"port": 1, "host": "::1"}, "dataDir": "d"})) == []


def test_a_key_equal_to_a_known_one_but_for_case_or_separators_is_named_with_it() -> None:
    assert meant_key("PORT", SERVER) == "port"
    assert meant_key("MaxBodyBytes", SERVER) == "maxBodyBytes"
    assert meant_key("max_body_bytes", SERVER) == "maxBodyBytes"
    assert meant_key("heartbeat-seconds", SERVER) == "heartbeatSeconds"


def test_a_key_a_letter_or_two_off_a_known_one_is_named_with_it() -> None:
    assert meant_key("prot", SERVER) == "port"  # (two letters swapped in four)
    assert meant_key("hots", SERVER) == "host"
    assert meant_key("heartbeatSecs", SERVER) == "heartbeatSeconds"
    assert meant_key("maxbodybyte", SERVER) == "maxBodyBytes"


def test_a_key_near_no_known_one_gets_no_hint() -> None:
    for key in ("zzz", "x", "", "ctx", "timeout", "p" + "o" * 100 + "rt", "port" + "x" * 100):
        assert meant_key(key, SERVER) is None, key
    assert meant_key("prot", set()) is None


def test_the_hint_is_a_key_of_the_same_object_only() -> None:
    # `port` is a key of `server`, not of the top level; `contextWindow` of a model, not a provider
    text = json.dumps({"port": 1, "providers": [{"id": "p", "protocol": "faux", "contextWindow": 5,
                                                 "models": [{"id": "m", "contextwindow": 5}]}]})
    assert unknown_keys(text) == [UnknownKey("port", None), UnknownKey("providers[0].contextWindow", None),
                                  UnknownKey("providers[0].models[0].contextwindow", "contextWindow")]


def test_the_same_path_twice_is_sorted_without_comparing_the_hints() -> None:
    # (two MCP servers' names can make one path: `a.b` + `c` and `a` + `b.c`)
    text = json.dumps({"mcpServers": {"a.b": {"command": "x", "c": 1}, "a": {"command": "x", "b.c": 1}},
                       "server": {"prot": 1}})
    assert [k.path for k in unknown_keys(text)] == ["mcpServers.a.b.c", "mcpServers.a.b.c", "server.prot"]


def test_many_or_long_unknown_keys_stay_bounded() -> None:
    keys = [UnknownKey("k" * 5000, None), UnknownKey("server." + "x" * 5000, "port")]
    keys += [UnknownKey(f"server.prot{i:04}", "port") for i in range(3000)]
    listed = unknown_keys_listed(keys)
    shown, _, more = listed.rpartition(" and ")
    assert listed.startswith("k" * 80 + "…, server." + "x" * 73 + '… (did you mean "port"?), '), listed[:300]
    assert more.endswith(" more") and len(shown.split(", ")) + int(more.removesuffix(" more")) == 3002, listed
    assert len(shown) <= 400 + len(shown_key(keys[1])), len(shown)
    meant = unknown_keys_meant(keys, 100)
    assert len(meant) == 99 and meant["server." + "x" * 73 + "…"] == "port"
    assert all(len(k) <= 81 for k in meant)
    assert unknown_keys_listed([]) == "" and unknown_keys_meant([], 100) == {}


def test_an_object_that_takes_no_unknown_key_names_the_key_meant_in_its_refusal() -> None:
    at_policy = "Object contains unknown field `{}` - at `$.tools.policy['bash']`"
    assert refused_key_hint(Config, at_policy.format("aproval")) == ' (did you mean "approval"?)'
    assert refused_key_hint(Config, at_policy.format("Enabled")) == ' (did you mean "enabled"?)'
    assert refused_key_hint(Config, at_policy.format("zzz")) == ""
    assert refused_key_hint(Config, "Object contains unknown field `enabeld` - at `$.nowhere`") == ""
    assert refused_key_hint(Config, "Expected `int`, got `str` - at `$.localPtc.enabled`") == ""
    with pytest.raises(ConfigError) as info:
        parse_config(json.dumps({"tools": {"policy": {"bash": {"paramRestrictions": {"n": {"mx": 1}}}}}}))
    assert info.value.message == ("config: Object contains unknown field `mx` - at "
                                  "`$.tools.policy['bash'].paramRestrictions['n']` (did you mean \"max\"?)")


def test_only_the_keys_a_list_can_show_are_compared() -> None:
    # (a config of 4 MiB can hold hundreds of thousands of keys: comparing 400,000 took 9 s)
    text = json.dumps({"providers": [{"id": f"p{i}", "protocol": "faux", "modles": []} for i in range(300)]})
    found = unknown_keys(text)
    assert len(found) == 300 and [k.meant for k in found].count("models") == MAX_HINTED == 200
    assert all(k.meant == "models" for k in found[:MAX_HINTED])


def test_two_keys_shown_alike_are_given_no_hint_in_an_answer() -> None:
    # (`mcpServers.a.b.prot` is `a.b` + `prot` or `a` + `b.prot`; two long paths cut to the same
    # 80 characters: the answer, keyed by what it shows, could not say which a hint is for)
    long = "server." + "x" * 100
    keys = [UnknownKey("mcpServers.a.b.prot", "port"), UnknownKey("mcpServers.a.b.prot", None),
            UnknownKey(long + "a", "port"), UnknownKey(long + "b", "host"), UnknownKey("server.prot", "port")]
    assert unknown_keys_meant(keys, 100) == {"server.prot": "port"}
    assert unknown_keys_meant(keys[:1] + keys[2:3], 100) == {"mcpServers.a.b.prot": "port", long[:80] + "…": "port"}
    # (shown alike with the same hint: it is that key's whichever it is)
    alike = [UnknownKey(long + "a", "port"), UnknownKey(long + "b", "port")]
    assert unknown_keys_meant(alike, 100) == {long[:80] + "…": "port"}
