"""The SDKs are imported off the thread that runs the loop (``runtime.providers.sdk.sdks_imported``).

The first request of an SDK-backed provider in a process imported its SDK on the loop's thread:
2.6 s for ``anthropic`` on an idle 2-core machine, during which the daemon answered nothing,
and under load long enough for hypercorn's keep-alive timeout to close a connection a client had
just sent a request on (the client read a reset). Each case runs in a fresh interpreter (the
SDKs not yet imported, as in a daemon just started) against a loopback server speaking the
protocol, and records, with an import hook, which thread imported each SDK.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import importlib.abc, json, sys, threading

first = {}  # SDK -> whether the loop's (main) thread imported it


class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in ("anthropic", "openai") and name not in first:
            first[name] = threading.current_thread() is threading.main_thread()
        return None


sys.meta_path.insert(0, Watch())

import trio

from runtime.config import ModelConfig
from runtime.providers.anthropic_messages import AnthropicProvider
from runtime.providers.base import ModelRequest
from runtime.providers.openai_chat import OpenAIChatProvider
from runtime.providers.openai_responses import OpenAIResponsesProvider
from projections.session_state import Item
from events import types as t
from tests.providers.servers.anthropic import message_stream
from tests.providers.servers.base import ScriptedServer
from tests.providers.servers.openai_chat import chat_stream
from tests.providers.servers.openai_responses import response_stream

PROTOCOL = sys.argv[1]
CLASSES = {"anthropic": AnthropicProvider, "openai-chat": OpenAIChatProvider,
           "openai-responses": OpenAIResponsesProvider}
REPLIES = {"anthropic": lambda: message_stream(text="noon"), "openai-chat": lambda: chat_stream(text="noon"),
           "openai-responses": lambda: response_stream(text="noon")}


async def main():
    assert "anthropic" not in sys.modules and "openai" not in sys.modules, "imported before the request"
    async with trio.open_nursery() as nursery:
        server = ScriptedServer()
        url = await server.start(nursery)
        server.push(REPLIES[PROTOCOL]())
        provider = CLASSES[PROTOCOL]("p", base_url=url if PROTOCOL == "anthropic" else url + "/v1", api_key="k",
                                     max_retries=0, models={"m1": ModelConfig(id="m1")})
        item = Item("c1", "user", 1, text="what time is it?", parts=[t.TextPart("what time is it?")])
        with trio.fail_after(60):
            result = await provider.stream(ModelRequest("m1", ["You are a test agent."], [item], [], None),
                                           lambda delta: None)
        await provider.aclose()
        nursery.cancel_scope.cancel()
    print(json.dumps({"text": result.text, "first": first}))


trio.run(main)
"""


@pytest.mark.parametrize("protocol", ["anthropic", "openai-chat", "openai-responses"])
def test_a_first_request_imports_the_sdks_off_the_loops_thread(protocol: str) -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, protocol], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["text"] == "noon"
    # both SDKs (a request's errors are read with either's classes), neither on the loop's thread
    assert out["first"] == {"anthropic": False, "openai": False}, out


# A package whose import the test holds half done: its submodule is in, its __init__ waits for
# the test (a gate module both import) and marks itself finished last.
GATE = """import threading
started, release = threading.Event(), threading.Event()
"""
HELD_INIT = """from {gate} import release, started
from . import part
started.set()
release.wait(60)
finished = True
"""


def held_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, str]:
    """A package (:data:`HELD_INIT`) of a fresh name whose import waits for its gate: the gate
    module (``started``, ``release``) and the package's name."""
    import importlib
    import uuid

    tag = uuid.uuid4().hex[:12]
    gate_name, pkg_name = f"held_gate_{tag}", f"held_sdk_{tag}"
    (tmp_path / f"{gate_name}.py").write_text(GATE)
    (tmp_path / pkg_name).mkdir()
    (tmp_path / pkg_name / "__init__.py").write_text(HELD_INIT.format(gate=gate_name))
    (tmp_path / pkg_name / "part.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in (gate_name, pkg_name, f"{pkg_name}.part"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(gate_name), pkg_name


async def test_a_request_waits_for_an_import_another_request_began(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # While a first request's thread is still running an SDK's __init__, every name the check
    # looks for is in sys.modules already (a module is entered there before its code runs). A
    # second request that took that for "imported" went on to `import` it on the loop's thread,
    # which then waited on the module's lock for the rest of the import: the daemon held again.
    import trio.testing

    from runtime.providers.sdk import sdks_imported

    gate, pkg_name = held_package(tmp_path, monkeypatch)
    modules = (pkg_name, f"{pkg_name}.part")
    finished_when_returned: list[bool] = []

    async def second() -> None:
        await sdks_imported(modules)
        finished_when_returned.append(getattr(sys.modules[pkg_name], "finished", False))

    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sdks_imported, modules)
                assert await trio.to_thread.run_sync(gate.started.wait, 30)
                assert all(name in sys.modules for name in modules)  # (the state the check misread)
                nursery.start_soon(second)
                await trio.testing.wait_all_tasks_blocked()
                assert finished_when_returned == []  # still waiting: the import is not done
                gate.release.set()
    finally:
        gate.release.set()  # (the importing thread ends whatever happened)
    assert finished_when_returned == [True]


async def test_requests_during_the_shared_import_wait_for_it_and_begin_none_of_their_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The daemon begins the import as it starts (SdkImport.run); a request that comes while it
    # runs waits for that one: no second thread waits on the module's lock beside it.
    import trio.testing

    from runtime.providers.sdk import SdkImport

    gate, pkg_name = held_package(tmp_path, monkeypatch)
    shared = SdkImport((pkg_name, f"{pkg_name}.part"))
    finished_when_returned: list[bool] = []

    async def request() -> None:
        await shared.ready()
        finished_when_returned.append(getattr(sys.modules[pkg_name], "finished", False))

    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(shared.run)
                assert await trio.to_thread.run_sync(gate.started.wait, 30)
                nursery.start_soon(request)
                nursery.start_soon(request)
                await trio.testing.wait_all_tasks_blocked()
                assert finished_when_returned == []  # still waiting: the import is not done
                assert shared.runs == 1
                gate.release.set()
    finally:
        gate.release.set()  # (the importing thread ends whatever happened)
    assert finished_when_returned == [True, True]
    await shared.ready()  # (imported: nothing begins again)
    assert shared.runs == 1
