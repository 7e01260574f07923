"""The installed ``lens`` script driven as a user at a shell drives it, on the cases the earlier
command-line passes do not list: ``lens executor serve``'s ``--state`` and ``--workspace`` written
empty or with a leading ``~``."""

from __future__ import annotations

import os
import pwd
import secrets
import shlex
import subprocess
from pathlib import Path

import pytest

from runtime.cli import build_parser
from runtime.pairing import PairStore

from tests.cli.lens_script import executor_serve, lens, lens_script, write_log
from tests.cli.test_pair_cli import pending_client
from tests.daemon.conftest import ServeProcess, served_once

LOOPBACK = ("--listen", "127.0.0.1:0")


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A working directory, a home directory and a workspace (``~/ws``), each empty."""
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    (home / "ws").mkdir(parents=True)
    return cwd, home, home / "ws"


def test_an_empty_state_directory_is_refused_not_taken_for_the_default(places: tuple[Path, Path, Path]) -> None:
    # `--state ""` (as `--state "$STATE"` with STATE unset writes it) served with the default
    # state directory, as if --state were left out, where `--workspace ""` and `lens serve --data ""`
    # are refused.
    cwd, home, workspace = places
    res = executor_serve(*LOOPBACK, "--workspace", str(workspace), "--state", "", cwd=cwd, home=home)
    assert (res.returncode, res.stdout) == (2, ""), (res.returncode, res.stdout, res.stderr)
    assert res.stderr == "lens executor: STATE_DIR_INVALID: the command line: --state must be a non-empty path " \
                         "without NUL characters\n", res.stderr
    assert not (home / ".local").exists() and list(cwd.iterdir()) == []


def test_a_tilde_in_state_and_workspace_is_the_home_directory(places: tuple[Path, Path, Path]) -> None:
    # `--state ~/state` (quoted, or written `--state=~/state`, which the shell leaves alone) made a
    # directory named `~` in the working directory, and `--workspace ~/ws` was "not a directory",
    # where `~` in `lens serve --data`, `dataDir` and `pairFile` is the home directory.
    cwd, home, _workspace = places
    res = executor_serve(*LOOPBACK, "--workspace", "~/ws", "--state=~/state", cwd=cwd, home=home)
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    assert res.stdout.startswith("lens executor: listening on 127.0.0.1:"), res.stdout
    assert list(cwd.iterdir()) == []  # no directory named `~` here
    assert sorted(p.name for p in (home / "state").iterdir()) == ["blobs", "calls", "commands"]


@pytest.mark.parametrize("option", ["--workspace", "--state"])
def test_a_tilde_naming_no_home_directory_is_named(places: tuple[Path, Path, Path], option: str) -> None:
    cwd, home, workspace = places
    args = {"--workspace": ["--workspace", "~nosuchuser-lens/ws"],
            "--state": ["--workspace", str(workspace), "--state", "~nosuchuser-lens/state"]}[option]
    res = executor_serve(*LOOPBACK, *args, cwd=cwd, home=home)
    assert (res.returncode, res.stdout) == (2, ""), (res.returncode, res.stdout, res.stderr)
    code = "WORKSPACE_INVALID" if option == "--workspace" else "STATE_DIR_INVALID"
    value = args[-1]
    assert res.stderr == f"lens executor: {code}: the command line: {option} {value!r}: there is no home " \
                         f"directory of user 'nosuchuser-lens'\n", res.stderr
    assert list(cwd.iterdir()) == [] and not (home / ".local").exists()


def test_a_tilde_after_dot_slash_is_a_directory_of_that_name(places: tuple[Path, Path, Path]) -> None:
    # `--workspace ./~/ws --state ./~/state` served the home directory's ws and made its state under
    # the home directory: pathlib drops the `./`, then expands the `~` it left in front. Only a `~`
    # that begins the value as written is a home directory.
    cwd, home, _workspace = places
    (cwd / "~" / "ws").mkdir(parents=True)
    res = executor_serve(*LOOPBACK, "--workspace", "./~/ws", "--state=./~/state", cwd=cwd, home=home)
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    assert sorted(p.name for p in (cwd / "~" / "state").iterdir()) == ["blobs", "calls", "commands"]
    assert sorted(p.name for p in home.iterdir()) == ["ws"]  # nothing made in the home directory


def test_a_user_tilde_after_dot_slash_is_a_directory_of_that_name(places: tuple[Path, Path, Path]) -> None:
    # `./~root` was /root: the executor served another directory than the one named.
    cwd, home, _workspace = places
    user = pwd.getpwuid(os.getuid()).pw_name
    workspace = cwd / f"~{user}" / f"ws-{secrets.token_hex(8)}"  # (none such in that user's home)
    workspace.mkdir(parents=True)
    res = executor_serve(*LOOPBACK, "--workspace", f"./~{user}/{workspace.name}", "--state", str(home / "state"),
                         cwd=cwd, home=home)
    assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    assert res.stdout.startswith("lens executor: listening on 127.0.0.1:"), res.stdout


@pytest.mark.parametrize("where", ["--data after", "--data before", "dataDir"])
def test_lens_log_reads_a_data_directory_named_dot_slash_tilde(places: tuple[Path, Path, Path], where: str) -> None:
    # `lens log verify --data ./~/data` read the home directory's data (none: "no log"), as did a
    # config's `"dataDir": "./~/data"`.
    cwd, home, _workspace = places
    write_log(cwd / "~" / "data")
    (cwd / "lens.jsonc").write_text('{"dataDir": "./~/data"}')
    args = {"--data after": ["log", "verify", "--data", "./~/data"], "--data before": ["log", "--data=./~/data", "verify"],
            "dataDir": ["log", "verify", "--config", "lens.jsonc"]}[where]
    res = lens(cwd, *args, env={**os.environ, "HOME": str(home)})
    assert (res.returncode, res.stdout) == (0, "ok: 1 event(s) verified\n"), (res.returncode, res.stdout, res.stderr)
    assert sorted(p.name for p in home.iterdir()) == ["ws"]


async def test_lens_serve_keeps_its_log_in_a_data_directory_named_dot_slash_tilde(
        places: tuple[Path, Path, Path]) -> None:
    # `lens serve --data ./~/data` kept its log in the home directory's `data`.
    cwd, home, _workspace = places
    serve = ServeProcess(cwd, "--data", "./~/data", env={**os.environ, "HOME": str(home)})
    async with served_once(serve):
        pass
    assert (cwd / "~" / "data" / "events.db").is_file()
    assert sorted(p.name for p in home.iterdir()) == ["ws"]


# ------------------------------------------------------------ `lens log` with --data or --config twice in one place

TWICE_IN_ONE_PLACE = [
    ("log", "verify", "--data", "a", "--data", "b"),
    ("log", "rebuild", "--data", "a", "--data=b"),
    ("log", "--data", "a", "--data", "b", "stats"),
    ("log", "decode", "--config", "a.jsonc", "--config", "b.jsonc"),
    ("log", "--config", "a.jsonc", "--config=b.jsonc", "rebuild"),
]


@pytest.mark.parametrize("argv", TWICE_IN_ONE_PLACE, ids=[" ".join(a) for a in TWICE_IN_ONE_PLACE])
def test_data_or_config_twice_in_one_place_is_a_usage_error(tmp_path: Path, argv: tuple[str, ...]) -> None:
    # `lens log rebuild --data a --data b` rebuilt b's projections alone, silently, where `lens serve
    # --data a --data b` is a usage error; the documented rule ("given before and after the
    # subcommand, the later one wins") is about two places, not a repeat in one.
    for name in ("a", "b"):
        write_log(tmp_path / name)
        (tmp_path / f"{name}.jsonc").write_text(f'{{"dataDir": "{name}"}}')
    before = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    res = lens(tmp_path, *argv)
    option = "--config" if "--config" in argv else "--data"
    assert (res.returncode, res.stdout) == (2, ""), (res.returncode, res.stdout, res.stderr)
    assert res.stderr.startswith("usage: lens log") and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.splitlines()[-1].endswith(
        f": USAGE_ERROR: argument {option}: given more than once (it takes one value)"), res.stderr
    assert {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()} == before  # nothing rebuilt


@pytest.mark.parametrize("option", ["--data", "--config"])
def test_data_or_config_before_and_after_the_subcommand_the_later_one_wins(tmp_path: Path, option: str) -> None:
    # (the documented rule, kept: one in each place is no repeat)
    write_log(tmp_path / "b")
    (tmp_path / "a.jsonc").write_text('{"dataDir": "a"}')
    (tmp_path / "b.jsonc").write_text('{"dataDir": "b"}')
    first, later = ("a", "b") if option == "--data" else ("a.jsonc", "b.jsonc")
    res = lens(tmp_path, "log", option, first, "verify", option, later)
    assert (res.returncode, res.stdout) == (0, "ok: 1 event(s) verified\n"), (res.returncode, res.stdout, res.stderr)


# ------------------------------------------------------------ an option of a command written before it

BEFORE_THE_COMMAND = [
    (("pair", "--config", "x.jsonc", "list"), "lens pair", "--config", "lens pair list --config x.jsonc"),
    (("pair", "--conf", "x.jsonc", "list"), "lens pair", "--conf", "lens pair list --conf x.jsonc"),
    (("pair", "--client", "c1", "approve"), "lens pair", "--client", "lens pair approve --client c1"),
    (("--data", "d", "log", "verify"), "lens", "--data", "lens log verify --data d"),
    (("--port", "0", "serve"), "lens", "--port", "lens serve --port 0"),
    (("executor", "--workspace", "w", "serve"), "lens executor", "--workspace",
     "lens executor serve --workspace w"),
    # two command levels after it: the option goes after the last (it was put after the first,
    # `lens pair --config x list`, which fails in turn)
    (("--config", "x", "pair", "list"), "lens", "--config", "lens pair list --config x"),
    (("--workspace", "w", "executor", "serve"), "lens", "--workspace", "lens executor serve --workspace w"),
    (("--client", "c 1", "pair", "revoke", "--config", "p.jsonc"), "lens", "--client",
     "lens pair revoke --client 'c 1' --config p.jsonc"),
]


@pytest.mark.parametrize("argv, prog, option, written", BEFORE_THE_COMMAND,
                         ids=[" ".join(case[0]) for case in BEFORE_THE_COMMAND])
def test_an_option_written_before_its_command_is_named(tmp_path: Path, argv: tuple[str, ...], prog: str,
                                                       option: str, written: str) -> None:
    # `lens pair --config x.jsonc list` (as `lens log --config x.jsonc verify` is written) was told
    # "argument COMMAND: invalid choice: 'x.jsonc'": argparse took the option for an unknown one
    # and its value for the command. The option is named, and where it goes.
    res = lens(tmp_path, *argv)
    assert (res.returncode, res.stdout) == (2, ""), (res.returncode, res.stdout, res.stderr)
    assert res.stderr.startswith(f"usage: {prog} ") and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.splitlines()[-1] == (
        f"{prog}: USAGE_ERROR: unrecognized arguments: {option} (an option of the command after it: "
        f"write it there, as in `{written}`)"), res.stderr
    assert list(tmp_path.iterdir()) == []
    # (and the line suggested is one that parses, every word taken)
    suggested = shlex.split(written)[1:]
    assert build_parser(suggested).parse_known_args(suggested)[1] == []


NOT_AN_OPTION_OF_THE_COMMAND = [
    (("pair", "--cofig", "x", "list"), "lens pair", "x"),  # no such option anywhere
    (("pair", "--data", "d", "list"), "lens pair", "d"),  # an option of other commands
    (("log", "--session", "s", "verify"), "lens log", "s"),  # of `lens log decode`, not of verify
    (("log", "--raw", "x", "decode"), "lens log", "x"),  # of decode, but it takes no value
    (("--data", "d", "pair", "list"), "lens", "d"),  # of `lens log`, not of `lens pair list`
    (("--data", "d", "log"), "lens", "d"),  # a command still to be named
]


@pytest.mark.parametrize("argv, prog, value", NOT_AN_OPTION_OF_THE_COMMAND,
                         ids=[" ".join(case[0]) for case in NOT_AN_OPTION_OF_THE_COMMAND])
def test_an_option_the_command_after_it_does_not_take_keeps_argparses_words(
        tmp_path: Path, argv: tuple[str, ...], prog: str, value: str) -> None:
    # These were told to write the option after the command (`lens pair list --cofig x`), a line
    # that fails in turn.
    res = lens(tmp_path, *argv)
    assert (res.returncode, res.stdout) == (2, ""), (res.returncode, res.stdout, res.stderr)
    line = res.stderr.splitlines()[-1]
    assert line.startswith(f"{prog}: USAGE_ERROR: argument COMMAND: invalid choice: {value!r} (choose from "), line
    assert "an option of the command" not in res.stderr, res.stderr


def test_the_suggested_line_shows_control_characters_escaped(tmp_path: Path) -> None:
    # `lens pair --config $'a\nb\e[31mRED' list` printed the line suggested with its newline and
    # escape as they are (shlex.join quotes, it does not escape): a second line, red text. Such a
    # word is written in the shell's $'…' quoting, which reads back as the value given.
    value = "a\nb\x1b[31mRED 'q' \\"
    res = lens(tmp_path, "pair", "--config", value, "list")
    assert (res.returncode, res.stdout) == (2, ""), (res.returncode, res.stdout, res.stderr)
    assert "\x1b" not in res.stderr and len(res.stderr.splitlines()) == 2, res.stderr
    assert res.stderr.splitlines()[-1] == (
        "lens pair: USAGE_ERROR: unrecognized arguments: --config (an option of the command after it: write it "
        "there, as in `lens pair list --config $'a\\nb\\x1b[31mRED \\'q\\' \\\\'`)"), res.stderr
    # (bash reads the word back as the value given)
    echoed = subprocess.run(["bash", "-c", "printf %s " + res.stderr.split("--config ", 2)[2].split("`")[0]],
                            capture_output=True, text=True, timeout=10)
    assert echoed.stdout == value, echoed


def test_a_usage_error_shows_control_characters_escaped(tmp_path: Path) -> None:
    # (argparse's own words quote what they name with repr, but not the leftovers it did not know)
    res = lens(tmp_path, "pair", "list", "\x1b[31mRED\nx")
    assert (res.returncode, res.stdout) == (2, ""), (res.returncode, res.stdout, res.stderr)
    assert res.stderr.splitlines()[-1] == \
        "lens pair list: USAGE_ERROR: unrecognized arguments: \\u001b[31mRED\\u000ax", res.stderr


def test_a_command_that_is_no_command_is_still_named_as_such(tmp_path: Path) -> None:
    # (the other side: no option before it, argparse's own words)
    res = lens(tmp_path, "pair", "lst")
    assert res.stderr.splitlines()[-1] == ("lens pair: USAGE_ERROR: argument COMMAND: invalid choice: 'lst' "
                                           "(choose from 'approve', 'list', 'revoke')"), res.stderr


# ------------------------------------------------------------ `lens pair approve` onto a full disk

def test_approve_onto_a_full_disk_says_the_client_was_approved_and_to_approve_again(tmp_path: Path) -> None:
    # `lens pair approve --client c1 > /dev/full` said only "lens: IO_ERROR: No space left on device":
    # the client was approved by then (any earlier credential revoked) with a credential nobody saw,
    # which the message did not say. It now says so, as when the reader of the output went away.
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    pair = pending_client(tmp_path)
    with open("/dev/full", "w") as full:
        res = subprocess.run([str(lens_script()), "pair", "approve", "--client", "c1"], cwd=tmp_path, stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=60)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert res.stderr == ("lens: IO_ERROR: client c1 was approved but its credential could not be printed (No "
                          "space left on device), and it cannot be shown again: run lens pair approve --client c1 again\n")
    assert PairStore(pair).find("c1").status == "approved"  # (what the message says)
