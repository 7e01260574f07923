"""The provider SDKs' import begins as the daemon starts serving, when a provider it serves uses an
SDK (``runtime.providers.sdk.SdkImport``, begun by ``runtime.daemon.serve``), so that a first
turn does not wait 2 to 3 s for it; nothing is imported on the faux-only default config.

Each case runs the real daemon (``serve``, in process) in a fresh interpreter, where the SDKs are
not yet imported, as in a ``lens serve`` just started; the case's process holds the ``openai``
import, with an import hook, where the case says so, to see what answers meanwhile.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import importlib.abc, importlib.machinery, json, sys, tempfile, threading

entered = []  # per search for the openai package: whether the loop's (main) thread searched
began, release = threading.Event(), threading.Event()
HOLD = sys.argv[1] == "hold"


class Held(importlib.abc.Loader):
    # The package's code waits for the case before it runs (the package's own lock is held
    # meanwhile: another import of it waits for this one; the finders' lock is not).
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        if HOLD and threading.current_thread() is not threading.main_thread():
            began.set()
            release.wait(60)
        self.loader.exec_module(module)


class Hold(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "openai":
            return None
        entered.append(threading.current_thread() is threading.main_thread())
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        spec.loader = Held(spec.loader)
        return spec


sys.meta_path.insert(0, Hold())

from pathlib import Path

import httpx2
import trio

from runtime.config import Config, parse_config
from runtime.daemon import ServeOptions, serve
from tests.daemon.conftest import LIMIT, SDK_IMPORT_LIMIT, Daemon, wait_until
from tests.providers.servers.base import ScriptedServer
from tests.providers.servers.openai_chat import chat_stream


async def main(root):
    out = {}
    async with trio.open_nursery() as nursery:
        server = ScriptedServer()
        url = await server.start(nursery)
        server.push(chat_stream(text="noon"))
        config_path = root / "config" / "lens.jsonc"
        config_path.parent.mkdir()
        cfg = Config()
        if sys.argv[1] != "faux":
            config_path.write_text(json.dumps({
                "providers": [{"id": "loop", "protocol": "openai-chat", "baseUrl": f"{url}/v1", "maxRetries": 0,
                               "models": [{"id": "m"}]}], "defaultModel": "loop/m"}))
            cfg = parse_config(config_path.read_bytes(), str(config_path))
        assert "openai" not in sys.modules and "anthropic" not in sys.modules, "imported before the start"
        stop, done = trio.Event(), trio.Event()

        async def run(task_status):
            try:
                await serve(ServeOptions(cfg, config_path, root / "data", "127.0.0.1", 0), task_status=task_status,
                            stop=stop, announce=lambda line: None)
            finally:
                done.set()

        [base] = await nursery.start(run)
        async with httpx2.AsyncClient(base_url=base, timeout=LIMIT) as client:
            d = Daemon(root, config_path, root / "config" / "pair.json", root / "data", base,
                       int(base.rsplit(":", 1)[1]), client, stop, done)
            if HOLD:  # the import began with the start, before any request, and is held there
                assert await trio.to_thread.run_sync(began.wait, LIMIT), "no import began"
            out["health"] = (await d.get("/health")).status_code  # (answered while the import is held)
            token = await d.pair("c1", strong=True)
            sid = (await d.session(token, (await d.project(token))["id"]))["id"]
            await d.submit(token, sid, "r1", "what time is it?")
            if HOLD:  # the turn waits for the import under way
                await wait_until(lambda: _running(d, token, sid), what="the turn running")
                out["asked_while_held"] = len(server.bodies)
                release.set()
            view = await d.wait_idle(token, sid, timeout=SDK_IMPORT_LIMIT)
            out["answer"] = view["items"][-1]["text"]
            out["model_failed"] = [e["body"] for e in await d.events(token, sid) if e["kind"] == "model.failed"]
        stop.set()
        with trio.fail_after(LIMIT):
            await done.wait()
        nursery.cancel_scope.cancel()
    out["entered"] = entered
    out["imported"] = sorted(name for name in ("openai", "anthropic") if name in sys.modules)
    print(json.dumps(out))


async def _running(d, token, sid):
    return (await d.view(token, sid))["status"] == "running"


with tempfile.TemporaryDirectory() as tmp:
    trio.run(main, Path(tmp))
"""


def _run(mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_import_begins_at_start_health_answers_meanwhile_and_a_turn_waits_for_that_one_import() -> None:
    out = _run("hold")
    assert out["health"] == 200
    assert out["asked_while_held"] == 0  # (the turn waited for the import)
    assert (out["answer"], out["model_failed"]) == ("noon", [])
    # one import of the package, in a worker thread: the turn's waited for it, began none of its own
    assert out["entered"] == [False], out
    assert out["imported"] == ["anthropic", "openai"]


def test_a_turn_started_as_soon_as_the_daemon_serves_is_answered() -> None:
    out = _run("go")
    assert (out["health"], out["answer"], out["model_failed"]) == (200, "noon", [])
    assert out["entered"] == [False], out


def test_the_faux_only_default_config_imports_no_sdk() -> None:
    out = _run("faux")
    assert (out["health"], out["entered"], out["imported"]) == (200, [], []), out
