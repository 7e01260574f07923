"""A Ctrl-C delivered to a ``lens`` command at a chosen point, as a real SIGINT is (the SIGINT
handler the command installed, called with the running frame), in a child interpreter, and how
the command must end: what the command-line tests of Ctrl-C share."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

INTERRUPTED = "lens: INTERRUPTED: stopped by Ctrl-C (SIGINT)\n"

# One Ctrl-C Python dropped in a finalizer or callback, then the command's end by it.
DROPPED_ONCE = re.compile(r"Exception ignored in: [^\n]*\nTraceback \(most recent call last\):\n"
                          r"(?:  [^\n]*\n)+KeyboardInterrupt: ?\n" + re.escape(INTERRUPTED))

# Runs `lens ARGV…` and delivers a Ctrl-C at the Nth Python call after the console script has
# imported main(); N = 0 never delivers one and reports the number of calls the whole command makes.
_AT_CALL = r"""
import signal, sys
target = int(sys.argv[1])
from runtime.cli import main  # the console script does this before main() can catch anything
calls = 0
def trace(frame, event, arg):
    global calls
    calls += 1
    if calls == target:
        sys.settrace(None)
        signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)
    return None
sys.settrace(trace)
code = main(sys.argv[2:])
sys.settrace(None)
if target == 0:
    print(f"CALLS {calls}", file=sys.stderr)
elif calls < target:  # this run made fewer calls (waits on the reader's helper thread vary)
    print("UNREACHED", file=sys.stderr)
sys.exit(code)
"""

# Runs `lens ARGV…` and delivers a Ctrl-C at the first Python call that WHERE (an expression of
# `code`, the called function's code object, and `frame`, its frame) selects.
_WHERE = r"""
import signal, sys
from runtime.cli import main
assert "datetime" not in sys.modules, "datetime loaded before main(): nothing left to interrupt"
def trace(frame, event, arg):
    code = frame.f_code
    if WHERE:
        sys.settrace(None)
        signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)
    return None
sys.settrace(trace)
sys.exit(main(sys.argv[1:]))
"""


# Runs `lens ARGV…` through main() and reports, once it has returned (or exited), the handlers it
# leaves to the interpreter's shutdown.
_AFTER_MAIN = r"""
import signal, sys
from runtime.cli import main
try:
    main(sys.argv[1:])
finally:
    print("AFTER", signal.getsignal(signal.SIGINT) is signal.default_int_handler,
          signal.getsignal(signal.SIGALRM) is signal.SIG_DFL, signal.getitimer(signal.ITIMER_REAL)[0] == 0,
          file=sys.stderr)
"""


def handlers_after_main(argv: Sequence[str], cwd: Path | None = None) -> str:
    """The last line ``lens ARGV`` (in ``cwd``) writes to stderr once its ``main()`` has returned:
    ``AFTER True True True`` when it put Python's SIGINT handler and SIGALRM's default back, with no
    timer left armed (a Ctrl-C in the shutdown that follows is then Python's, not a SIGALRM that
    kills the process)."""
    proc = subprocess.run([sys.executable, "-c", _AFTER_MAIN, *argv], cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    return proc.stderr.splitlines()[-1]


# Runs `lens ARGV…` and delivers a Ctrl-C as the first built-in call that WHERE (an expression
# of `arg`, the built-in function, and `frame`, its caller's frame) selects returns: where Python
# raises a SIGINT that came during a system call, before the caller stores what it returned.
_AS_RETURNING = r"""
import signal, sys
from runtime.cli import main
def profile(frame, event, arg):
    if event == "c_return" and WHERE:
        sys.setprofile(None)
        signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)
sys.setprofile(profile)
sys.exit(main(sys.argv[1:]))
"""


def interrupted_as_returning(where: str, argv: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``lens ARGV`` (in ``cwd``) with a Ctrl-C as the first built-in call ``where`` selects
    returns; stdout and stderr as text."""
    return subprocess.run([sys.executable, "-c", _AS_RETURNING.replace("WHERE", where), *argv], cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)


def interrupted_at_call(call: int, argv: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``lens ARGV`` (in ``cwd``) with a Ctrl-C at its ``call``-th Python call (0: none); stderr as text."""
    return subprocess.run([sys.executable, "-c", _AT_CALL, str(call), *argv], cwd=cwd,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60)


def interrupted_where(where: str, argv: Sequence[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``lens ARGV`` (in ``cwd``) with a Ctrl-C at the first Python call ``where`` selects;
    stdout and stderr as text."""
    return subprocess.run([sys.executable, "-c", _WHERE.replace("WHERE", where), *argv], cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)


def ctrl_c_sweep(argv: Sequence[str], cwd: Path | None = None, *, reset: Callable[[], None] = lambda: None,
                 points: int = 28, tail: tuple[int, int] = (0, 0),
                 noted: str | None = None,
                 done: Callable[[], bool] = lambda: False) -> Iterator[tuple[int, subprocess.CompletedProcess[str]]]:
    """A Ctrl-C at ``points`` calls across the whole of ``lens ARGV``, densest where the stack
    loads (C extensions initialising, msgspec building its decoders) and sparser after, and with
    ``tail`` (CALLS, POINTS) at POINTS more spread evenly over its last CALLS calls (a command whose
    own work, after the stack has loaded, is short): each run that reached its point must end
    130, saying so (after at most one block of a Ctrl-C Python dropped in a finalizer or callback,
    which comes again, once), or with ``noted`` (a regular expression) ending with "; NOTE" where NOTE
    matches it: what a command stopped after its work says it left, only where ``done()`` (asked
    after the run) says its work was done; yields the call and the run for more checks. ``reset``
    runs before each run, the whole one first."""
    reset()
    whole = interrupted_at_call(0, argv, cwd)
    assert whole.returncode == 0, whole.stderr
    total = int(whole.stderr.split("CALLS ")[1])
    assert total > 10_000, total  # the stack loads inside main(): the sweep crosses it
    last, more = tail
    calls = sorted({2 + int((total - 2) * 0.9 * (i / points) ** 2) for i in range(points)}  # call 1: main() itself
                   | {total - last + last * i // more for i in range(more)})
    reached = 0
    for call in calls:
        reset()
        res = interrupted_at_call(call, argv, cwd)
        if res.stderr == "UNREACHED\n":
            assert res.returncode == 0
            continue
        reached += 1
        # (Python drops what a finalizer or weakref callback raises, saying "Exception ignored in
        # …" with its traceback, and msgspec's C code what Python code it calls raises: that Ctrl-C
        # comes again, once, and is never delivered again into such a clean-up.)
        assert res.returncode == 130, (call, res.returncode, res.stderr)
        said = noted is not None and re.fullmatch(re.escape(INTERRUPTED[:-1]) + "; " + noted + "\n", res.stderr)
        assert res.stderr == INTERRUPTED or DROPPED_ONCE.fullmatch(res.stderr) or said, (call, res.stderr)
        assert not said or done(), (call, "noted, but its work was not done", res.stderr)
        yield call, res
    assert reached >= len(calls) - 2, (reached, len(calls))  # (the last points may lie past a shorter run)
