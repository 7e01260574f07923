"""A URL the daemon did not take from the caller (a redirect's target) is quoted cut to a limit
only after every whole key in it is replaced: a tool's error is scrubbed of whole keys alone
(docs/decisions.md, "Caller text against whole keys, daemon text against pieces"), so a cut made
first would leave the first characters of a key that no later scrub finds."""

from __future__ import annotations

import pytest

from events.secrets import Secrets
from tools.base import ToolError, ToolResult
from tools.web.address import parse_url, shown_url

KEY = "sk-proj-E4hT9wK2mQ7rV1xBz5LpAa"
SECRETS = Secrets({KEY: "LENS_TEST_KEY"})


def leaked(text: str) -> list[str]:
    return [KEY[i:i + 8] for i in range(len(KEY) - 7) if KEY[i:i + 8] in text]


@pytest.mark.parametrize("url", [
    "ftp://h.example/" + "x" * 176 + KEY,  # another scheme
    "http://" + "x" * 193 + KEY + "/",  # no valid host (an over-long label)
    "http:///" + "x" * 190 + KEY,  # no host
])
def test_a_redirect_target_cut_in_an_error_shows_no_piece_of_a_key(url: str) -> None:
    with pytest.raises(ToolError) as info:
        parse_url(url, what="the redirect from 'http://a.example/' to", secrets=SECRETS)
    message = ToolResult.error(info.value.code, info.value.message).message_scrubbed(SECRETS).content[0].text
    assert "to '" in message and not leaked(message), message


def test_shown_url_replaces_a_whole_key_before_its_cut() -> None:
    shown = shown_url("https://h.example/" + "y" * 180 + KEY, SECRETS)
    assert not leaked(shown) and shown.startswith("'https://h.example/yyy"), shown
    assert shown_url("https://h.example/" + KEY) == repr(("https://h.example/" + KEY)[:200])
