"""Keys on standard error (F-MOD-6), where nothing scrubbed them before: the lines of a local
executor (started without any key, it cannot know what to scrub; the daemon relays its standard
error scrubbed with its own keys), those of ``lens executor serve`` started by hand in a shell
holding keys, and tracebacks Python prints itself for a defect of the ``lens`` CLI.

Real processes: ``lens serve`` with its executor child, ``lens executor serve``, a Python process
running the CLI's hooks. A leak is :data:`PIECE` characters of the canary anywhere shown."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import httpx2
import trio

from events.secrets import marker

from .conftest import LIMIT, ServeProcess, as_daemon, lens_command, run_tool, served_once, wait_until
from .keyleaks import leaks
from .test_keys_echoed import KEY, KEY_ENV, MARK, PROVIDERS, write_config

ENV = {**os.environ, KEY_ENV: KEY}
REPO = Path(__file__).resolve().parents[2]


async def test_a_local_executors_lines_reach_the_daemons_stderr_without_the_daemons_keys(tmp_path: Path) -> None:
    # The executor quotes paths in its warnings; here its state directory lies under a data
    # directory named with the key, and a directory in place of a command record makes it warn
    # "cannot remove <path>: Is a directory" when it starts.
    cwd = tmp_path
    write_config(cwd, {"providers": PROVIDERS, "defaultModel": "faux/faux-1"})
    (cwd / "workspaces" / "p").mkdir(parents=True)
    data = f"d-{KEY}"
    serve = ServeProcess(cwd, "--data", data, env=ENV)
    async with served_once(serve) as url:
        async with httpx2.AsyncClient(base_url=url, timeout=LIMIT) as client:
            d = as_daemon(cwd, url, client)
            token = await d.pair("c1", strong=True, via="cli")
            project = await d.project(token, "p")
            state = cwd / data / "executors" / hashlib.sha256(project["id"].encode()).hexdigest()[:16]
            (state / "commands" / "12345").mkdir(parents=True)
            sid = (await d.session(token, project["id"]))["id"]
            body = await run_tool(d, token, sid, "r1", "read_file", {"path": "."})
            assert body["status"] == "ok", body

            async def warned() -> bool:
                return "12345: Is a directory" in (cwd / serve.stderr_name).read_text(errors="replace")
            await wait_until(warned, what="the executor's warning on the daemon's stderr")
    err = (cwd / serve.stderr_name).read_text(errors="replace")
    lines = [x for x in err.splitlines() if "12345: Is a directory" in x]
    assert lines and all(MARK in x for x in lines), err
    assert any("cannot remove" in x for x in lines), err
    assert leaks("stderr", err, [KEY]) == [], err
    assert leaks("stdout", "\n".join(serve.lines), [KEY]) == []


async def test_lens_executor_serve_scrubs_its_lines_of_the_keys_in_its_environment(tmp_path: Path) -> None:
    # A remote executor started by hand: its shell holds the SDKs' keys (and its token).
    key = "sk-ant-api03-R8tY2uI6oP9aS3dF7gHexecCanaryZ9"
    ws = tmp_path / "ws"
    ws.mkdir()
    state = tmp_path / f"s-{key}"
    (state / "commands" / "12345").mkdir(parents=True)
    env = {**os.environ, "ANTHROPIC_API_KEY": key, "LENS_EXECUTOR_TOKEN": "t" * 40}
    proc = subprocess.Popen([*lens_command(), "executor", "serve", "--workspace", str(ws), "--listen", "127.0.0.1:0",
                             "--state", str(state)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None
        with trio.fail_after(LIMIT):
            line = await trio.to_thread.run_sync(proc.stdout.readline)
        assert b"listening on" in line, line
    finally:
        proc.terminate()
        _, err_bytes = proc.communicate(timeout=LIMIT)
    err = err_bytes.decode(errors="replace")
    assert "12345: Is a directory" in err and marker("ANTHROPIC_API_KEY") in err, err
    assert leaks("executor stderr", err, [key]) == [], err


def test_a_traceback_python_prints_for_a_defect_holds_no_key(tmp_path: Path) -> None:
    # The CLI installs these hooks before any command runs (and catches what reaches its main):
    # an exception no layer turned into `lens: CODE: message` is printed with its traceback, as
    # Python prints it, but without the keys the command knows; in a thread too.
    program = (
        "import os, threading\n"
        "from events.secrets import Secrets\n"
        "from runtime.terminal import scrub_uncaught\n"
        f"scrub_uncaught(Secrets.from_environ([{KEY_ENV!r}], os.environ))\n"
        f"value = os.environ[{KEY_ENV!r}]\n"
        "def in_thread():\n"
        "    raise KeyError('thread ' + value[:17])\n"
        "t = threading.Thread(target=in_thread); t.start(); t.join()\n"
        "raise ValueError('main ' + value[5:30])\n")
    out = subprocess.run([sys.executable, "-c", program], cwd=REPO, env={**ENV, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=LIMIT)
    assert out.returncode == 1, out.stderr
    assert "Traceback" in out.stderr and "KeyError" in out.stderr and "ValueError" in out.stderr, out.stderr
    assert out.stderr.count(MARK) == 2, out.stderr
    assert "lens: INTERNAL: ValueError" in out.stderr
    assert leaks("stderr", out.stderr, [KEY]) == [], out.stderr
