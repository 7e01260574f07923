"""Listed config files that are not regular files (a directory or a FIFO in their place), and
config files too large to parse: clear answers, no leaked descriptor, nothing blocked.

The daemon runs in process, so its open descriptors are this process's (``/proc/self/fd``); a
FIFO in the pair file's place would have blocked the one event loop both share, so a guard
thread opens the FIFO's other end after a bound and the test fails if it had to."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import trio

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # the limit for a config file (runtime.config.MAX_CONFIG_BYTES)

from .conftest import DaemonFactory, error_of, run_lens, wait_until

MAIN = '{"server": {"port": 7420}}\n'


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class FifoGuard:
    """Opens ``path`` for writing (and closes it) once ``seconds`` pass without :meth:`cancel`,
    which unblocks any reader stuck opening the FIFO; :attr:`fired` says whether it had to."""

    def __init__(self, path: Path, seconds: float = 5.0) -> None:
        self.path, self.fired, self._done = path, False, threading.Event()
        self._thread = threading.Thread(target=self._run, args=(seconds,), daemon=True)
        self._thread.start()

    def _run(self, seconds: float) -> None:
        if self._done.wait(seconds):
            return
        self.fired = True
        while not self._done.is_set():
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # (no reader yet, or no FIFO any more)
                pass
            self._done.wait(0.05)

    def cancel(self) -> None:
        self._done.set()
        self._thread.join()


@pytest.mark.parametrize("kind", ["directory", "fifo"])
async def test_a_listed_file_that_is_not_a_regular_file_is_a_clear_422(daemon_factory: DaemonFactory, kind: str):
    d = await daemon_factory(config=MAIN)
    token = await d.pair("admin", strong=True)
    path = d.config_path
    path.unlink()
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    guard = FifoGuard(path)
    try:
        files = {f["name"]: f for f in (await d.get("/config/files", token)).json()["files"]}
        assert files["lens.jsonc"]["exists"] is True and files["lens.jsonc"]["editable"] is False
        fds = open_fds()
        for _ in range(5):
            r = await d.get("/config/files/lens.jsonc", token)
            assert r.status_code == 422 and error_of(r) == "CONFIG_FILE_NOT_REGULAR", r.text
            assert f"a {'directory' if kind == 'directory' else 'FIFO'}" in r.json()["error"]["message"], r.text
        assert open_fds() == fds  # (each GET of a directory leaked its descriptor)
        r = await d.put("/config/files/lens.jsonc", token, {"text": MAIN})
        assert r.status_code == 422 and error_of(r) == "CONFIG_FILE_NOT_REGULAR", r.text
        assert "nothing was changed" in r.json()["error"]["message"]
    finally:
        guard.cancel()
    assert not guard.fired, "a request blocked on the FIFO"
    assert path.is_dir() if kind == "directory" else path.is_fifo()


async def test_a_fifo_in_place_of_the_pair_file_is_an_invalid_pair_file_and_blocks_nothing(daemon_factory: DaemonFactory):
    d = await daemon_factory(config=MAIN)
    token = await d.pair("admin", strong=True)
    d.pair_path.unlink()
    os.mkfifo(d.pair_path)
    guard = FifoGuard(d.pair_path)
    try:
        r = await wait_until(lambda: _status_is(d, token, 503), what="the pair file refused")
        assert error_of(r) == "PAIR_FILE_INVALID" and "FIFO" not in r.text  # (the reason is in the log)
        assert (await d.get("/health")).status_code == 200
        r = await d.post("/pair/requests", body={"clientId": "newcomer", "name": ""})
        assert r.status_code == 503 and error_of(r) == "PAIR_FILE_INVALID", r.text
        out = await run_lens(d.root, "pair", "list", check=False)
        assert out.returncode == 2 and "PAIR_FILE_INVALID" in out.stderr and "a FIFO" in out.stderr, out.stderr
        r = await d.get("/config/files/pair.json", token)  # (every credential is refused meanwhile)
        assert r.status_code == 503
    finally:
        guard.cancel()
    assert not guard.fired, "the daemon blocked on the FIFO"
    d.pair_path.unlink()
    await d.wait_refused(token)  # no pair file: no clients


async def _status_is(d, token: str, status: int):
    r = await d.get("/projects", token)
    return r if r.status_code == status else None


async def test_a_config_write_larger_than_the_config_limit_is_refused(daemon_factory: DaemonFactory):
    d = await daemon_factory(config={"server": {"maxBodyBytes": 16 * 1024 * 1024}})
    token = await d.pair("admin", strong=True)
    (d.config_dir / "extra.json").write_text("{}\n")
    before = {name: (d.config_dir / name).read_bytes() for name in ("lens.jsonc", "extra.json")}
    big = '{"server": {"port": 7420}}\n//' + "x" * MAX_CONFIG_BYTES + "\n"
    for name in ("lens.jsonc", "extra.json"):
        r = await d.put(f"/config/files/{name}", token, {"text": big})
        assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
        assert f"larger than {MAX_CONFIG_BYTES} bytes" in r.json()["error"]["message"], r.text
    assert {name: (d.config_dir / name).read_bytes() for name in ("lens.jsonc", "extra.json")} == before


MAX_PAIR_FILE_BYTES = 64 * 1024 * 1024  # the limit for a pair file (runtime.pairing.MAX_PAIR_FILE_BYTES)


async def test_a_pair_file_write_larger_than_the_pair_file_limit_is_refused(daemon_factory: DaemonFactory):
    # With server.maxBodyBytes above the pair file's own limit, such a write was 200 and left a
    # pair file the daemon will not read: every credential, the writer's too, was 503 from then
    # on, and the API could no longer fix it.
    d = await daemon_factory(config={"server": {"maxBodyBytes": MAX_PAIR_FILE_BYTES + 1024 * 1024}})
    token = await d.pair("admin", strong=True)
    before = d.pair_path.read_bytes()
    r = await d.get("/config/files/pair.json", token)
    assert r.status_code == 200, r.text
    big = r.json()["text"] + " " * MAX_PAIR_FILE_BYTES
    r = await d.put("/config/files/pair.json", token, {"text": big})
    assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text[:500]
    assert f"larger than {MAX_PAIR_FILE_BYTES} bytes" in r.json()["error"]["message"], r.text[:500]
    assert d.pair_path.read_bytes() == before
    assert (await d.get("/projects", token)).status_code == 200


async def test_start_and_lens_pair_refuse_a_config_file_past_the_limit_or_not_a_file(tmp_path: Path):
    (tmp_path / "big.jsonc").write_text("{}//" + "x" * MAX_CONFIG_BYTES)
    for args in (["serve", "--port", "0", "--data", "d"], ["pair", "list"]):
        out = await run_lens(tmp_path, *args, "--config", "big.jsonc", check=False)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert f"lens: CONFIG_INVALID: big.jsonc: the config is larger than {MAX_CONFIG_BYTES} bytes" in out.stderr
        # (/dev/zero was read without end)
        out = await run_lens(tmp_path, *args, "--config", "/dev/zero", check=False)
        assert out.returncode == 2 and "CONFIG_INVALID" in out.stderr and "a character device" in out.stderr, out.stderr
    os.mkfifo(tmp_path / "fifo.jsonc")
    with trio.fail_after(20):
        out = await run_lens(tmp_path, "pair", "list", "--config", "fifo.jsonc", check=False)
    assert out.returncode == 2 and "a FIFO, not a regular file" in out.stderr, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.jsonc", "fifo.jsonc"]


UNSTARTABLE = [
    {"providers": [{"id": "d", "protocol": "faux", "script": [{"bogus": 1}]}]},
    {"providers": [{"id": "d", "protocol": "faux", "script": [5]}]},
    {"providers": [{"id": "d", "protocol": "faux", "enabled": False, "script": [{"text": "x", "delayMs": -1}]}]},
    {"pairFile": "p\u0000x"},
    {"pairFile": "~nosuchuser-lens-test/pair.json"},
    {"dataDir": "~nosuchuser-lens-test/data"},
    {"executor": {"address": "127.0.0.1:99999", "tokenEnv": "LENS_TEST_TOKEN"}},
]


@pytest.mark.parametrize("config", UNSTARTABLE, ids=["faux-unknown-key", "faux-not-an-object", "faux-disabled-negative-delay",
                                                     "nul-pairFile", "no-home-pairFile", "no-home-dataDir",
                                                     "executor-port-past-65535"])
async def test_a_main_config_write_the_next_start_would_refuse_is_refused_with_starts_message(
        daemon_factory: DaemonFactory, tmp_path: Path, config: dict):
    # The PUT ran only the parse: these were 200, and the next `lens serve` refused to start
    # (or showed a traceback). Now the PUT runs the checks the start runs, and says the same.
    d = await daemon_factory(config=MAIN, root=tmp_path / "root")
    token = await d.pair("admin", strong=True)
    text = json.dumps(config)
    r = await d.put("/config/files/lens.jsonc", token, {"text": text})
    assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
    assert d.config_path.read_text() == MAIN
    message = r.json()["error"]["message"]
    assert message.startswith("lens.jsonc: "), message
    start_dir = tmp_path / "start"
    (start_dir / "config").mkdir(parents=True)
    (start_dir / "config" / "lens.jsonc").write_text(text)
    out = await run_lens(start_dir, "serve", "--port", "0", check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1] == f"lens: CONFIG_INVALID: config/{message}"
    assert sorted(p.name for p in start_dir.iterdir()) == ["config"]
