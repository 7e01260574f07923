"""``lens serve`` refuses a config that another local user can change: the config file, or the
directory holding it, writable by the group or by others, or owned by another user. Such a user
could point a provider's ``baseUrl`` at a server of theirs (which is then sent the key), name
another variable as ``apiKeyEnv``, or start an MCP server of their choosing. Readable by others
is not refused. Real ``lens serve`` processes in a temp directory, port 0."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .conftest import run_lens, serving

NOBODY = 65534


def _config(root: Path) -> Path:
    config = root / "config" / "lens.jsonc"
    config.parent.mkdir()
    config.write_text(json.dumps({"providers": [{"id": "local", "protocol": "openai-chat",
                                                 "baseUrl": "http://127.0.0.1:9/v1", "apiKeyEnv": "LOCAL_API_KEY",
                                                 "models": [{"id": "m", "contextWindow": 1000}]}]}))
    config.chmod(0o600)
    config.parent.chmod(0o700)
    return config


# (what is changed, the mode or owner given to it, the words and the fix the refusal names)
REFUSED = [
    ("file", 0o620, "writable by other users (mode 0620)", "chmod go-w"),
    ("file", 0o602, "writable by other users (mode 0602)", "chmod go-w"),
    ("file", 0o666, "writable by other users (mode 0666)", "chmod go-w"),
    ("file", "nobody", f"owned by another user (uid {NOBODY})", "chown"),
    ("dir", 0o770, "writable by other users (mode 0770)", "chmod go-w"),
    ("dir", 0o702, "writable by other users (mode 0702)", "chmod go-w"),
    ("dir", 0o1777, "writable by other users (mode 1777)", "chmod go-w"),
    ("dir", "nobody", f"owned by another user (uid {NOBODY})", "chown"),
]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
@pytest.mark.parametrize(("what", "change", "words", "fix"), REFUSED)
async def test_serve_refuses_a_config_another_user_can_change(tmp_path: Path, what: str, change: int | str,
                                                              words: str, fix: str) -> None:
    config = _config(tmp_path)
    target = config if what == "file" else config.parent
    if change == "nobody":
        os.chown(target, NOBODY, -1)
        if what == "dir":
            target.chmod(0o755)  # (the daemon's user, root, can still read it)
    else:
        target.chmod(change)  # type: ignore[arg-type]
    out = await run_lens(tmp_path, "serve", "--port", "0", "--data", "data", check=False)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "CONFIG_INVALID" in out.stderr and words in out.stderr and fix in out.stderr, out.stderr
    named = "config file config/lens.jsonc is " if what == "file" else "the config directory config is "
    assert named in out.stderr, out.stderr  # (the path as the config was found: relative to the cwd)
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was made


async def test_serve_starts_from_a_config_others_may_only_read(tmp_path: Path) -> None:
    config = _config(tmp_path)
    config.chmod(0o644)  # readable by all, writable by its owner alone: the bits that do not matter
    config.parent.chmod(0o755)
    async with serving(tmp_path) as (serve, d):
        assert (await d.get("/health")).status_code == 200
        assert await serve.terminate() == 0
    # a symbolic link is judged by the file it leads to and by both directories
    elsewhere = tmp_path / "shared"
    elsewhere.mkdir()
    (elsewhere / "lens.jsonc").write_bytes(config.read_bytes())
    config.unlink()
    config.symlink_to(elsewhere / "lens.jsonc")
    elsewhere.chmod(0o775)
    out = await run_lens(tmp_path, "serve", "--port", "0", "--data", "data2", check=False)
    assert out.returncode == 2 and f"the config directory {elsewhere} is writable by other users (mode 0775)" \
        in out.stderr, out.stderr
