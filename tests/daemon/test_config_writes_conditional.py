"""Conditional config writes: ``PUT /config/files/{name}`` with ``expectDigest`` (the ``digest``
of the ``GET`` an edit started from) is 409 ``CONFIG_FILE_CHANGED`` if the file changed since,
and a write of the pair file takes the lock ``lens pair approve`` takes, so an approval made
meanwhile is never lost.

The lock test holds the real lock file itself and sees the daemon's write wait for it in
``/proc/locks`` (the kernel's table of file locks and their waiters): no sleep orders anything."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import trio

from .conftest import DaemonFactory, error_of, run_lens, wait_until

MAIN = '{"server": {"port": 7420}} // by hand\n'


async def test_a_write_from_a_stale_read_is_409_and_changes_nothing(daemon_factory: DaemonFactory):
    d = await daemon_factory(config=MAIN)
    token = await d.pair("admin", strong=True)
    read = (await d.get("/config/files/lens.jsonc", token)).json()
    edited = MAIN.replace("7420", "7421")
    r = await d.put("/config/files/lens.jsonc", token, {"text": edited, "expectDigest": read["digest"]})
    assert r.status_code == 200, r.text
    # the same edit again from the same (now stale) read
    r = await d.put("/config/files/lens.jsonc", token, {"text": MAIN, "expectDigest": read["digest"]})
    assert r.status_code == 409 and error_of(r) == "CONFIG_FILE_CHANGED", r.text
    assert "read it again" in r.json()["error"]["message"]
    assert d.config_path.read_text() == edited
    # null: "it did not exist when I read it"
    r = await d.put("/config/files/lens.jsonc", token, {"text": MAIN, "expectDigest": None})
    assert r.status_code == 409 and error_of(r) == "CONFIG_FILE_CHANGED", r.text
    r = await d.put("/config/files/lens.jsonc", token, {"text": MAIN})  # without it: unconditional, as before
    assert r.status_code == 200 and d.config_path.read_text() == MAIN
    r = await d.put("/config/files/lens.jsonc", token, {"text": MAIN, "expectDigest": 5})
    assert r.status_code == 422, r.text


async def test_a_pair_file_write_from_before_an_approval_does_not_lose_it(daemon_factory: DaemonFactory):
    d = await daemon_factory(config=MAIN)
    token = await d.pair("admin", strong=True)
    read = (await d.get("/config/files/pair.json", token)).json()
    await d.register("late")
    late = (await run_lens(d.root, "pair", "approve", "--client", "late")).stdout.splitlines()[-1]
    await d.wait_accepted(late)
    r = await d.put("/config/files/pair.json", token, {"text": read["text"], "expectDigest": read["digest"]})
    assert r.status_code == 409 and error_of(r) == "CONFIG_FILE_CHANGED", r.text
    await d.wait_accepted(late)  # (the write without the approval would have revoked it)
    fresh = (await d.get("/config/files/pair.json", token)).json()
    r = await d.put("/config/files/pair.json", token, {"text": fresh["text"], "expectDigest": fresh["digest"]})
    assert r.status_code == 200, r.text


def _waiting_on(lock: Path) -> bool:
    """Whether some lock request on ``lock`` waits (``->`` rows of /proc/locks)."""
    inode = os.stat(lock).st_ino
    return any(line.split()[1] == "->" and line.split()[-3].endswith(f":{inode}")
               for line in Path("/proc/locks").read_text().splitlines() if len(line.split()) > 3)


async def test_a_pair_file_write_takes_the_pair_lock(daemon_factory: DaemonFactory):
    d = await daemon_factory(config=MAIN)
    token = await d.pair("admin", strong=True)
    read = (await d.get("/config/files/pair.json", token)).json()
    lock = Path(str(d.pair_path) + ".lock")
    fd = os.open(lock, os.O_RDWR)
    result: dict = {}
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what `lens pair approve` holds while it rewrites the file

        async def write() -> None:
            result["r"] = await d.put("/config/files/pair.json", token,
                                      {"text": read["text"], "expectDigest": read["digest"]})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            await wait_until(lambda: trio.to_thread.run_sync(_waiting_on, lock), what="the write waiting for the lock")
            # an approval under the lock, as `lens pair approve` makes it
            data = json.loads(d.pair_path.read_text())
            data["clients"].append({"clientId": "approved-meanwhile", "name": "n"})
            tmp = d.pair_path.with_name(".pair.json.test")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, d.pair_path)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    r = result["r"]
    assert r.status_code == 409 and error_of(r) == "CONFIG_FILE_CHANGED", r.text
    assert "approved-meanwhile" in d.pair_path.read_text()


async def test_a_malformed_expected_digest_is_400_not_changed(daemon_factory: DaemonFactory):
    """A value that no GET gives was answered 409 "changed since it was read", which sent the
    client to read again and fail the same way (found probing beside test_http_fuzz.py)."""
    d = await daemon_factory(config=MAIN)
    token = await d.pair("admin", strong=True)
    digest = (await d.get("/config/files/lens.jsonc", token)).json()["digest"]
    for bad in ["", "x" * 64, digest.upper(), "sha256:" + digest, digest + "0", digest[:-1], "X" * 5000]:
        r = await d.put("/config/files/lens.jsonc", token, {"text": MAIN.replace("7420", "7421"), "expectDigest": bad})
        assert r.status_code == 400 and error_of(r) == "INVALID_ARGUMENT", (bad[:80], r.text)
        assert "64 lowercase hex digits" in r.json()["error"]["message"]
    assert d.config_path.read_text() == MAIN
    r = await d.put("/config/files/lens.jsonc", token, {"text": MAIN, "expectDigest": digest})
    assert r.status_code == 200, r.text
