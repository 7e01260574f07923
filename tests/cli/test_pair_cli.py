"""`lens pair …` as a real process: an approve whose standard output cannot take the credential,
and an invalid pair file.

The credential is shown once: an approve that could not print it must not look like a success.
The pending request is recorded with the real :class:`~runtime.pairing.PairStore`, as the
daemon records it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from runtime.pairing import MAX_REVOKED, ClientNotFound, PairStore
from tests.cli.ctrl_c import (INTERRUPTED, ctrl_c_sweep, handlers_after_main, interrupted_as_returning,
                              interrupted_where)


def lens_command() -> list[str]:
    script = Path(sys.executable).parent / "lens"
    return [str(script)] if script.exists() else [sys.executable, "-m", "runtime.cli"]


def pending_client(tmp_path: Path) -> Path:
    pair = tmp_path / "config" / "pair.json"
    PairStore(pair).register("c1", "client", max_pending=32)
    return pair


def test_approve_with_standard_output_closed_changes_nothing_and_fails(tmp_path: Path):
    # stdout closed: Python writes nothing and says nothing; approve exited 0, having issued a
    # credential (and revoked any earlier one) that nobody could ever read.
    pair = pending_client(tmp_path)
    before = pair.read_bytes()
    proc = subprocess.run([*lens_command(), "pair", "approve", "--client", "c1", "--strong-trust"], cwd=tmp_path,
                          preexec_fn=lambda: os.close(1), stderr=subprocess.PIPE, timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert "lens: IO_ERROR: " in err and "standard output is closed" in err, err
    assert pair.read_bytes() == before
    assert PairStore(pair).find("c1").status == "pending"


def test_approve_whose_reader_went_away_fails_and_says_to_approve_again(tmp_path: Path):
    # `lens pair approve … | tool` with a tool that exits at once: exit 0, and no credential shown.
    pending_client(tmp_path)
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([*lens_command(), "pair", "approve", "--client", "c1"], cwd=tmp_path, stdout=w,
                              stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(w)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err, err
    assert "lens: IO_ERROR: " in err and "could not be printed" in err and "lens pair approve" in err, err


@pytest.mark.parametrize("command", [["list"], ["approve", "--client", "c1"], ["revoke", "--client", "c1"]])
def test_an_invalid_pair_file_is_named_once_and_left_as_it_was(tmp_path: Path, command: list[str]):
    # Each command printed the problem twice: once as the store's log warning, once as the error.
    pair = tmp_path / "config" / "pair.json"
    pair.parent.mkdir()
    pair.write_text('{"clients": 5}')
    proc = subprocess.run([*lens_command(), "pair", *command], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err and proc.stdout == b"", err
    assert err.count("is not a valid pair file") == 1, err
    assert err.startswith("lens: PAIR_FILE_INVALID: pair file config/pair.json is not a valid pair file"), err
    assert pair.read_text() == '{"clients": 5}'


def test_revoked_records_are_kept_up_to_a_bound_the_latest_revocations(tmp_path: Path):
    # A client id paired and revoked left its record for ever: a pair file that saw a fresh id
    # per CI run grew with every run. Past MAX_REVOKED, a write drops the revocations made
    # longest ago (records from before revokedAt count from their last request or approval).
    pair = tmp_path / "config" / "pair.json"
    store = PairStore(pair)
    store.register("live", "live client", max_pending=32)
    token = store.approve("live", strong=True)
    data = msgspec.json.decode(pair.read_bytes())
    data["clients"][:0] = [{"clientId": f"old-{i}", "status": "revoked", "requestedAt": 1000 + i}
                           for i in range(MAX_REVOKED)]
    pair.write_bytes(msgspec.json.encode(data))

    proc = subprocess.run([*lens_command(), "pair", "revoke", "--client", "live"], cwd=tmp_path,
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    store = PairStore(pair)
    assert store.authenticate(token) is None
    ids = [c.client_id for c in store.clients()]
    assert len(ids) == MAX_REVOKED and "old-0" not in ids and ids[0] == "old-1" and ids[-1] == "live"
    listing = subprocess.run([*lens_command(), "pair", "list"], cwd=tmp_path, capture_output=True, timeout=60)
    assert re.search(r"^live\s+revoked", listing.stdout.decode(), re.M), listing.stdout.decode()

    # the next revocation drops the next oldest, never the one just made
    store.register("second", "second client", max_pending=32)
    store.approve("second", strong=False)
    store.revoke("second")
    ids = [c.client_id for c in store.clients()]
    assert len(ids) == MAX_REVOKED and "old-1" not in ids and ids[-2:] == ["live", "second"]
    # a client whose record went asks again, as an unknown one does
    with pytest.raises(ClientNotFound):
        store.approve("old-0", strong=True)
    assert store.register("old-0", "back again", max_pending=32) == "pending"


@pytest.mark.parametrize("written", ["--client", "--cli", "--cl"])
def test_a_dash_led_client_id_after_the_option_abbreviated_gets_the_same_hint(tmp_path: Path, written: str):
    # argparse takes `--cli` for `--client` (every lens command takes an unambiguous abbreviation),
    # but only `--client -phone` was told to write `--client=-phone`.
    pair = tmp_path / "config" / "pair.json"
    PairStore(pair).register("-phone", "phone", max_pending=32)
    for command in ("approve", "revoke"):
        proc = subprocess.run([*lens_command(), "pair", command, written, "-phone"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        err = proc.stderr.decode()
        assert proc.returncode == 2 and "USAGE_ERROR" in err and proc.stdout == b"", err
        assert "(if '-phone' is its value, write --client=-phone)" in err, err
    assert PairStore(pair).find("-phone").status == "pending"
    proc = subprocess.run([*lens_command(), "pair", "approve", f"{written}=-phone"], cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    assert PairStore(pair).find("-phone").status == "approved"


def _as_before_or_approved(pair: Path, before: bytes) -> str:
    """"before" or "approved": the pair file is exactly as it was, or is it with client c1 approved
    (read-only) and nothing else changed, and no other file (a temporary one) is left beside it."""
    assert sorted(p.name for p in pair.parent.iterdir()) == ["pair.json", "pair.json.lock"]
    raw = pair.read_bytes()
    if raw == before:
        return "before"
    was, now = msgspec.json.decode(before), msgspec.json.decode(raw)
    [c1] = now["clients"]
    assert re.fullmatch(r"[0-9a-f]{64}", c1.pop("credentialHash")) and isinstance(c1.pop("approvedAt"), int), raw
    assert now == {**was, "clients": [{**was["clients"][0], "status": "approved"}]}, raw
    return "approved"


def test_ctrl_c_at_every_stage_of_an_approve_exits_130_and_leaves_the_pair_file_whole(tmp_path: Path):
    # `lens pair approve` had Python's own SIGINT handler back once its arguments were read: a
    # Ctrl-C that C code dropped (msgspec building the pair file's decoder) was lost, and the
    # approve ran on to its end with 0. Now every point ends 130, saying so; the pair file is as
    # it was or approved whole (a Ctrl-C dropped in the command's last 10 ms, which may hold its
    # write, ends it once it has ended), never part written.
    pair = pending_client(tmp_path)
    before = pair.read_bytes()
    found = [_as_before_or_approved(pair, before)
             for _ in ctrl_c_sweep(["pair", "approve", "--client", "c1"], tmp_path, points=10, tail=(1100, 20),
                                   reset=lambda: pair.write_bytes(before), noted=re.escape(APPROVED_UNSHOWN),
                                   done=lambda: _as_before_or_approved(pair, before) == "approved")]
    assert "before" in found and "approved" in found, found  # (the last points lie past its write)


APPROVED_UNSHOWN = ("client c1 was approved (any earlier credential of it is revoked; lens pair list shows it approved) "
                    "but its credential was not shown: run lens pair approve --client c1 again for a new one, "
                    "which replaces it")


@pytest.mark.parametrize("where", [
    # as the rename returns, and as the directory's fsync after it returns
    ('as_returning', 'arg is __import__("os").replace and frame.f_code.co_name == "replace_in_directory"'),
    ('as_returning', 'arg is __import__("os").fsync and frame.f_code.co_name == "replace_in_directory"'
                     ' and frame.f_locals["tmp"] not in __import__("os").listdir(frame.f_locals["dir_fd"])'),
    # in the store's re-read of the file it wrote, before approve returns
    ('where', 'code.co_name == "reload" and frame.f_back.f_code.co_name == "_locked"'),
], ids=["rename-returned", "fsync-returned", "re-read"])
def test_ctrl_c_after_the_pair_file_is_replaced_says_the_client_was_approved(tmp_path: Path, where: tuple[str, str]):
    # A Ctrl-C inside approve after the pair file's rename, before it returned, ended 130 with a
    # bare "stopped by Ctrl-C": the client was approved all the same, with a credential nobody saw,
    # and nothing said so. Now the message says it was approved and how to get a credential now;
    # the credential is never printed (the one issued is replaced by the next approve).
    pair = pending_client(tmp_path)
    before = pair.read_bytes()
    how, expression = where
    run = interrupted_as_returning if how == "as_returning" else interrupted_where
    res = run(expression, ["pair", "approve", "--client", "c1"], tmp_path)
    assert (res.returncode, res.stdout) == (130, ""), (res.returncode, res.stdout, res.stderr)
    assert res.stderr == INTERRUPTED[:-1] + "; " + APPROVED_UNSHOWN + "\n", res.stderr
    assert _as_before_or_approved(pair, before) == "approved"
    # what the message says: lens pair list shows it approved, and a new approve gives a credential
    listed = subprocess.run([*lens_command(), "pair", "list"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert re.search(r"^c1 +approved +read ", listed.stdout, re.M), listed.stdout
    again = subprocess.run([*lens_command(), "pair", "approve", "--client", "c1"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    token = again.stdout.splitlines()[-1]
    assert PairStore(pair).authenticate(token).client_id == "c1"


# Runs `lens ARGV…` with a first Ctrl-C as the pair file's rename returns (after TAMPER, which may
# change the file as another process would), then a second, a real SIGINT, at the first Python
# call SECOND (an expression of `frame`) selects after it.
_TWICE = r"""
import os, signal, sys
from runtime.cli import main
first = False
def profile(frame, event, arg):  # (unset by the Ctrl-C it raises, as Python unsets one that raises)
    global first
    if event == "c_return" and arg is os.replace and frame.f_code.co_name == "replace_in_directory":
        first = True
        TAMPER
        signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)
def trace(frame, event, arg):
    if first and SECOND:
        sys.settrace(None)
        os.kill(os.getpid(), signal.SIGINT)
    return None
sys.setprofile(profile)
sys.settrace(trace)
sys.exit(main(sys.argv[1:]))
"""


def _interrupted_twice(tmp_path: Path, argv: list[str], *, second: str = "False",
                       tamper: str = "pass") -> subprocess.CompletedProcess[str]:
    script = _TWICE.replace("TAMPER", tamper).replace("SECOND", second)
    return subprocess.run([sys.executable, "-c", script, *argv], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)


@pytest.mark.parametrize("second", ['frame.f_code.co_name == "authenticate"',
                                    'frame.f_code.co_name == "_approved_unshown"'], ids=["re-read", "message"])
def test_a_second_ctrl_c_while_an_interrupted_approve_looks_at_the_file_still_says_it_was_approved(
        tmp_path: Path, second: str):
    # A second Ctrl-C while the approve stopped after its rename read the pair file afresh (or
    # made its message) ended with the bare "stopped by Ctrl-C": the client was approved, with a
    # credential nobody saw, and nothing said so. The second one is held off until it is said.
    pair = pending_client(tmp_path)
    before = pair.read_bytes()
    res = _interrupted_twice(tmp_path, ["pair", "approve", "--client", "c1"], second=second)
    assert (res.returncode, res.stdout) == (130, ""), (res.returncode, res.stdout, res.stderr)
    assert res.stderr == INTERRUPTED[:-1] + "; " + APPROVED_UNSHOWN + "\n", res.stderr
    assert _as_before_or_approved(pair, before) == "approved"


MAY_BE_APPROVED = ("client c1 may have been approved: lens pair list shows it; run lens pair approve --client c1 "
                   "for a new credential (which revokes any earlier one)")


@pytest.mark.parametrize("tamper", [
    # the file made invalid by hand as the rename returned
    'open("config/pair.json", "wb").write(b"{")',
    # the client approved by another approve (another credential) as the rename returned
    'import json; d = json.load(open("config/pair.json")); d["clients"][0]["credentialHash"] = "0" * 64; '
    'open("config/pair.json", "w").write(json.dumps(d))',
], ids=["invalid", "replaced"])
def test_a_ctrl_c_after_the_rename_whose_file_cannot_tell_says_the_client_may_have_been_approved(
        tmp_path: Path, tamper: str):
    # The fresh read of a pair file made invalid, or whose client holds another credential since,
    # cannot tell whether this approve was made: the bare "stopped" said nothing was; now the
    # message says it may have been, where to look, and how to get a credential.
    pending_client(tmp_path)
    res = _interrupted_twice(tmp_path, ["pair", "approve", "--client", "c1"], tamper=tamper)
    assert (res.returncode, res.stdout) == (130, ""), (res.returncode, res.stdout, res.stderr)
    assert res.stderr == INTERRUPTED[:-1] + "; " + MAY_BE_APPROVED + "\n", res.stderr


def test_a_ctrl_c_before_the_write_of_a_client_approved_before_still_says_only_stopped(tmp_path: Path):
    # A client approved before, its approve again stopped before the write: its credential is the
    # one it had, nothing was changed, and the message says no more than "stopped".
    pair = pending_client(tmp_path)
    PairStore(pair).approve("c1", strong=False)
    before = pair.read_bytes()
    res = interrupted_where('code.co_name == "_locked"', ["pair", "approve", "--client", "c1"], tmp_path)
    assert (res.returncode, res.stdout, res.stderr) == (130, "", INTERRUPTED), (res.returncode, res.stderr)
    assert pair.read_bytes() == before


@pytest.mark.parametrize("folder", ["-odd", "a\nb", os.fsdecode(b"-\xff c")], ids=["dash", "newline", "not-utf-8"])
def test_the_approve_a_ctrl_c_stopped_suggests_reads_back_as_the_config_given(tmp_path: Path, folder: str):
    # `--config -odd/lens.jsonc` was suggested as written (argparse reads "-odd…" as an option),
    # a path with a line break broke the message in two, and one not UTF-8 came out as "\udcff".
    (tmp_path / folder).mkdir()
    config = f"{folder}/lens.jsonc"
    (tmp_path / config).write_text("{}\n")
    pair = tmp_path / folder / "pair.json"
    PairStore(pair).register("c1", "client", max_pending=32)
    res = interrupted_as_returning('arg is __import__("os").replace and frame.f_code.co_name == "replace_in_directory"',
                                   ["pair", "approve", "--client", "c1", f"--config={config}"], tmp_path)
    assert res.returncode == 130 and res.stderr.count("\n") == 1, res.stderr
    said = re.fullmatch(re.escape(INTERRUPTED[:-1]) + r"; client c1 was approved \(any earlier credential of it is "
                        r"revoked; lens pair list (.+) shows it approved\) but its credential was not shown: run "
                        r"lens (.+) again for a new one, which replaces it\n", res.stderr)
    assert said, res.stderr
    words = subprocess.run(["bash", "-c", "printf '%s\\0' " + said.group(2)], capture_output=True, timeout=60).stdout
    assert words.split(b"\0")[:-1] == [b"pair", b"approve", b"--client", b"c1", *([os.fsencode(f"--config={config}")]
        if folder.startswith("-") else [b"--config", os.fsencode(config)])], words
    listed = subprocess.run(["bash", "-c", "printf '%s\\0' " + said.group(1)], capture_output=True, timeout=60).stdout
    assert listed.split(b"\0")[:-1] == words.split(b"\0")[4:-1], listed
    assert PairStore(pair).find("c1").status == "approved"


def test_ctrl_c_dropped_while_the_pair_file_is_decoded_still_stops_the_approve(tmp_path: Path):
    # msgspec's C code, building the pair file's decoder, hashes `typing` objects and clears what
    # that raises: a Ctrl-C there was dropped, and the approve printed its credential with 0.
    pair = pending_client(tmp_path)
    before = pair.read_bytes()
    where = ('code.co_name == "__hash__" and code.co_filename.endswith("typing.py")'
             ' and frame.f_back.f_code.co_name == "parse_pair_file"')
    res = interrupted_where(where, ["pair", "approve", "--client", "c1"], tmp_path)
    # Its re-delivery may come after the write; the write takes it first: nothing approved, no
    # credential shown (a script trusting 130 throws nothing live away).
    assert (res.returncode, res.stderr) == (130, INTERRUPTED), (res.returncode, res.stdout, res.stderr)
    assert _as_before_or_approved(pair, before) == "before"
    assert res.stdout == "", res.stdout


@pytest.mark.parametrize("argv", [["pair", "list"], ["pair", "list", "--bogus"]], ids=["done", "usage-error"])
def test_pair_puts_python_s_ctrl_c_handlers_back_when_main_returns(tmp_path: Path, argv: list[str]):
    # main() left its SIGINT and SIGALRM handlers installed: a Ctrl-C in the interpreter's
    # shutdown armed the re-delivery, Python reset SIGALRM to its default, and the process died
    # with "Alarm clock" (-14) instead of Python's own Ctrl-C.
    pending_client(tmp_path)
    assert handlers_after_main(argv, tmp_path) == "AFTER True True True"


def test_ctrl_c_as_the_temporary_file_is_opened_leaves_none_beside_the_pair_file(tmp_path: Path):
    # The temporary file was opened before the `try` that removes it: a SIGINT raised as the open
    # returned (Python raises it there, the file made and its descriptor not yet stored) left an
    # empty `.pair.json.….tmp` behind.
    pair = pending_client(tmp_path)
    before = pair.read_bytes()
    where = 'arg is __import__("os").open and frame.f_code.co_name == "replace_in_directory"'
    res = interrupted_as_returning(where, ["pair", "approve", "--client", "c1"], tmp_path)
    assert (res.returncode, res.stderr, res.stdout) == (130, INTERRUPTED, ""), (res.returncode, res.stderr)
    assert _as_before_or_approved(pair, before) == "before"  # (and no other file beside it)



@pytest.mark.parametrize("place", [".", "/", "config/.."])
@pytest.mark.parametrize("command", [["pair", "list"], ["pair", "approve", "--client", "c1"],
                                     ["pair", "revoke", "--client", "c1"], ["serve", "--port", "0"]])
def test_a_pair_file_set_to_a_directory_by_its_form_is_a_config_error(tmp_path: Path, command: list[str], place: str):
    # `"pairFile": "."` (or "/"), a path with no file name of its own, was read as a missing pair
    # file: `list` said "cannot be read (No such file or directory)" of a directory that is there,
    # `approve` CLIENT_NOT_FOUND, a write made a lock file named ".lock" in the directory, and
    # `lens serve` started refusing every credential for that wrong reason.
    config = tmp_path / "config" / "lens.jsonc"
    config.parent.mkdir(mode=0o700)
    config.write_text(msgspec.json.encode({"pairFile": place}).decode())
    config.chmod(0o600)
    proc = subprocess.run([*lens_command(), *command, "--config", "config/lens.jsonc"], cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err and proc.stdout == b"", err
    assert err == (f"lens: CONFIG_INVALID: config/lens.jsonc: pairFile {place!r} names a directory, not a file; "
                   f"give the pair file's own path (as config/pair.json)\n"), err
    assert sorted(os.listdir(tmp_path)) == ["config"] and os.listdir(tmp_path / "config") == ["lens.jsonc"]


@pytest.mark.parametrize("token", ["x" * 48, "lens_short", "lens_" + "a" * 44, "", "LENS_" + "a" * 43],
                         ids=["no-prefix", "short", "long", "empty", "prefix-case"])
def test_approve_refuses_a_credential_to_issue_not_of_its_shape(tmp_path: Path, token: str):
    # approve(token=…) issued whatever it was handed: a credential without the prefix that
    # authenticate() looks for (never accepted), or a short guessable one.
    pair = pending_client(tmp_path)
    before = pair.read_bytes()
    with pytest.raises(ValueError, match="must be 48 characters starting with 'lens_'"):
        PairStore(pair).approve("c1", strong=False, token=token)
    assert pair.read_bytes() == before
    issued = PairStore(pair).approve("c1", strong=False, token="lens_" + "a" * 43)  # (of its shape: taken)
    assert PairStore(pair).authenticate(issued).client_id == "c1"
