"""A password in a data source name or connection string is a credential in every shape it is
written in, not only a URL's (``postgres://u:PW@h``): a URL's query string (``?password=PW``),
libpq's keyword DSN (``host=h password=PW``), ODBC and ADO.NET connection strings
(``Pwd={PW};``, ``Password=PW;``) and Azure's (``AccountKey=…;``). A variable of the daemon's
environment holding one is withheld from the agent's commands (whole: ``executor.passEnv`` gives
it back); an MCP server's argument or ``env`` literal holding one has the password scrubbed from
all Lens shows. The near misses (``passfile=``, ``password_reset=``, ``bypass=``, an empty
password) pass. Real daemons on port 0, a real executor and shell, the real MCP test server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from runtime.config import Config, parse_config
from runtime.credentials import config_secrets, dsn_passwords, executor_hidden_env, mcp_credentials

from ..mcp.conftest import SERVER
from .conftest import DaemonFactory, run_lens, run_tool, serving

# (shape, value, the password in it)
SHAPES = [
    ("query", "jdbc:postgresql://db.internal:5432/app?user=app&password=queryPw-withheld1&ssl=true",
     "queryPw-withheld1"),
    ("query-first", "https://db.internal/api?password=firstPw-withheld2", "firstPw-withheld2"),
    ("libpq", "host=db.internal port=5432 dbname=app user=app password=libpqPw-withheld3", "libpqPw-withheld3"),
    ("libpq-quoted", "host=db.internal password = 'libpq quoted withheld4' dbname=app", "libpq quoted withheld4"),
    ("odbc", "Driver={PostgreSQL Unicode};Server=db;Uid=app;Pwd={odbc;Pw-withheld5};", "odbc;Pw-withheld5"),
    ("ado", "Server=db;Database=app;User Id=app;Password=adoPw-withheld6;", "adoPw-withheld6"),
    ("azure", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=azureKeyWithheld7==;"
              "EndpointSuffix=core.windows.net", "azureKeyWithheld7=="),
]
NEAR_MISSES = [
    "host=db.internal dbname=app user=app passfile=/home/app/.pgpass sslmode=require",
    "https://example.invalid/search?q=password&password_reset=1&bypass=1",
    "Server=db;Database=app;Trusted_Connection=yes;Password=;",
    "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey",
    "opts=sslpassword_hint passwordless=1 pass",
]


@pytest.mark.parametrize(("shape", "value", "password"), SHAPES, ids=[s[0] for s in SHAPES])
def test_each_shape_holds_its_password(shape: str, value: str, password: str) -> None:
    assert password in dsn_passwords(value)
    assert executor_hidden_env(Config(), {"LENS_TEST_CONN": value}) >= {"LENS_TEST_CONN"}


@pytest.mark.parametrize("value", NEAR_MISSES)
def test_a_near_miss_holds_none(value: str) -> None:
    assert dsn_passwords(value) == []
    assert "LENS_TEST_CONN" not in executor_hidden_env(Config(), {"LENS_TEST_CONN": value})


def test_quoted_values_are_known_as_written_and_as_meant() -> None:
    assert dsn_passwords(r"password='it\'s one'") == [r"it\'s one", "it's one"]
    assert dsn_passwords("Pwd={a}}b};") == ["a}}b", "a}b"]
    assert dsn_passwords("https://h/?password=p%40ss") == ["p%40ss", "p@ss"]
    assert dsn_passwords('Password="ado pw";') == ["ado pw"]


async def test_a_commands_environment_holds_no_dsn_password(daemon_factory: DaemonFactory,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    withheld = {f"LENS_TEST_DSN_{i}": value for i, (_shape, value, _pw) in enumerate(SHAPES)}
    passed = {f"LENS_TEST_NEAR_{i}": value for i, value in enumerate(NEAR_MISSES)}
    passed["LENS_TEST_GIVEN_BACK"] = "host=db.internal password=givenBackOnPurpose"  # (executor.passEnv names it)
    for name, value in {**withheld, **passed}.items():
        monkeypatch.setenv(name, value)
    d = await daemon_factory(config={"executor": {"passEnv": ["LENS_TEST_GIVEN_BACK"]}})
    token = await d.pair("owner", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    body = await run_tool(d, token, sid, "r1", "run_command",
                          {"command": "env; echo ---; tr '\\0' '\\n' < /proc/$PPID/environ"})
    text = body["content"][0]["text"] if body.get("content") else json.dumps(body)
    assert not body["is_error"] and "PATH=" in text and "---" in text, body
    for name, (_shape, _value, password) in zip(withheld, SHAPES):
        assert f"{name}=" not in text and password not in text, name
    for name, value in passed.items():
        assert text.count(f"{name}={value}\n") == 2, (name, text)  # the command's and its executor's


ARG_SHAPES = SHAPES[:6]
ENV_LITERAL = "Server=db;Database=app;Password=envLiteralPw-withheld8;"
ARGS = [SERVER, *[value for _shape, value, _pw in ARG_SHAPES], *NEAR_MISSES]


def _config(root: Path) -> None:
    config = root / "config" / "lens.jsonc"
    config.parent.mkdir()
    config.write_text(json.dumps({"mcpServers": {"t": {"command": sys.executable, "args": ARGS,
                                                       "env": {"CONN": ENV_LITERAL}}}}))
    config.chmod(0o600)


def test_which_mcp_arguments_hold_a_dsn_password() -> None:
    cfg = parse_config(json.dumps({"mcpServers": {"t": {"command": "x", "args": ARGS,
                                                        "env": {"CONN": ENV_LITERAL}}}}), "t")
    found = {value for _where, _name, value in mcp_credentials(cfg)}
    assert {pw for _s, _v, pw in ARG_SHAPES} | {"envLiteralPw-withheld8"} <= found
    assert not {where for where, _n, _v in mcp_credentials(cfg)} & {f"mcpServers['t'].args[{i}]"
                                                                 for i in range(1 + len(ARG_SHAPES), len(ARGS))}


async def test_mcp_dsn_passwords_reach_no_output(tmp_path: Path) -> None:
    _config(tmp_path)
    async with serving(tmp_path) as (serve, d):
        strong = await d.pair("owner", strong=True)
        sid = (await d.session(strong, (await d.project(strong))["id"]))["id"]
        argv = await run_tool(d, strong, sid, "r1", "mcp__t__env", {"name": "*argv"})
        env = await run_tool(d, strong, sid, "r2", "mcp__t__env", {"name": "CONN"})
        answers = [json.dumps([argv, env])]
        for path in (f"/sessions/{sid}/events", f"/sessions/{sid}"):
            r = await d.get(path, strong)
            assert r.status_code == 200, r.text
            answers.append(r.text)
        decoded = await run_lens(tmp_path, "log", "decode", "--data", "data")
        answers += [decoded.stdout, decoded.stderr]
        assert await serve.terminate() == 0
    shown = argv["content"][0]["text"]
    assert shown.count("[redacted mcpServers.t.args]") == len(ARG_SHAPES), shown
    assert " ".join(NEAR_MISSES) in shown, shown  # (the near misses shown as they are)
    assert env["content"][0]["text"] == "Server=db;Database=app;Password=[redacted CONN];", env
    text = "\n".join(answers + serve.lines + [(tmp_path / "serve-0.err").read_text()])
    for _shape, _value, password in ARG_SHAPES:
        assert password not in text, password
    assert "envLiteralPw-withheld8" not in text


def test_an_env_from_variables_dsn_password_is_a_key() -> None:
    """What ``envFrom`` passes an MCP server from the daemon's environment: its DSN's password is
    scrubbed as the server's token-shaped values are (the server may print its connection string)."""
    cfg = parse_config(json.dumps({"mcpServers": {"t": {"command": "x", "envFrom": ["LENS_TEST_CONN"]}}}), "t")
    value = SHAPES[5][1]
    keys = config_secrets(cfg, {"LENS_TEST_CONN": value})
    assert keys.scrub_text(f"connecting with {value}") == \
        "connecting with Server=db;Database=app;User Id=app;Password=[redacted LENS_TEST_CONN];"
    assert not config_secrets(cfg, {"LENS_TEST_CONN": NEAR_MISSES[2]})
