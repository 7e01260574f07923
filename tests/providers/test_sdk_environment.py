"""F-MOD-6: a provider sends only what its config names. The official SDK clients read variables
of their own from the environment when they are built (``OPENAI_CUSTOM_HEADERS``,
``OPENAI_ORG_ID``, ``OPENAI_PROJECT_ID``, ``ANTHROPIC_CUSTOM_HEADERS``, the vendors' key
variables…) and send what they hold as headers; a variable set for another tool must neither
replace the configured key nor travel to a provider (a local server, another vendor) that the
config never gave it to."""

from __future__ import annotations

import pytest

from .conftest import CLASSES, PROTOCOLS, Ctx, Deltas
from .scripts import reply

# What a developer's shell may hold for other tools. No 8 characters of a value occur by chance.
SDK_ENV = {
    "OPENAI_API_KEY": "sk-envOpenaiKey7Qw2",
    "OPENAI_ADMIN_KEY": "sk-envAdminKey4Rt8",
    "OPENAI_ORG_ID": "org-envOrgId9Lp3",
    "OPENAI_PROJECT_ID": "proj_envProjId6Nb1",
    "OPENAI_CUSTOM_HEADERS": "Authorization: Bearer sk-envCustomAuth5Xz0\nX-Env-Extra: envExtraOpenai2Hj",
    "ANTHROPIC_API_KEY": "sk-ant-envAnthKey3Mv7",
    "ANTHROPIC_AUTH_TOKEN": "envAnthToken8Kd4",
    "ANTHROPIC_CUSTOM_HEADERS": "x-api-key: sk-ant-envCustomKey1Gs6\nX-Env-Extra: envExtraAnth7Wq5",
}


def env_values() -> list[str]:
    values = []
    for name, value in SDK_ENV.items():
        if name.endswith("_CUSTOM_HEADERS"):
            values += [line.partition(":")[2].strip().removeprefix("Bearer ") for line in value.splitlines()]
        else:
            values.append(value)
    return values


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("key", ["cfg-key-Tn4Vw8", None], ids=["configured-key", "no-key"])
async def test_the_sdks_environment_variables_are_not_sent(protocol, key, server, make, monkeypatch):
    for name, value in SDK_ENV.items():
        monkeypatch.setenv(name, value)
    provider = make(protocol, api_key=key)
    server.push(reply(protocol, text="hi"))
    result = await provider.stream(Ctx().user("hi").request(), Deltas())
    assert result.text == "hi"
    headers = server.requests[0].headers
    # The configured key (or the placeholder of a provider that needs none) is the credential sent.
    assert headers["authorization"] == f"Bearer {key or 'lens-no-key'}", headers
    assert "x-api-key" not in headers and "x-env-extra" not in headers, headers
    assert "openai-organization" not in headers and "openai-project" not in headers, headers
    sent = "\n".join(f"{k}: {v}" for k, v in headers.items())
    assert [v for v in env_values() if v in sent] == [], sent


VENDOR_URLS = {"openai-responses": "https://api.openai.com/v1", "openai-chat": "https://api.openai.com/v1",
               "anthropic": "https://api.anthropic.com"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("base_url", ["http://127.0.0.1:9/v1", None], ids=["configured-url", "no-url"])
async def test_the_sdk_client_is_built_from_the_providers_settings(protocol, base_url, monkeypatch):
    """The key, the retries and the timeout the config names reach the SDK's client, with the
    configured base URL, or the vendor's own where the config names none (never one the SDK would
    take from its own environment variable)."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/env-openai")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/env-anthropic")
    provider = CLASSES[protocol](f"p-{protocol}", base_url=base_url, api_key="cfg-key-Hs5Rb2", max_retries=3,
                                 timeout=7.5)
    try:
        client = provider.client()
        assert (client.api_key, client.max_retries, client.timeout) == ("cfg-key-Hs5Rb2", 3, 7.5)
        # (Anthropic's SDK adds /v1/messages itself: a configured /v1 is left out, see
        # test_providers_acceptance.py::test_an_anthropic_base_url_with_or_without_v1_reaches_v1_messages)
        configured = base_url.removesuffix("/v1") if base_url and protocol == "anthropic" else base_url
        assert str(client.base_url).rstrip("/") == (configured or VENDOR_URLS[protocol])
    finally:
        await provider.aclose()
