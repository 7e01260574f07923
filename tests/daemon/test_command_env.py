"""The daemon's own credentials stay out of the agent's commands: a local executor (and so every
command it runs) is started without any variable of the daemon's environment named as a
credential (the cloud SDKs', GITHUB_TOKEN, NPM_TOKEN…) or holding a token-shaped value, nor an agent's socket or ticket
(SSH_AUTH_SOCK, GPG_AGENT_INFO, KRB5CCNAME), but those ``executor.passEnv`` names; the
configured keys are withheld whatever it says. Real daemon on port 0, real executor, real shell."""

from __future__ import annotations

import json

import pytest

from runtime.credentials import AGENT_ENV, is_credential_name

from .conftest import DaemonFactory, run_tool

WITHHELD = {
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLEWITHHELD01",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-withheld-0123456789",
    "AWS_SESSION_TOKEN": "aws-session-withheld-0123456789",
    "GOOGLE_APPLICATION_CREDENTIALS": "/home/op/.config/gcloud/withheld.json",
    "AZURE_CLIENT_SECRET": "azure-secret-withheld-0123456789",
    "NPM_TOKEN": "npm_withheld0123456789abcdef",
    "GH": "ghp_TokenShapedUnderAPlainName0123",  # (no credential's name, but a token's shape)
    "SSH_AUTH_SOCK": "/run/user/0/withheld-agent.sock",
    "GPG_AGENT_INFO": "/run/user/0/gnupg/withheld:0:1",
    "KRB5CCNAME": "FILE:/run/user/0/krb5cc_withheld",
    "DATABASE_URL": "postgres://app:dbpassword-withheld@db.internal:5432/app",  # (a URL's password)
    "CACHE": "redis://:redispass-withheld@cache.internal:6379/0",
    "EXA_API_KEY": "exa-configured-key-withheld-0123456789",  # (webSearch.apiKeyEnv: passEnv names it in vain)
}
PASSED = {
    "GITHUB_TOKEN": "ghp_passedOnPurpose0123456789abcdef",  # named by executor.passEnv
    "AWS_REGION": "eu-west-3",  # no credential
    "LENS_TEST_PLAIN_SETTING": "plain-value-passed",
    "LENS_TEST_PLAIN_URL": "postgres://app@db.internal:5432/app https://example.invalid/a:b",  # (no password)
    "LENS_TEST_PATHS": "/opt/npm_global_tools/bin:/srv/sk-project-directory",  # (tokens' prefixes inside)
}


async def test_a_commands_environment_holds_none_of_the_daemons_credentials(daemon_factory: DaemonFactory,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**WITHHELD, **PASSED}.items():
        monkeypatch.setenv(name, value)
    d = await daemon_factory(config={"executor": {"passEnv": ["GITHUB_TOKEN", "EXA_API_KEY"]}})
    token = await d.pair("owner", strong=True)
    sid = (await d.session(token, (await d.project(token))["id"]))["id"]
    # the command's own environment, and its executor's (/proc/$PPID: the shell's parent)
    body = await run_tool(d, token, sid, "r1", "run_command",
                          {"command": "env; echo ---; tr '\\0' '\\n' < /proc/$PPID/environ"})
    text = json.dumps(body)
    assert not body["is_error"] and "PATH=" in text and "---" in text, body
    for name, value in WITHHELD.items():
        assert f"{name}=" not in text and value not in text, name
    for name, value in PASSED.items():
        assert text.count(f"{name}={value}") == 2, name  # in the command's and in the executor's


@pytest.mark.parametrize("name", ["AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN",
                                  "AWS_WEB_IDENTITY_TOKEN_FILE", "GOOGLE_APPLICATION_CREDENTIALS",
                                  "GOOGLE_OAUTH_ACCESS_TOKEN", "AZURE_CLIENT_SECRET", "AZURE_PASSWORD",
                                  "GITHUB_TOKEN", "GH_TOKEN", "NPM_TOKEN", "HF_TOKEN", "VAULT_TOKEN",
                                  "SSH_AUTH_SOCK", "DOCKER_AUTH_CONFIG"])
def test_the_cloud_and_tool_credentials_are_named_as_such(name: str) -> None:
    assert is_credential_name(name) or name in AGENT_ENV


@pytest.mark.parametrize("name", ["AWS_REGION", "AWS_DEFAULT_REGION", "GOOGLE_CLOUD_PROJECT", "AZURE_TENANT_ID",
                                  "HOME", "LANG", "TERM", "PATH"])
def test_plain_settings_are_not(name: str) -> None:
    assert not is_credential_name(name) and name not in AGENT_ENV
