"""The ``lens`` command line.

Every command reports failures as ``lens: CODE: message`` on stderr and a non-zero exit code,
never a traceback: errors of our packages carry stable codes (see ``events.errors``). What it says
there leaves without the keys of the config's credential variables, whole or in pieces (a message
may quote a value, and a value may be a key pasted in the wrong place).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # (not typing.TYPE_CHECKING: importing typing is a large import)

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from pathlib import Path
    from typing import NoReturn

    from events.secrets import Secrets

# Everything else is imported inside main(), so that Ctrl-C while the (large) stack loads ends the
# command with 130 like Ctrl-C at any later point, instead of printing an import traceback. (The
# console script's own `from runtime.cli import main` runs before main() can catch anything, so
# this module imports nothing that is not already loaded at start-up.)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``lens`` parser; ``argv`` (default ``sys.argv[1:]``): what it will parse, whose
    ``--config`` names the credential variables its usage errors are scrubbed of."""
    import argparse

    from . import logcli, servecli
    from .terminal import shown

    class Parser(argparse.ArgumentParser):
        """argparse's usage errors, with a stable code where its "error:" stood:
        ``lens log decode: USAGE_ERROR: argument --from: 'x' is not a whole number`` (exit 2),
        without the keys the config knows (a value quoted may be one pasted in the wrong place).
        Every subcommand's parser is of this class (argparse makes them of their parent's)."""

        def error(self, message: str) -> NoReturn:
            self.print_usage(sys.stderr)
            args = list(sys.argv[1:] if argv is None else argv)
            message = _option_before_command(self, message, args) or message + _dash_value_hint(message, args)
            secrets = _secrets_for(_config_named(args))[0]
            # (shown: the words argparse did not know are quoted as they are, control characters too)
            self.exit(2, shown(f"{self.prog}: USAGE_ERROR: {secrets.scrub_message(message)}") + "\n")

    parser = Parser(
        prog="lens", description="Lens: an event-sourced durable runtime for LLM coding agents."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    servecli.add_parsers(sub)
    logcli.add_parser(sub)
    for commands in _subcommands(parser):
        # argparse checks a required COMMAND before it sees the leftovers, so `lens --bogus` was
        # told COMMAND is missing rather than that --bogus is unknown: _parse checks it after them
        commands.required = False
    return parser


def _dash_value_hint(message: str, args: list[str]) -> str:
    """What to write when an option's value begins with ``-`` (a pairing client id may: `-phone`),
    which argparse takes for another option ("argument --client: expected one argument"). The
    option may be written abbreviated, as argparse takes it (`--cli -phone`); the hint names it
    in full. The first place it is written with such a value is named."""
    option = message.removeprefix("argument ").partition(":")[0]
    if not message.endswith(": expected one argument"):
        return ""
    for at, arg in enumerate(args[:-1], 1):
        if arg == "--":  # (what follows is no option)
            break
        if _option_word(arg, option) == (True, None) and args[at].startswith("-"):
            return f" (if {args[at]!r} is its value, write {option}={args[at]})"
    return ""


def _option_before_command(parser: argparse.ArgumentParser, message: str, args: list[str]) -> str | None:
    """What to say of an option of a command written before it (``lens pair --config PATH list``),
    which argparse takes for an unknown option whose value is the command: "argument COMMAND:
    invalid choice: 'PATH'". The option is named unrecognized, with the line written as it goes:
    after the last command word (``lens pair list --config PATH``; ``lens --config PATH pair
    list`` likewise). None: not that case, and so argparse's words: the command the words name
    takes no such option (as argparse reads it, abbreviated or not) or takes it without a value,
    or a command is still to be named after them."""
    from .terminal import shell_word

    if not message.startswith("argument COMMAND: invalid choice: "):
        return None
    commands = _commands_of(parser)
    for at in range(1, len(args) - 1):
        option, value, command = args[at - 1], args[at], args[at + 1]
        if "--" in args[:at] or not option.startswith("-") or "=" in option:
            continue
        if option in parser._option_string_actions or commands is None or command not in commands:
            continue
        if not message.startswith(f"argument COMMAND: invalid choice: {value!r} "):
            continue
        last, named = at + 1, commands[command]  # down every command word that follows
        while (below := _commands_of(named)) is not None and last + 1 < len(args) and args[last + 1] in below:
            last, named = last + 1, below[args[last + 1]]
        # (argparse takes an option written in full first, then an abbreviation of one option only)
        takes = [named._option_string_actions[option]] if option in named._option_string_actions else \
            list({id(a): a for a in named._actions for name in a.option_strings if _option_word(option, name)[0]}
                 .values())
        if _commands_of(named) is not None or len(takes) != 1 or takes[0].nargs is not None:
            return None
        said = f"unrecognized arguments: {option} (an option of the command after it: write it there"
        words = [*args[:at - 1], *args[at + 1:last + 1], option, value, *args[last + 1:]]
        written = "lens " + " ".join(shell_word(word) for word in words)
        return said + (f", as in `{written}`)" if len(written) <= 200 else ")")
    return None


def _commands_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    """The parsers of ``parser``'s COMMAND choices by name; None: it takes no command."""
    import argparse

    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return subs[0].choices if subs else None


def _option_word(arg: str, option: str) -> tuple[bool, str | None]:
    """Whether the argv word ``arg`` is ``option`` (a ``--`` option) as argparse reads it: written
    in full or abbreviated (``--conf`` for ``--config``: argparse takes a prefix of a long option),
    alone or joined to its value by ``=``; and that value (None: alone, its value is the next word).
    An abbreviation two options share is argparse's own "ambiguous option" error, not told apart here."""
    head, joined, value = arg.partition("=")
    if head != option and not (len(head) > 2 and head.startswith("--") and option.startswith(head)):
        return False, None
    return True, (value if joined else None)


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse._SubParsersAction]:
    """Every COMMAND choice of ``parser`` and of its subcommands' parsers, at every depth."""
    import argparse

    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.append(action)
            for child in dict.fromkeys(action.choices.values()):
                found.extend(_subcommands(child))
    return found


def _config_named(argv: Sequence[str]) -> Path | None:
    """The path a ``--config PATH`` (or ``--config=PATH``, either abbreviated as argparse takes it:
    ``--conf PATH``) in ``argv`` names; None: none (nothing after a ``--`` is an option)."""
    from pathlib import Path

    for i, arg in enumerate(argv):
        if arg == "--":
            break
        written, value = _option_word(arg, "--config")
        if written and value is not None:
            return Path(value)
        if written and i + 1 < len(argv):
            return Path(argv[i + 1])
    return None


def _secrets_for(config: Path | None) -> tuple[Secrets, str | None]:
    """The keys a command reading the config ``config`` (None: its default place) knows, and a
    note when that config could not be read (:func:`runtime.config.configured_secrets`)."""
    import os

    from .config import configured_secrets

    return configured_secrets(config, os.environ)


def _executor_secrets() -> Secrets:
    """The keys ``lens executor serve`` knows: those of its own environment (a remote executor
    started by hand in a shell that holds the SDKs' keys or its token). One the daemon starts has
    none of them (it is started without credential variables); the daemon scrubs what it prints
    (``runtime.executors``). Its log lines go out scrubbed with these."""
    import logging
    import os

    from events.secrets import Secrets

    from .credentials import WELL_KNOWN_KEY_ENV
    from .terminal import ScrubbedLines

    known = Secrets.from_environ([*WELL_KNOWN_KEY_ENV, "LENS_EXECUTOR_TOKEN"], os.environ)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(ScrubbedLines("%(levelname)s %(name)s: %(message)s", known))
    return known


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` ran: ``lens log stats``'s for ``lens log stats …``;
    ``lens log``'s for ``lens log`` without its COMMAND."""
    import argparse

    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name is None or name not in subs[0].choices:
            return parser
        parser = subs[0].choices[name]


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``argv`` read by ``parser``; a usage error (exit 2) reported by the command it was given to,
    with its usage: first an argument no parser knows (``lens --bogus``: "unrecognized arguments:
    --bogus"), then a COMMAND left out (``lens log``: "the following arguments are required:
    COMMAND")."""
    import argparse

    args, extra = parser.parse_known_args(argv)
    command = _command_parser(parser, args)
    if extra:
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    missing = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
    if missing:
        command.error(f"the following arguments are required: {missing[0].metavar or missing[0].dest}")
    return args


def _on_ctrl_c(signum: int, frame: object) -> None:
    """SIGINT's handler while the command starts, and for all of a ``lens log`` or ``lens pair``
    command (and SIGALRM's, its re-delivery): Python's own, raising ``KeyboardInterrupt``, but a Ctrl-C is
    delivered again 10 ms later until ``main`` takes it. C code that calls Python and clears what
    it raises (msgspec building a Struct's decoder, hashing ``typing`` objects) drops it, with no
    word, and the command would run on; so does Python in importlib's module-lock callback
    (``cb``, which the garbage collector runs in the middle of any import: "Exception ignored in
    …"), where it is not raised at all. The re-delivery raises it again, out of that code, unless
    it is on its way (a ``KeyboardInterrupt`` being handled: an ``except``, a ``finally`` or an
    ``__exit__`` cleaning up before it goes on) or lands in a clean-up its unwinding runs (a
    generator closed, a ``__del__``, a ``weakref.finalize``), which Python would drop it from with
    "Exception ignored in" and a traceback: it leaves those alone and looks at them again 10 ms
    later."""
    import _signal

    _signal.setitimer(_signal.ITIMER_REAL, 0.01)
    if signum == _signal.SIGALRM and (_ctrl_c_on_its_way() or _in_a_finalizer(frame)):
        return
    code = getattr(frame, "f_code", None)
    if code is not None and code.co_name == "cb" and code.co_filename == "<frozen importlib._bootstrap>":
        return
    raise KeyboardInterrupt


def _ctrl_c_on_its_way() -> bool:
    """Whether the exception being handled is (or was raised while handling, or from) a
    ``KeyboardInterrupt``, one raised by :func:`_on_ctrl_c` that nothing has dropped, or a
    ``GeneratorExit``: a generator's clean-up, which drops what it raises when it is closed as a
    ``KeyboardInterrupt`` unwinds (and is short when it is not)."""
    todo, seen = [sys.exc_info()[1]], set()
    while todo:
        exc = todo.pop()
        if exc is None or id(exc) in seen:
            continue
        if isinstance(exc, (KeyboardInterrupt, GeneratorExit)):
            return True
        seen.add(id(exc))
        todo += (exc.__cause__, exc.__context__)
    return False


def _in_a_finalizer(frame: object) -> bool:
    """Whether ``frame`` runs inside a clean-up Python runs as what holds its object unwinds and
    whose exceptions it drops ("Exception ignored in"): a ``__del__``, or a ``weakref.finalize``
    run for its object's end (its ``__call__`` handed the dead reference; called by the program,
    ``finalize()``, it is handed none and raises to its caller as any call does). A bare
    ``weakref.ref(obj, callback)``'s callback is not told apart: its frame is any function's,
    called by the frame whose object went, with a dead reference any function may be handed."""
    finalize = getattr(sys.modules.get("weakref"), "finalize", None)  # (none made before it loaded)
    finalize_call = getattr(getattr(finalize, "__call__", None), "__code__", None)
    while frame is not None:
        code = getattr(frame, "f_code", None)
        if getattr(code, "co_name", None) == "__del__":
            return True
        if finalize_call is not None and code is finalize_call \
                and getattr(frame, "f_locals", {}).get("_") is not None:
            return True
        frame = getattr(frame, "f_back", None)
    return False


def _ctrl_c_disarmed() -> bool:
    """No re-delivery of a Ctrl-C left to come; whether one was waiting (a Ctrl-C raised in the
    last 10 ms and dropped). Nothing to do where :func:`_on_ctrl_c` does not handle SIGALRM."""
    import _signal

    if _signal.getsignal(_signal.SIGALRM) is not _on_ctrl_c:
        return False
    return _signal.setitimer(_signal.ITIMER_REAL, 0)[0] > 0


def take_a_waiting_ctrl_c() -> None:
    """A Ctrl-C waiting for its re-delivery (raised in the last 10 ms and dropped) raised now: a
    command calls it just before a write it must not make once Ctrl-C was pressed."""
    if _ctrl_c_disarmed():
        raise KeyboardInterrupt


def drop_a_late_ctrl_c() -> None:
    """A Ctrl-C waiting for its re-delivery comes no more: a command calls it once its work is
    done and shown, which that Ctrl-C came too late to stop (exit 0, not 130)."""
    _ctrl_c_disarmed()


def _ctrl_c_as_python_does() -> None:
    """Python's own SIGINT handler back (trio, which runs the daemon and the executor, guards
    its own state against ``KeyboardInterrupt`` only under that handler); a Ctrl-C waiting for
    its re-delivery is raised now."""
    import _signal

    if _signal.getsignal(_signal.SIGINT) is not _on_ctrl_c:
        return
    pending = _ctrl_c_disarmed()
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    _signal.signal(_signal.SIGALRM, _signal.SIG_DFL)
    if pending:
        raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    import _signal  # (built in: no Python code runs to import it)

    installed = _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler  # (not when ignored)
    if installed:
        _signal.signal(_signal.SIGALRM, _on_ctrl_c)
        _signal.signal(_signal.SIGINT, _on_ctrl_c)
    try:
        try:
            try:
                # First of all: msgspec's C module imports `datetime` when it loads and does not check
                # that import; a Ctrl-C landing inside it is swallowed and leaves msgspec with no
                # datetime API, so the first Struct decoder built afterwards crashes the interpreter
                # (SIGSEGV). With `datetime` loaded here, msgspec's import of it runs no Python code to
                # interrupt, and a Ctrl-C during this line is an ordinary KeyboardInterrupt.
                import datetime  # noqa: F401
                code = _main(argv)
            finally:
                # No SIGALRM after the command. A Ctrl-C still waiting for its re-delivery was raised
                # in the command's last 10 ms and dropped: it stops the command now, as it would have;
                # unless the command reported a failure (its code), which may be that Ctrl-C taken
                # and reported as another error (the re-delivery is held while it is handled).
                dropped = _ctrl_c_disarmed()
            if dropped and code == 0:
                raise KeyboardInterrupt
            return code
        except KeyboardInterrupt as exc:
            return _interrupted(exc)
        except RuntimeError as exc:
            # Python 3.11 wraps what a descriptor's __set_name__ raises ("Error calling __set_name__"):
            # a Ctrl-C landing in a dataclass field while a class is made at import comes out so.
            if isinstance(exc.__cause__, KeyboardInterrupt):
                return _interrupted(exc.__cause__)
            raise
    finally:
        # Python's own SIGINT handler and SIGALRM's default back once the command has ended: a
        # Ctrl-C in the interpreter's shutdown that follows would arm the re-delivery, whose
        # SIGALRM, its handler reset by then, killed the process ("Alarm clock", -14) instead of
        # stopping it. SIGINT's first, so no Ctrl-C arms the timer once it is disarmed. (Built-in
        # calls only: no Python frame here for a Ctrl-C to land in and escape by.)
        if installed:
            if _signal.getsignal(_signal.SIGINT) is _on_ctrl_c:
                _signal.signal(_signal.SIGINT, _signal.default_int_handler)
            if _signal.getsignal(_signal.SIGALRM) is _on_ctrl_c:
                _signal.setitimer(_signal.ITIMER_REAL, 0)
                _signal.signal(_signal.SIGALRM, _signal.SIG_DFL)


def _interrupted(exc: KeyboardInterrupt) -> int:
    """Say that Ctrl-C stopped the command (and what a command raising it with a note says it
    left: ``KeyboardInterrupt("the rebuild changed nothing")``); exit 130."""
    _ctrl_c_disarmed()  # (taken: this one comes no more)
    note = f"; {exc.args[0]}" if exc.args else ""
    # (not terminal.to_stderr: nothing is imported here, where a Ctrl-C may have stopped imports)
    if sys.stderr is not None:  # (started with standard error closed: nowhere to say it)
        try:
            print(f"lens: INTERRUPTED: stopped by Ctrl-C (SIGINT){note}", file=sys.stderr, flush=True)
        except (OSError, ValueError):  # standard error gone or closed: the exit code still says it
            pass
    return 130


def _main(argv: Sequence[str] | None) -> int:
    import errno

    import apsw

    from events.errors import LogError
    from events.secrets import Secrets

    from .errors import LensError
    from .logcli import silence_stdout
    from .terminal import scrub_uncaught, to_stderr, traceback_to_stderr

    args = _parse(build_parser(argv), argv)
    # The keys of the config's credential variables, known before the command runs: whatever it
    # says on stderr (a config value refused, a stored value quoted) leaves without them. (The
    # executor is started without any: it has none to know.)
    secrets, args.secrets_note = _secrets_for(getattr(args, "config", None)) if args.command != "executor" \
        else (_executor_secrets(), None)
    args.secrets = secrets
    scrub_uncaught(secrets)
    if args.command not in ("log", "pair"):  # (the daemon and the executor run under trio)
        _ctrl_c_as_python_does()
    try:
        code = int(args.func(args))
        if sys.stdout is not None:
            sys.stdout.flush()
        return code
    except (LogError, LensError) as exc:
        to_stderr(f"lens: {exc.code}: {exc}", secrets)
        return 2
    except BrokenPipeError:
        # The reader went away (e.g. `lens log decode | head`): not an error of ours.
        silence_stdout()
        return 0
    except apsw.BusyError as exc:
        to_stderr(f"lens: STORE_BUSY: another process holds the database locked ({exc}); try again "
                  f"when it is done", secrets)
        return 2
    except apsw.Error as exc:  # a SQLite failure no layer below named (a last resort)
        to_stderr(f"lens: SQLITE_ERROR: {exc}", secrets)
        return 2
    except OSError as exc:  # e.g. standard output closed or on a full disk
        where = f": {exc.filename}" if exc.filename else ""
        to_stderr(f"lens: IO_ERROR: {exc.strerror or exc}{where}", secrets)
        if sys.stdout is not None and exc.errno in (errno.ENOSPC, errno.EIO):
            silence_stdout()  # or the interpreter fails again flushing it at exit
        return 2
    except Exception as exc:  # a defect: its traceback, as Python prints it, but without the keys
        traceback_to_stderr(exc, secrets)
        return 1


if __name__ == "__main__":
    sys.exit(main())
