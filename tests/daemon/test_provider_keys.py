"""F-MOD-6 end to end: provider keys (and the credentials a provider's URL carries) are never
printed, logged or stored."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import DaemonFactory, error_of, run_lens


async def test_a_refused_provider_base_url_is_named_without_its_credentials(daemon_factory: DaemonFactory,
                                                                           tmp_path: Path) -> None:
    # The CONFIG_INVALID message quoted the URL as written, the proxy's user name and password
    # with it, in the answer to a config write and in `lens serve`'s error at start.
    d = await daemon_factory()
    token = await d.pair("config-client", strong=True)
    for base_url in ("http://alice:hunter2@proxy.example:99999/v1", "http://alice:hunter2@proxy .example/v1",
                     "ftp://alice:hunter2@proxy.example/v1"):
        text = json.dumps({"providers": [{"id": "via-proxy", "protocol": "openai-chat", "baseUrl": base_url}]})
        r = await d.put("/config/files/lens.jsonc", token, {"text": text})
        assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
        message = r.json()["error"]["message"]
        assert "provider 'via-proxy': baseUrl" in message and "proxy" in message, message
        assert "alice" not in message and "hunter2" not in message, message
        (tmp_path / "c.jsonc").write_text(text)
        out = await run_lens(tmp_path, "serve", "--config", "c.jsonc", "--port", "0", "--data", "d", check=False)
        assert out.returncode == 2 and "CONFIG_INVALID" in out.stderr, out.stderr
        assert "alice" not in out.stderr + out.stdout and "hunter2" not in out.stderr + out.stdout, out.stderr
