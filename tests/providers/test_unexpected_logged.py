"""An exception out of a model request that is no SDK or transport error (a slip of ours, one the
SDKs let through untranslated) is recorded as ``PROVIDER_ERROR`` naming its type, and logged with
its traceback, so that whoever reads the log finds the line that raised. The key is redacted from
the logged traceback as it is from the event's message."""

from __future__ import annotations

import logging

import anthropic.resources.messages
import openai.resources.chat.completions
import openai.resources.responses
import pytest

from runtime.providers.base import ProviderError

from .conftest import PROTOCOLS, Ctx, Deltas

KEY = "sk-test-Q7mZ4kT1vB8nX2cR9wLp"
CREATE = {"openai-chat": openai.resources.chat.completions.AsyncCompletions,
          "openai-responses": openai.resources.responses.AsyncResponses,
          "anthropic": anthropic.resources.messages.AsyncMessages}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_unexpected_exception_is_logged_with_its_traceback_and_no_key(protocol, make, monkeypatch, caplog):
    async def create(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        divisors: list[int] = []
        try:
            return 1 / len(divisors)
        except ZeroDivisionError as exc:  # a slip, and one raised while handling it (a chain)
            raise LookupError(f"no divisor for the request sent with {KEY}") from exc

    monkeypatch.setattr(CREATE[protocol], "create", create)
    provider = make(protocol, api_key=KEY, max_retries=0)
    with caplog.at_level(logging.ERROR, logger="lens.providers"):
        with pytest.raises(ProviderError) as info:
            await provider.stream(Ctx().user("go").request(), Deltas())
    assert (info.value.code, info.value.retryable) == ("PROVIDER_ERROR", False)
    assert info.value.message == (f"provider 'p-{protocol}': the request failed: LookupError: "
                                  "no divisor for the request sent with [redacted]")
    (record,) = [r for r in caplog.records if r.name == "lens.providers"]
    logged = record.getMessage()
    assert record.levelno == logging.ERROR
    assert f"provider 'p-{protocol}'" in logged and "recorded as PROVIDER_ERROR" in logged
    assert "Traceback (most recent call last)" in logged
    assert "return 1 / len(divisors)" in logged and "ZeroDivisionError: division by zero" in logged  # the cause
    assert "LookupError: no divisor for the request sent with [redacted]" in logged
    assert KEY not in caplog.text and KEY[:12] not in caplog.text
