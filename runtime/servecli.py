"""``lens serve`` and ``lens pair approve | list | revoke``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import msgspec

from .cliargs import Once, config_path, whole_number
from .config import ConfigError, check_config, expand_path, load_config, pair_file_path
from .errors import InvalidCommand as InvalidArgument
from .errors import LensError
from .logcli import silence_stdout
from .pairing import PairFileInvalid, PairStore, new_credential
from .startcheck import check_startable
from .terminal import shell_word, shown
from .trust import check_private_data_dir

if TYPE_CHECKING:
    from .daemon import HeldSignals

_T = TypeVar("_T")


# `lens executor serve --listen`'s default (docs/executor.md).
DEFAULT_LISTEN = "127.0.0.1:7421"


def add_parsers(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("serve", help="run the daemon (HTTP API, SSE, dashboard)")
    # Each option takes one value: given twice it is a usage error (cliargs.Once), not the last one
    # winning silently (`lens pair approve --client a --client b` approved b alone).
    p.add_argument("--config", type=config_path, default=None, action=Once, metavar="PATH",
                   help="config file (default config/lens.jsonc if present)")
    p.add_argument("--data", default=None, action=Once, metavar="DIR", help="data directory (default: config dataDir, else .lens)")
    p.add_argument("--host", default=None, action=Once, help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=whole_number, default=None, action=Once, help="port (default 7420; 0 picks a free one)")
    p.add_argument("--model", default=None, action=Once, help="default model '<provider>/<model>' for new sessions")
    p.set_defaults(func=cmd_serve)

    ex = sub.add_parser("executor", help="run an executor process for one workspace")
    ex_cmds = ex.add_subparsers(dest="executor_command", required=True, metavar="COMMAND")
    es = ex_cmds.add_parser("serve", help="serve the workspace over gRPC (token from LENS_EXECUTOR_TOKEN)")
    es.add_argument("--workspace", required=True, action=Once, metavar="DIR",
                    help="the workspace directory its tools and commands are confined to")
    es.add_argument("--listen", default=None, action=Once, metavar="HOST:PORT", help=f"address to listen on (default {DEFAULT_LISTEN})")
    es.add_argument("--state", default=None, action=Once, metavar="DIR", help="call journal directory (default under XDG_STATE_HOME)")
    es.add_argument("--token-stdin", action="store_true",
                    help="read the token from the first line of standard input instead of the environment")
    es.add_argument("--exit-with-stdin", action="store_true",
                    help="stop (ending running commands) when standard input reaches its end: the daemon "
                         "holds it open, so a daemon killed outright takes its executors with it")
    es.set_defaults(func=cmd_executor_serve)

    pair = sub.add_parser("pair", help="approve, list and revoke paired clients")
    cmds = pair.add_subparsers(dest="pair_command", required=True, metavar="COMMAND")
    a = cmds.add_parser("approve", help="issue a credential for a client (printed once, on the last line)")
    a.add_argument("--client", required=True, action=Once, help="the clientId of its pairing request")
    a.add_argument("--strong-trust", action="store_true", help="may submit, steer, abort and edit config")
    _pair_config(a)
    a.set_defaults(func=cmd_pair_approve)
    ls = cmds.add_parser("list", help="list clients (no secrets)")
    _pair_config(ls)
    ls.set_defaults(func=cmd_pair_list)
    r = cmds.add_parser("revoke", help="revoke a client's credential")
    r.add_argument("--client", required=True, action=Once, help="the clientId whose credential to revoke")
    _pair_config(r)
    r.set_defaults(func=cmd_pair_revoke)


def _pair_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=config_path, default=None, action=Once, metavar="PATH",
                   help="config file naming the pair file (default config/lens.jsonc)")


def cmd_serve(args: argparse.Namespace) -> int:
    from .daemon import HeldSignals

    # The stop signals are the daemon's from here on (see HeldSignals): one that comes while the
    # config is read or the store opened stops the daemon as it would once it serves.
    with HeldSignals() as held:
        return _serve(args, held)


def _serve(args: argparse.Namespace, held: "HeldSignals") -> int:
    from .daemon import ServeOptions, run
    from .undumpable import make_undumpable

    # Before any child is started: agents' commands cannot read the keys from /proc. (The CLI has
    # read them already, to scrub what it says: nothing descends from it yet.)
    make_undumpable()

    # (a config other users can change is refused: see check_private_config)
    cfg, path, notes = load_config(args.config)
    check_startable(cfg, path, str(path))  # (what a config write through the API is held to, too)
    if args.model == "":
        raise InvalidArgument("the command line: --model must be '<provider id>/<model id>', not empty")
    # The flags take the config's place, so they are held to the same checks (a port past 65535
    # was a traceback from bind(), an empty --host bound every interface).
    flagged = msgspec.structs.replace(
        cfg,
        data_dir=args.data if args.data is not None else cfg.data_dir,
        server=msgspec.structs.replace(cfg.server, host=args.host if args.host is not None else cfg.server.host,
                                       port=args.port if args.port is not None else cfg.server.port),
        default_model=args.model if args.model is not None else cfg.default_model,
    )
    try:
        check_config(flagged, "the command line")
        data_dir = expand_path(flagged.data_dir, "dataDir", "the command line")
    except ConfigError as exc:
        raise InvalidArgument(exc.message.replace("dataDir", "--data").replace("server.host", "--host")
                              .replace("server.port", "--port").replace("defaultModel", "--model")) from None
    repaired = check_private_data_dir(data_dir)  # (files inside it others could write: made private, said)
    return run(ServeOptions(cfg, path, data_dir, flagged.server.host, flagged.server.port, args.model,
                            tuple(notes + repaired), secrets=args.secrets, held=held))


def _pairs(args: argparse.Namespace) -> PairStore:
    from .cli import take_a_waiting_ctrl_c

    cfg, path, _ = load_config(args.config)
    # (a Ctrl-C dropped while the file was read stops the command before its write, not after)
    return PairStore(pair_file_path(cfg, path), log_problems=False, before_write=take_a_waiting_ctrl_c)


class CredentialNotShown(LensError):
    """``lens pair approve`` could not print the credential it exists to show (exit 2, not 0)."""

    code = "IO_ERROR"


def cmd_pair_approve(args: argparse.Namespace) -> int:
    from .cli import drop_a_late_ctrl_c

    store = _pairs(args)
    if sys.stdout is None:  # (file descriptor 1 closed: Python drops whatever is printed, silently)
        raise CredentialNotShown("standard output is closed: the credential would be shown nowhere; "
                                 "nothing was changed")
    token = new_credential()
    had = store.find(args.client)  # (as the command read it: the credential it held before, if any)
    try:
        store.approve(args.client, strong=args.strong_trust, token=token)
    except KeyboardInterrupt:
        # A Ctrl-C after the pair file was replaced, before approve returned (its directory's
        # fsync, the re-read, the lock's release): the approval is made, and is said as one the
        # print was stopped in is, not as a bare "stopped". Told by the file itself, read afresh
        # (a store the Ctrl-C stopped in the middle of its re-read is not looked at), with a
        # second Ctrl-C held off meanwhile (the command is stopping already: it says what it left).
        note = _ctrl_c_held_off(lambda: _approve_left(store.path, args, token,
                                                      None if had is None else had.credential_hash))
        if note is not None:
            raise KeyboardInterrupt(note) from None
        raise  # (before the write: nothing was changed)
    trust = "strong trust" if args.strong_trust else "read-only"
    try:
        print(f"approved client {args.client} ({trust}); any earlier credential of it is revoked.")
        print("The credential is shown once; store it now:")
        print(token, flush=True)
    except KeyboardInterrupt:  # (after the write: said what it left, not a bare "stopped")
        raise KeyboardInterrupt(_ctrl_c_held_off(lambda: _approved_unshown(args))) from None
    except OSError as exc:  # (the reader went away, or a full disk: said, not a bare "No space left")
        silence_stdout()
        why = "the reader of standard output went away" if isinstance(exc, BrokenPipeError) else exc.strerror or exc
        raise CredentialNotShown(f"client {args.client} was approved but its credential could not be printed "
                                 f"({why}), and it cannot be shown again: run {_approve_again(args)[0]} "
                                 f"again") from None
    drop_a_late_ctrl_c()  # (the credential is shown: a Ctrl-C now is too late to stop the approve)
    return 0


def _ctrl_c_held_off(work: Callable[[], _T]) -> _T:
    """``work()`` with SIGINT held off: a Ctrl-C that comes meanwhile waits, and is taken, when
    it is let through, as the stop the command is making already (what it says it left is said,
    not cut off by a bare "stopped")."""
    import _signal

    held = _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT})
    try:
        return work()
    finally:
        try:
            _signal.pthread_sigmask(_signal.SIG_SETMASK, held)  # (a Ctrl-C held off is raised here)
        except KeyboardInterrupt:
            pass


def _approve_left(path: Path, args: argparse.Namespace, token: str, had: str | None) -> str | None:
    """What an approve a Ctrl-C stopped before it returned left, told by the pair file read afresh:
    the note that the client was approved (the file holds ``token``), that it may have been (the
    file cannot be read, or the client holds a credential other than ``had``, the one it held
    when the command read the file: replaced by another approve since), or None: nothing was
    changed."""
    fresh = PairStore(path, log_problems=False)
    if fresh.authenticate(token) is not None:
        return _approved_unshown(args)
    rec = fresh.find(args.client)
    if not fresh.valid or (rec is not None and rec.status == "approved" and rec.credential_hash != had):
        again, config = _approve_again(args)
        return (f"client {args.client} may have been approved: lens pair list{config} shows it; "
                f"run {again} for a new credential (which revokes any earlier one)")
    return None


def _approve_again(args: argparse.Namespace) -> tuple[str, str]:
    """The command that approves the client ``args`` names again, as a shell reads it back, and
    the ``--config`` words it and ``lens pair list`` take (empty without one)."""
    client = f"--client={args.client}" if args.client.startswith("-") else f"--client {args.client}"  # (`-phone`)
    config = getattr(args, "config", None)
    # (a path starting with "-" joined to its option, as argparse would read it as one otherwise;
    # one with a line break or bytes that are not UTF-8 in $'…' quoting)
    config = "" if config is None else f" {shell_word(f'--config={config}')}" if str(config).startswith("-") \
        else f" --config {shell_word(str(config))}"
    return f"lens pair approve {client}" + (" --strong-trust" if args.strong_trust else "") + config, config


def _approved_unshown(args: argparse.Namespace) -> str:
    """What an approve a Ctrl-C stopped after its write left (exit 130): the client approved with a
    credential no one saw, and how to get one now (a new approve replaces it)."""
    again, config = _approve_again(args)
    return (f"client {args.client} was approved (any earlier credential of it is revoked; lens pair list{config} "
            f"shows it approved) but its credential was not shown: run {again} again for a new one, which replaces it")


def cmd_pair_list(args: argparse.Namespace) -> int:
    store = _pairs(args)
    if not store.valid:  # (approve and revoke refuse such a file too)
        raise PairFileInvalid(store.problem or f"pair file {store.path} is not valid")
    clients = store.clients()
    if not clients:
        print(f"no clients in {store.path}")
        return 0
    # (as wide as the longest id: a client id may have 64 characters, and one past 32 pushed the
    # columns of its line out of line with the heading's)
    width = max(32, *(len(c.client_id) for c in clients))
    from events.secrets import Secrets  # (as the CLI imports it: only for the command that needs it)

    secrets = getattr(args, "secrets", None) or Secrets()
    print(f"{'clientId':<{width}} {'status':<9} {'trust':<7} name".rstrip())
    for c in clients:
        trust = c.trust if c.status == "approved" else "-"
        # (a provider key in a name, stored before names were scrubbed or written by hand, is not printed)
        name = secrets.scrub_message(c.name)
        print(f"{c.client_id:<{width}} {c.status:<9} {trust:<7} {shown(name)}".rstrip())
    return 0


def cmd_pair_revoke(args: argparse.Namespace) -> int:
    from .cli import drop_a_late_ctrl_c

    store = _pairs(args)
    if store.revoke(args.client):
        try:
            print(f"revoked client {args.client}", flush=True)
        except KeyboardInterrupt:  # (after the write: said what it left)
            raise KeyboardInterrupt(f"client {args.client} was revoked") from None
    else:  # (exit 0 all the same: what was asked for holds)
        print(f"client {args.client} is revoked already; nothing was changed")
    drop_a_late_ctrl_c()  # (the revoke is done and said: a Ctrl-C now is too late to stop it)
    return 0


def cmd_executor_serve(args: argparse.Namespace) -> int:
    from tools.executor.server import main

    listen = args.listen if args.listen is not None else DEFAULT_LISTEN
    return main(args.workspace, listen, args.state, token_stdin=args.token_stdin,
                exit_with_stdin=args.exit_with_stdin)
