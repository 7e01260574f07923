"""F-API-2..4 and F-MOD-6, a second pass as a client with only SPEC, README and docs/ drives them:
a real daemon on a loopback port, raw HTTP where the exact bytes of a header matter. Only what
`test_auth_config_acceptance.py`, `test_auth.py` and the config-file suites do not hold already.
"""

from __future__ import annotations

import json

from .conftest import Daemon, raw_http

# --------------------------------------------------------------------------- Authorization as sent


async def test_a_credential_followed_by_a_byte_that_is_no_http_space_is_refused_naming_it(
        daemon: Daemon, strong: str) -> None:
    # HTTP's white space around a value is the space and the tab; Python's str.strip() also drops
    # NBSP (0xA0), NEL (0x85) and the separators 0x1C-0x1F, which a header can carry (as obs-text or
    # a control byte h11 lets through). A credential with one of them is not the credential.
    wrong = []
    for byte in ("\xa0", "\x85", "\x1c", "\x1f"):
        r = await raw_http(daemon.port, "GET", "/api/v1/projects", {"Authorization": f"Bearer {strong}{byte}"})
        error = json.loads(r.body).get("error", {}) if r.status >= 400 else {}
        named = f"U+{ord(byte):04X}"
        if (r.status, error.get("code")) != (401, "AUTH_INVALID") or named not in error.get("message", ""):
            wrong.append((repr(byte), r.status, r.body[:200]))
        elif strong in r.body.decode("latin-1"):
            wrong.append((repr(byte), "the credential was echoed"))
    assert not wrong, wrong
    # the white space HTTP has around a value is still dropped, and a blank token is still none
    for value, status, code in ((f"Bearer {strong} \t ", 200, None), ("Bearer \xa0", 401, "AUTH_INVALID")):
        r = await raw_http(daemon.port, "GET", "/api/v1/projects", {"Authorization": value})
        got = json.loads(r.body)["error"]["code"] if r.status >= 400 else None
        assert (r.status, got) == (status, code), (repr(value), r.status, r.body[:200])
