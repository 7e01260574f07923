"""docs/storage-format.md's "Backup and restore", run as written against a real ``lens serve``.

The page's two shell blocks are read from the page itself (only their first line, which names the
data and backup directories, is the test's), so the procedure an operator copies is the one
tested: the backup is taken while the daemon runs and writes, the restore after it stopped, and
the restored daemon must serve what the backup held — the session and its answered input, the
artifact its events name, the paired client's credential — and nothing written after it, then
take new work. Real processes: ``lens serve`` on port 0, ``lens log verify``, ``sh``."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import trio

from ..web.server import WebServer
from .conftest import LIMIT, lens_command, run_lens, run_tool, serving

PAGE = Path(__file__).resolve().parents[2] / "docs" / "storage-format.md"
BINARY = b"\x00\x01a fetched binary, kept as an artifact\xff" * 8
SERVE = ' && lens serve --data "$DATA"'


def procedure() -> tuple[str, str]:
    """The page's backup and restore blocks, their first (directory-naming) lines dropped."""
    section = PAGE.read_text().split("## Backup and restore\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(blocks) == 2, blocks
    backup, restore = (b.split("\n", 1) for b in blocks)
    assert backup[0].startswith("DATA=.lens BACKUP=") and restore[0].startswith("DATA=.lens BACKUP="), blocks
    assert restore[1].rstrip("\n").endswith(SERVE), restore[1]  # (the test starts the daemon itself)
    return backup[1], restore[1].rstrip("\n")[: -len(SERVE)] + "\n"


def run_block(cwd: Path, block: str, backup: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{Path(lens_command()[0]).parent}{os.pathsep}{os.environ['PATH']}")
    script = f'set -e\nDATA=data BACKUP="{backup}"\n{block}'
    return subprocess.run(["sh", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


async def test_the_documented_backup_taken_live_restores_a_working_daemon(tmp_path: Path, nursery: trio.Nursery):
    backup_block, restore_block = procedure()
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "lens.jsonc").write_text(json.dumps({"web": {"allowPrivateAddresses": True}}))
    web = WebServer("127.0.0.1")
    await nursery.start(web.run)
    url = web.reply("/kept.bin", BINARY, "application/octet-stream")
    backup = tmp_path / "backups" / "one"
    with trio.fail_after(6 * LIMIT):
        async with serving(tmp_path, stderr_name="serve-0.err") as (serve, d):
            token = await d.pair("operator", strong=True)
            pid = (await d.project(token))["id"]
            sid = (await d.session(token, pid))["id"]
            fetched = await run_tool(d, token, sid, "r1", "web_fetch", {"url": url})
            artifact = fetched["structured_content"]["artifact_id"]
            assert artifact == hashlib.sha256(BINARY).hexdigest()
            await d.submit(token, sid, "r2", "kept by the backup")
            await d.wait_idle(token, sid)
            kept_seq = (await d.get("/health")).json()["lastSeq"]

            # Taken while the daemon runs (and holds events.db open, in WAL mode).
            done = await trio.to_thread.run_sync(run_block, tmp_path, backup_block, backup)
            assert done.returncode == 0, done.stdout + done.stderr
            assert done.stdout.strip().splitlines()[-1] == f"ok: {kept_seq} event(s) verified", done.stdout
            assert (backup / "data" / "artifacts" / artifact).read_bytes() == BINARY
            assert sorted(p.name for p in backup.iterdir()) == ["data", "lens.jsonc", "pair.json"]

            await d.submit(token, sid, "r3", "written after the backup")
            await d.wait_idle(token, sid)
            lost_seq = (await d.get("/health")).json()["lastSeq"]
            assert lost_seq > kept_seq
            assert await serve.terminate() == 0

        (tmp_path / "config" / "pair.json").unlink()  # (the restore brings the credential back)
        done = await trio.to_thread.run_sync(run_block, tmp_path, restore_block, backup)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip().splitlines()[-1] == f"ok: {kept_seq} event(s) verified", done.stdout
        assert (tmp_path / "data.before-restore" / "events.db").is_file()  # set aside, not deleted
        assert oct((tmp_path / "data").stat().st_mode & 0o777) == "0o700"

        async with serving(tmp_path, stderr_name="serve-1.err") as (serve, d):
            assert (await d.get("/health")).json()["lastSeq"] == kept_seq
            view = (await d.get(f"/sessions/{sid}", token)).json()  # the credential works again
            texts = json.dumps(view["items"])
            assert "kept by the backup" in texts and "written after the backup" not in texts
            r = await d.get(f"/artifacts/{artifact}", token)
            assert r.status_code == 200 and r.content == BINARY
            # A client that saw events past the backup is told its position is not in this log.
            r = await d.get(f"/sessions/{sid}/events", token, params={"after": lost_seq})
            assert r.status_code == 400, r.text
            listed = (await d.get("/sessions", token)).json()["sessions"]
            assert [s["id"] for s in listed] == [sid]
            # and the restored daemon takes new work
            await d.submit(token, sid, "r4", "after the restore")
            assert "after the restore" in json.dumps((await d.wait_idle(token, sid))["items"])
            assert await serve.terminate() == 0
        verify = await run_lens(tmp_path, "log", "verify", "--data", "data")
        assert verify.returncode == 0, verify.stdout + verify.stderr
