"""docs/executor.md: its command lines, defaults, numbers, start refusals and tool table, against `lens
executor serve` and the executor's constants.

Read as a user reads the page: what it shows is taken from its own text where that is robust,
so that the page and the code drifting apart fail here (see test_docs_examples.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.contract.error_codes import ROOT
from tests.daemon.conftest import lens_command
from .docs_pages import (EXECUTOR, CODE_PATTERN, one_match, section_of, lens_help, shown_command_lines,
    assert_taken)


def test_every_lens_executor_line_of_the_executor_page_is_one_lens_takes():
    """The remote host's ``lens executor serve`` line (with ``--state`` and ``--token-stdin``),
    and the line the pool spawns, which is also the one ``runtime/executors.py`` runs."""
    commands = shown_command_lines(EXECUTOR, "executor serve")
    # the alternative the block gives as a comment: `# or: ... --token-stdin < token-file`
    commands.append(["executor", "serve", *re.findall(r"--[a-z-]+", one_match(r"# or: \.\.\. ([^\n]*)", EXECUTOR).group(1))])
    flags = {f for c in commands for f in c if f.startswith("--")}
    assert {"--workspace", "--listen", "--state", "--token-stdin"} <= flags, commands
    assert_taken([c for c in commands if c[:2] == ["executor", "serve"]])
    spawn = one_match(r"`(python -m runtime\.cli executor serve [^`]*)`", EXECUTOR).group(1)
    spawn_flags = re.findall(r"--[a-z-]+", spawn)
    assert_taken([["executor", "serve", *spawn_flags]])
    source = (ROOT / "runtime" / "executors.py").read_text(encoding="utf-8")
    assert re.findall(r'"(--[a-z-]+)"', source.split('"executor", "serve"', 1)[1].split("]", 1)[0]) == spawn_flags


def test_the_executor_numbers_and_defaults_are_the_code_s():
    from runtime.executors import IDLE_STOP_S
    from tools.executor import MAX_TOKEN_CHARS, MIN_TOKEN_CHARS

    minutes = int(one_match(r"for (\d+) minutes \(`IDLE_STOP_S`\)", EXECUTOR).group(1))
    assert IDLE_STOP_S == minutes * 60
    listen = one_match(r"Without `--listen` it listens on `([0-9.]+:\d+)`", EXECUTOR).group(1)
    assert f"(default {listen})" in lens_help(["executor", "serve"])
    bounds = one_match(r"# (\d+) to (\d+) printable ASCII characters", EXECUTOR)
    assert bounds.groups() == (str(MIN_TOKEN_CHARS), str(MAX_TOKEN_CHARS))


async def _executor(cwd: Path, token: str | None, *argv: str) -> tuple[int | None, str, str]:
    """``lens executor serve ARGV`` with ``LENS_EXECUTOR_TOKEN`` = ``token``: (None, its listening
    line, "") once it listens (it is then stopped), or (exit code, "", its last stderr line)."""
    import os

    import trio

    env = {k: v for k, v in os.environ.items() if k != "LENS_EXECUTOR_TOKEN"}
    if token is not None:
        env["LENS_EXECUTOR_TOKEN"] = token
    proc = await trio.lowlevel.open_process([*lens_command(), "executor", "serve", *argv], cwd=cwd, env=env,
                                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE)
    try:
        with trio.fail_after(60):
            out = b""
            while b"\n" not in out:
                chunk = await proc.stdout.receive_some(4096)
                if not chunk:
                    break
                out += chunk
            if out.startswith(b"lens executor: listening on "):
                proc.terminate()
                await proc.wait()
                return None, out.decode().splitlines()[0], ""
            err = b""
            while chunk := await proc.stderr.receive_some(4096):
                err += chunk
            return await proc.wait(), "", err.decode().strip().splitlines()[-1]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_the_executor_starts_and_refuses_as_the_page_says(tmp_path: Path):
    """The token's bounds (16 and 4096 characters start; 15, none and 4097 are refused) and the
    refusals the page lists, each ``lens executor: CODE: message``, exit 2; a started one prints
    ``lens executor: listening on 127.0.0.1:<port>``."""
    low, high = (int(n) for n in one_match(r"# (\d+) to (\d+) printable ASCII characters", EXECUTOR).groups())
    refusals = dict(re.findall(rf"`({CODE_PATTERN})`\s+\(([^)]*(?:\([^)]*\)[^)]*)*)\)", one_match(
        r"When it cannot start it prints `lens executor: CODE: message` on stderr and exits 2:(.*?)\n\n",
        EXECUTOR, re.S).group(1)))
    assert {"EXECUTOR_TOKEN_MISSING", "EXECUTOR_TOKEN_INVALID", "INVALID_ARGUMENT", "LISTEN_FAILED",
            "WORKSPACE_INVALID", "STATE_DIR_INVALID"} == set(refusals), refusals
    assert f"shorter than {low} characters" in refusals["EXECUTOR_TOKEN_MISSING"]
    assert f"longer than {high} characters" in refusals["EXECUTOR_TOKEN_INVALID"]
    ws, state = tmp_path / "ws", tmp_path / "state"
    ws.mkdir()
    base = ["--workspace", str(ws), "--listen", "127.0.0.1:0", "--state", str(state)]
    for token in ("t" * low, "t" * high):
        code, line, err = await _executor(tmp_path, token, *base)
        assert code is None and re.fullmatch(r"lens executor: listening on 127\.0\.0\.1:\d+", line), (len(token), err)
    cases = [
        ("t" * (low - 1), base, "EXECUTOR_TOKEN_MISSING"),
        (None, base, "EXECUTOR_TOKEN_MISSING"),
        ("t" * (high + 1), base, "EXECUTOR_TOKEN_INVALID"),
        ("t" * (low - 1) + "\u00e9", base, "EXECUTOR_TOKEN_INVALID"),
        ("t" * low, ["--workspace", str(ws), "--listen", "localhost", "--state", str(state)], "INVALID_ARGUMENT"),
        ("t" * low, ["--workspace", str(tmp_path / "none"), "--listen", "127.0.0.1:0", "--state", str(state)],
         "WORKSPACE_INVALID"),
        ("t" * low, ["--workspace", str(ws), "--listen", "127.0.0.1:0", "--state", str(ws / "st")], "STATE_DIR_INVALID"),
    ]
    for token, argv, expected in cases:
        code, _, err = await _executor(tmp_path, token, *argv)
        assert code == 2 and err.startswith(f"lens executor: {expected}: "), (expected, token and len(token), err)


def test_the_command_and_connection_numbers_of_the_executor_page_are_the_code_s():
    from runtime import executor_client as client
    from tools import workspace_tools
    from tools.executor import PROTOCOL_VERSION, commands, runs, server

    commands_text = section_of(EXECUTOR, "## Commands (`Run(CommandRequest) -> stream CommandEvent`)")
    default, most = (int(n.replace(" ", "")) for n in
                     one_match(r"`timeout_ms` \(default ([\d ]+), at most ([\d ]+)\)", commands_text).groups())
    assert (default, most) == (commands.DEFAULT_TIMEOUT_MS, commands.MAX_TIMEOUT_MS)
    assert most == workspace_tools.MAX_COMMAND_TIMEOUT_MS
    assert float(one_match(r"then SIGKILL after (\d+) s", commands_text).group(1)) == commands.KILL_GRACE_S
    out_default, out_most = one_match(r"`max_output_bytes` \(default (\d+) MiB, at most (\d+) MiB\)", commands_text).groups()
    assert int(out_default) * 2**20 == commands.DEFAULT_MAX_OUTPUT
    assert int(out_most) * 2**20 == commands.MAX_OUTPUT == workspace_tools.MAX_COMMAND_OUTPUT
    running, threads = one_match(r"\*\*At most (\d+) commands run at once\*\* on one executor \(each holds a server thread"
                            r" while it\s+streams; the server has (\d+)\)", commands_text).groups()
    assert (int(running), int(threads)) == (server.MAX_RUNNING_COMMANDS, server.SERVER_THREADS)
    assert float(one_match(r"takes none of its output for (\d+) s is cancelled", commands_text).group(1)) == server.SEND_STALL_S
    assert float(one_match(r"read for ([\d.]+) s, then what is left is ended", commands_text).group(1)) == commands.DRAIN_GRACE_S
    kib, passing = one_match(r"A command is at most (\d+) KiB of UTF-8\s+\(([\d,]+) bytes pass, one more is `COMMAND_TOO_LONG`",
                        commands_text).groups()
    assert int(kib) * 1024 == int(passing.replace(",", "")) == workspace_tools.MAX_COMMAND_BYTES
    assert float(one_match(r"leaves ([\d.]+) s\s+\(`ABORT_OUTPUT_WAIT_S`\) from the answer",
                      commands_text).group(1)) == workspace_tools.ABORT_OUTPUT_WAIT_S
    room, most_s = one_match(r"most until ([\d.]+) s before the call's deadline \((\d+) s without one\)",
                             commands_text).groups()
    assert (float(room), float(most_s)) == (server.STOP_ANSWER_ROOM_S, server.STOP_ANSWER_MAX_S)
    assert float(one_match(r"at most ([\d.]+) s \(`ABORT_STOP_ANSWER_WAIT_S`\) from the `Stop` sent",
                      commands_text).group(1)) == workspace_tools.ABORT_STOP_ANSWER_WAIT_S
    assert float(one_match(r"leaves ([\d.]+) s from the `Stop` sent", commands_text).group(1)
                 ) == workspace_tools.ABORT_OUTPUT_WAIT_S
    run_id, past = one_match(r"`CommandRequest\.run_id` is at most (\d+) characters \((\d+) is `INVALID_ARGUMENT`",
                        commands_text).groups()
    assert int(run_id) == runs.MAX_RUN_ID_CHARS and int(past) == int(run_id) + 1
    assert int(one_match(r"Both were added within `core-executor-rpc: (\d+)`", commands_text).group(1)) == PROTOCOL_VERSION

    contract = section_of(EXECUTOR, "## Connection contract")
    assert int(one_match(r"`lens-protocol: (\d+)`", contract).group(1)) == PROTOCOL_VERSION
    assert int(one_match(r"reply past the (\d+) MiB a gRPC message may hold", contract).group(1)) * 2**20 == client.MAX_MESSAGE_BYTES
    assert int(one_match(r"the\s+channel holds (\d+) events", contract).group(1)) == client.STREAM_BUFFER_EVENTS
    assert int(one_match(r"a fixed (\d+) MiB HTTP/2 receive window", contract).group(1)) * 2**20 == client.RECEIVE_WINDOW_BYTES
    limiter = one_match(r"Open streams share a\s+`CapacityLimiter` \((\d+)\)", contract).group(1)
    assert f"trio.CapacityLimiter({limiter})" in (ROOT / "runtime" / "executor_client.py").read_text()


def _tool_table() -> dict[str, tuple[list[str], list[str]]]:
    """The executor page's tool table: tool -> (required arguments, optional ones), as written."""
    text = section_of(EXECUTOR, "## Tools (`Call(tool, call_id, arguments_json) -> ToolReply`)")
    out = {}
    for tool, args in re.findall(r"^\| `([a-z_]+)` \| `([^`]*)`", text, re.M):
        names = [a.split(":")[0].strip() for a in re.split(r",\s*", args)]
        out[tool] = ([n for n in names if not n.endswith("?")], [n.rstrip("?") for n in names if n.endswith("?")])
    return out


def test_the_executor_tool_arguments_are_those_the_executor_takes():
    """Each tool's arguments in the page's table, required and optional (``?``), are the
    executor's ``ARGUMENT_NAMES`` (what a call is checked against before it runs)."""
    from tools.executor.server import ARGUMENT_NAMES

    table = _tool_table()
    assert set(ARGUMENT_NAMES) <= set(table), table
    for tool, (required, optional) in ARGUMENT_NAMES.items():
        assert table[tool] == (list(required), list(optional)), (tool, table[tool], (required, optional))


async def test_a_browse_list_without_a_path_lists_the_workspace_root(tmp_path: Path):
    """``browse_list`` run on a real executor with the arguments its row marks optional left out."""
    from tests.executor.conftest import running_executor

    required, _ = _tool_table()["browse_list"]
    async with running_executor(tmp_path) as (ex, client):
        (ex.workspace / "a.txt").write_text("x")
        outcome = await client.call("browse_list", dict.fromkeys(required, "."))
    assert [e["name"] for e in outcome.result["entries"]] == ["a.txt"], outcome
    shape = one_match(r"^\| `browse_list` \| [^|]* \| `\{([^`]*)\}` \|", EXECUTOR, re.M).group(1)
    entry = re.search(r"entries: \[\{([^}]*)\}\]", shape).group(1)
    top = re.sub(r"entries: \[\{[^}]*\}\]", "entries", shape)
    assert sorted(outcome.result) == sorted(k.strip() for k in top.split(","))
    assert sorted(outcome.result["entries"][0]) == sorted(k.strip() for k in entry.split(","))


def test_the_file_events_the_executor_page_names_have_its_fields():
    from events import types as t

    edited = one_match(r"a `file\.edited` event \(`([^`]*)`", EXECUTOR).group(1)
    fields = []
    for name in re.split(r",\s*", edited):
        fields += [name.replace("before/after", side) for side in ("before", "after")] if "before/after" in name else [name]
    assert fields == list(t.FileEdited.__struct_fields__), fields
    reverted = one_match(r"`file\.reverted \{([^}]*)\}`", EXECUTOR).group(1).split(", ")
    assert reverted == list(t.FileReverted.__struct_fields__)


def test_the_restart_and_probe_numbers_of_the_executor_page_are_the_code_s():
    import inspect

    from runtime import executors

    restart = section_of(EXECUTOR, "## Executor restart and reconnect")
    assert float(one_match(r"and\s+`get\(\)`\s+waits\s+up\s+to\s+(\d+)\s+s\s+for\s+such\s+a\s+child\s+to\s+exit", restart).group(1)) == executors.LOST_GRACE_S
    probe = section_of(EXECUTOR, "## sharedFilesystem probe")
    prefix, size = one_match(r"a short-lived random file `([.\w-]+)<random>` \((\d+) random bytes\)", probe).groups()
    source = inspect.getsource(executors.ExecutorPool.probe_shared)
    assert prefix in source and f"token_bytes({size})" in source.replace("os.urandom", "token_bytes"), source
