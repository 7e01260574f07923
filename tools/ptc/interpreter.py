"""A restricted Python-subset interpreter for programmatic tool runs (PTC).

The program is parsed with :func:`ast.parse` and its tree is walked here; nothing is ever handed
to ``exec``/``eval``/``compile``. Only whitelisted node types are evaluated, against values of
whitelisted types: ``None, bool, int, float, str, list, tuple, dict, set``, lazy ``range``
objects, the program's error objects (:class:`ErrorValue`) and the callables made here
(builtins, error constructors and tool functions). Attribute access is limited to whitelisted
methods called directly (``x.split(",")``) on values of exactly the listed types, and to
``e.code`` / ``e.message`` on an error object.

Cost model (what ``Limits.max_steps`` counts): every statement and expression evaluated is one
step; an operation that builds or scans a container additionally costs one step per item it
touches (strings: one per 64 characters), counted *before* the work is done, so no single
C-level operation can do much more work than it was charged for (one charged a million steps,
such as sorting or printing a million items, still runs unbroken: ~0.1-0.2 s). Every 1,000 steps the evaluator yields to
trio (``trio.lowlevel.checkpoint``), so a busy program can be cancelled.

Sizes are checked before anything is built: no ``str``/``list``/``tuple``/``dict``/``set``
built by the program may exceed ``Limits.max_value_items`` items (characters for ``str``), and
integers made by arithmetic may not exceed :data:`MAX_INT_BITS` bits.

Choices made here: the walrus operator is not allowed; ``raise`` and ``assert`` are
supported (``PTC_UNCAUGHT`` when not caught); a program variable may shadow a builtin or tool
name (Python's rule), names resolve as program variables, then builtins, then tools; a tool
whose name is not an identifier, is a keyword, starts with ``__`` or equals a builtin's name is
reachable only through ``call_tool``. An exception other than :class:`ToolCallFailed` raised by
the caller is not the program's doing and propagates out of :func:`run_program` unchanged.

The module holds no mutable global state: only constant tables.
"""

from __future__ import annotations

import ast
import builtins as _py_builtins
import inspect
import json
import keyword
import re
import reprlib
import sys
import warnings
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from itertools import chain, islice, repeat
from operator import floordiv
from types import MappingProxyType
from typing import Any

import trio

__all__ = [
    "ErrorValue",
    "Limits",
    "MAX_INT_BITS",
    "Outcome",
    "ProgramError",
    "ToolCallFailed",
    "ToolCaller",
    "check_program",
    "run_program",
]

ToolCaller = Callable[[str, dict[str, Any]], Awaitable[Any]]

MAX_INT_BITS = 10_000
"""Integers produced by arithmetic (``+ - * ** <<``, ``int(text, base)``, ``sum``) stay under this."""

_CHECKPOINT_EVERY = 1000
_HASH_MOD = sys.hash_info.modulus  # ints in (-_HASH_MOD, _HASH_MOD) hash to distinct values (but -1)
_SAME_HASH = 16  # distinct keys with one hash value a program may use (each lookup walks them all)
_DATA_DEPTH = 200  # nesting of data that repr/==/hash/json may recurse into
_STR_CHUNK = 64  # characters per step when a string is scanned or built


class ToolCallFailed(Exception):
    """Raise this from the tool caller when a tool call failed; the program sees it as a catchable error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Limits:
    max_code_bytes: int = 64 * 1024  # UTF-8 bytes of the program
    max_steps: int = 1_000_000  # evaluated AST nodes (statements + expressions) plus container work
    max_calls: int = 200  # tool calls per run
    max_output_bytes: int = 1024 * 1024  # printed text kept (UTF-8 bytes); more is dropped and marked truncated
    max_value_items: int = 10_000_000  # no str/list/tuple/dict/set built by the program may exceed this
    max_depth: int = 100  # nesting depth of the program's AST / of evaluation


class ProgramError(Exception):
    """Why a program was refused or stopped. ``message`` ends with "(line N)" when a line is known."""

    def __init__(self, code: str, text: str, line: int | None = None) -> None:
        self.code = code
        self.text = text
        self.line = line
        self.message = text if line is None else f"{text} (line {line})"
        super().__init__(f"{code}: {self.message}")

    def at(self, line: int | None) -> ProgramError:
        """This error placed on ``line`` unless it already has one."""
        if self.line is not None or line is None:
            return self
        return ProgramError(self.code, self.text, line)


@dataclass
class Outcome:
    output: str  # everything print()ed, cut at max_output_bytes on a UTF-8 boundary
    truncated: bool  # output was cut
    calls: int  # tool calls made
    steps: int
    error: ProgramError | None  # None: the program ran to its end


# --- values the program may hold besides plain data ---------------------------------------------


class ErrorValue:
    """An error as the program sees it (``except ... as e``): ``e.code`` and ``e.message``.

    Tool failures have the tool's code (``FILE_NOT_FOUND``); runtime errors and the program's own
    errors have a Python-style class name (``KeyError``, ``ValueError``).
    """

    __slots__ = ("code", "message", "_kind", "_tool", "_line")

    def __init__(self, code: str, message: str, kind: str, tool: str | None = None) -> None:
        self.code = code
        self.message = message
        self._kind = kind  # "PTC_RUNTIME" | "PTC_TOOL_FAILED" | "PTC_UNCAUGHT" | "PTC_NAME_ERROR"
        self._tool = tool
        self._line: int | None = None

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.message else self.code

    def __repr__(self) -> str:
        if self._kind == "PTC_TOOL_FAILED":
            return f"ToolError({self.code!r}, {self.message!r})"
        return f"{self.code}({self.message!r})"


class _Builtin:
    __slots__ = ("name", "fn", "sig", "is_async")

    def __init__(self, name: str, fn: Callable[..., Any], is_async: bool = False) -> None:
        self.name = name
        self.fn = fn
        self.is_async = is_async
        params = list(inspect.signature(fn).parameters.values())[1:]  # without the machine
        self.sig = inspect.Signature(params)

    def __repr__(self) -> str:
        return f"<builtin {self.name}>"


class _Named:
    """A name the program can call or catch; the subclass says what it names."""

    __slots__ = ("name",)
    kind = ""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name}>"


class _ErrorClass(_Named):
    __slots__ = ()
    kind = "error class"


class _Tool(_Named):
    __slots__ = ()
    kind = "tool"


# Errors the program can name in ``except`` and raise; each catches these codes.
_ERROR_CLASSES: MappingProxyType[str, frozenset[str] | None] = MappingProxyType(
    {
        "Exception": None,  # everything catchable
        "ToolError": frozenset(),  # tool failures only (matched by kind)
        "ValueError": frozenset({"ValueError"}),
        "TypeError": frozenset({"TypeError"}),
        "KeyError": frozenset({"KeyError"}),
        "IndexError": frozenset({"IndexError"}),
        "LookupError": frozenset({"LookupError", "KeyError", "IndexError"}),
        "ZeroDivisionError": frozenset({"ZeroDivisionError"}),
        "OverflowError": frozenset({"OverflowError"}),
        "ArithmeticError": frozenset({"ArithmeticError", "ZeroDivisionError", "OverflowError"}),
        "RuntimeError": frozenset({"RuntimeError"}),
        "AssertionError": frozenset({"AssertionError"}),
        "NameError": frozenset({"NameError"}),
        "AttributeError": frozenset({"AttributeError"}),
    }
)
_ERROR_CLASS_VALUES = MappingProxyType({name: _ErrorClass(name) for name in _ERROR_CLASSES})
_PY_ERROR_NAMES = (
    "KeyError",
    "IndexError",
    "ZeroDivisionError",
    "OverflowError",
    "TypeError",
    "ValueError",
    "LookupError",
    "ArithmeticError",
    "RuntimeError",
    "AttributeError",
)


class _Thrown(Exception):
    """A catchable error travelling through the program (``try``/``except`` sees it)."""

    def __init__(self, error: ErrorValue, line: int | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        if error._line is None:
            error._line = line

    def at(self, line: int | None) -> _Thrown:
        if self.error._line is None:
            self.error._line = line
        return self

    def to_program_error(self) -> ProgramError:
        e = self.error
        if e._kind == "PTC_TOOL_FAILED":
            text = f"{e._tool} failed: {e.code}: {e.message}"
        elif e._kind == "PTC_NAME_ERROR":
            text = e.message
        else:
            text = str(e)
        return ProgramError(e._kind, _cut(text), e._line)  # (the program's own message may be long)


class _Foreign(BaseException):
    """Carries a non-ToolCallFailed exception of the caller out, untouched by the program."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self.exc = exc


def _runtime(code: str, message: str) -> _Thrown:
    return _Thrown(ErrorValue(code, message, "PTC_RUNTIME"))


_MESSAGE_CHARS = 1000  # of an error message made by Python or shown as the run's error
class _KeyRepr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 600:  # (decimal text of a huge int is quadratic work)
            return f"<an integer of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_KEY_REPR = _KeyRepr()
_KEY_REPR.maxstring = _KEY_REPR.maxother = _KEY_REPR.maxlong = 200


def _cut(text: str, limit: int = _MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _from_python(exc: BaseException) -> _Thrown:
    code = "RuntimeError"
    for cls in type(exc).__mro__:
        if cls.__name__ in _PY_ERROR_NAMES:
            code = cls.__name__
            break
    if type(exc) is KeyError and len(exc.args) == 1:  # str() would be the key's whole repr
        return _runtime(code, _cut(_KEY_REPR.repr(exc.args[0])))
    return _runtime(code, _cut(str(exc)))


def _too_large(what: str) -> ProgramError:
    return ProgramError("PTC_VALUE_TOO_LARGE", what)


def _int_cost(a_bits: int, b_bits: int) -> int:
    """Steps of multiplying or dividing integers of these sizes, or (a_bits, a_bits) of writing or
    reading one in decimal: CPython does these in quadratic time (~160 us for 10,000 bits)."""
    return (a_bits * b_bits) >> 19


def _search_cost(n: int, m: int) -> int:
    """Steps (beyond the scan of the text) of a forward search for ``m`` characters in ``n``.

    CPython searches short texts (under 2,500 characters, or 30,000 for a needle under 100) with a
    simple method that may compare the whole needle at every position: up to n * m comparisons.
    Longer texts use a linear one, but finish their last 30,000 characters the simple way."""
    m = min(m, n)
    if n >= 2500:
        m = min(m, 100)
    return min(n, 30000) * m // 1024


_PLAIN = frozenset({type(None), bool, int, float, str, list, tuple, dict, set})
_SCALARS = frozenset({type(None), bool, int, float})
_CONTAINERS = frozenset({list, tuple, dict, set})
_ITERABLES = frozenset({list, tuple, dict, set, str, range})
_PY_ERRORS = (TypeError, ValueError, LookupError, ArithmeticError, RuntimeError)


def _tname(value: Any) -> str:
    t = type(value)
    if t is ErrorValue:
        return "error"
    if t in (_Builtin, _ErrorClass, _Tool):
        return "function"
    return t.__name__


_FLAT_OTHERS = frozenset({float, bool, type(None)})


def _flat_scalars(
    items: Callable[[], Iterable[Any]], kinds: set[type], n: int, text: bool, budget: int
) -> tuple[int, int] | None:
    """(work, chars) of ``n`` items that are all small ints, all strings or all other scalars."""
    if kinds == {int}:
        bits = max(map(int.bit_length, items()))
        if bits > 64:
            return None
        return n, (bits * 3 // 10 + 2) * n if text else 0
    if kinds == {str}:
        work = n + sum(map(floordiv, map(len, items()), repeat(_STR_CHUNK)))
        if not text or work > budget:
            return work, 0
        total = sum(map(len, items()))
        quotes = sum(map(str.count, items(), repeat('"')))
        size = total if all(map(str.isprintable, items())) else 4 * total
        return work, size + 2 * n + 6 * quotes
    if kinds <= _FLAT_OTHERS:
        return n, 40 * n
    return None


def _flat_walk(x: list[Any] | tuple[Any, ...], text: bool, budget: int, indent: int, depth: int) -> tuple[int, int, int] | None:
    """What :func:`_walk` would count below ``x`` (work, chars, levels), computed by C loops, when
    its items are all scalars or strings of one kind, or lists/tuples of such; else None.

    A long list of scalars or of pairs (a million items) would otherwise hold the trio thread for
    half a second between two checkpoints."""
    n = len(x)
    kinds = set(map(type, x))
    flat = _flat_scalars(lambda: x, kinds, n, text, budget)
    if flat is not None:
        return flat[0], flat[1], 1
    if not kinds <= {list, tuple}:
        return None
    m = sum(map(len, x))
    if n + m > budget:
        return n + m, 0, 2
    if not m:
        return n, 2 * n, 1
    flat = _flat_scalars(lambda: chain.from_iterable(x), set(map(type, chain.from_iterable(x))), m, text, budget)
    if flat is None:
        return None
    chars = flat[1] + (2 * n + 2 * m + (m * (indent * (depth + 1) + indent + 1) if indent else 0) if text else 0)
    return n + flat[0], chars, 2


def _walk(value: Any, work_budget: int, char_budget: int, text: bool, indent: int = 0) -> tuple[int, int, int]:
    """(work, chars, depth) of ``value`` seen as a tree, stopping once a budget is passed.

    ``work`` counts scalars and container items (strings: one per 64 characters); ``chars``
    (only when ``text``) over-estimates the length of its repr/JSON text. Shared parts count each
    time they occur (as repr and == expand them); a container met again on its own path (a cycle)
    counts once. ``depth`` is the deepest container nesting seen.

    A container walked once is not walked again where it recurs (``[d] * 500``): its counts are
    remembered (unless its walk met a cycle, whose count depends on the path), so the time taken
    follows the distinct data, not the steps charged.
    """
    work = chars = max_depth = cycles = 0
    path: set[int] = set()
    memo: dict[Any, tuple[int, int, int]] = {}
    # (iterator over children, their depth, container id, work/chars/cycles before it, [deepest level below it])
    stack: list[tuple[Any, int, int, int, int, int, list[int]]] = []
    x, depth = value, 0
    end = stack  # a sentinel no child can be
    while True:
        t = type(x)
        if t is str:
            work += 1 + len(x) // _STR_CHUNK
            if text:
                chars += (len(x) + 2 if x.isprintable() else 4 * len(x) + 2) + 6 * x.count('"')
        elif t in _CONTAINERS:
            if id(x) in path:
                work += 1
                chars += 5
                cycles += 1
            else:
                key = (id(x), depth) if indent else id(x)
                seen = memo.get(key)
                deepest = depth
                if seen is not None:
                    work += seen[0]
                    chars += seen[1]
                    deepest = depth + seen[2]
                    n = 0
                else:
                    work0, chars0 = work, chars
                    work += 1
                    n = len(x)
                    if text:
                        chars += 2 + (4 if t is dict else 2) * n + (n * (indent * depth + indent + 1) if indent else 0)
                    if n:
                        deepest = depth + 1
                    if n >= 16 and (t is list or t is tuple):
                        flat = _flat_walk(x, text, work_budget - work, indent, depth + 1)
                        if flat is not None:  # (scalars, or lists/tuples of scalars: counted at C speed)
                            work += flat[0]
                            chars += flat[1]
                            deepest = depth + flat[2]
                            n = 0
                if deepest > max_depth:
                    max_depth = deepest
                if stack and deepest > stack[-1][6][0]:
                    stack[-1][6][0] = deepest
                if n:
                    path.add(id(x))
                    it = iter(x.items()) if t is dict else iter(x)
                    if t is dict:
                        it = (kv for pair in it for kv in pair)
                    stack.append((it, depth + 1, id(x), work0, chars0, cycles, [deepest]))
        elif t is int:
            work += 1
            if text:
                bits = x.bit_length()
                chars += bits * 3 // 10 + 2
                work += _int_cost(bits, bits)
        else:
            work += 1
            chars += 40 if t is not ErrorValue else 20 + 4 * (len(x.code) + len(x.message))
        if work > work_budget or chars > char_budget or max_depth > _DATA_DEPTH:
            return work, chars, max_depth
        while stack:
            it, d, i, work0, chars0, cycles0, below = stack[-1]
            nxt = next(it, end)
            if nxt is end:
                stack.pop()
                path.discard(i)
                if cycles == cycles0:
                    memo[(i, d - 1) if indent else i] = (work - work0, chars - chars0, below[0] - (d - 1))
                if stack and below[0] > stack[-1][6][0]:
                    stack[-1][6][0] = below[0]
                continue
            x, depth = nxt, d
            break
        else:
            return work, chars, max_depth


# --- the static check ---------------------------------------------------------------------------

_ALLOWED_NODES = frozenset(
    {
        ast.Module,
        ast.Expr,
        ast.Assign,
        ast.AugAssign,
        ast.If,
        ast.For,
        ast.While,
        ast.Break,
        ast.Continue,
        ast.Pass,
        ast.Try,
        ast.ExceptHandler,
        ast.Raise,
        ast.Assert,
        ast.Delete,
        ast.Constant,
        ast.Name,
        ast.List,
        ast.Tuple,
        ast.Dict,
        ast.Set,
        ast.Starred,
        ast.JoinedStr,
        ast.FormattedValue,
        ast.BinOp,
        ast.UnaryOp,
        ast.BoolOp,
        ast.Compare,
        ast.IfExp,
        ast.Subscript,
        ast.Slice,
        ast.ListComp,
        ast.SetComp,
        ast.DictComp,
        ast.GeneratorExp,
        ast.comprehension,
        ast.Call,
        ast.keyword,
        ast.Attribute,
        ast.Load,
        ast.Store,
        ast.Del,
        ast.And,
        ast.Or,
        ast.Add,
        ast.Sub,
        ast.Mult,
        ast.Div,
        ast.FloorDiv,
        ast.Mod,
        ast.Pow,
        ast.LShift,
        ast.RShift,
        ast.BitOr,
        ast.BitAnd,
        ast.BitXor,
        ast.Invert,
        ast.Not,
        ast.UAdd,
        ast.USub,
        ast.Eq,
        ast.NotEq,
        ast.Lt,
        ast.LtE,
        ast.Gt,
        ast.GtE,
        ast.Is,
        ast.IsNot,
        ast.In,
        ast.NotIn,
    }
)

_NODE_WORDS = MappingProxyType(
    {
        "Import": "import",
        "ImportFrom": "import",
        "FunctionDef": "def",
        "AsyncFunctionDef": "async def",
        "ClassDef": "class",
        "Lambda": "lambda",
        "Global": "global",
        "Nonlocal": "nonlocal",
        "With": "with",
        "AsyncWith": "async with",
        "AsyncFor": "async for",
        "Await": "await",
        "Yield": "yield",
        "YieldFrom": "yield from",
        "Return": "return",
        "NamedExpr": "the walrus operator :=",
        "Match": "match",
        "TryStar": "except*",
        "AnnAssign": "an annotated assignment",
        "MatMult": "the @ operator",
    }
)

_STR_METHODS = frozenset(
    "split rsplit splitlines strip lstrip rstrip startswith endswith lower upper title replace join find "
    "rfind index count partition rpartition isdigit isalpha isspace zfill ljust rjust center removeprefix "
    "removesuffix".split()
)
_LIST_METHODS = frozenset("append extend pop insert remove index count sort reverse copy clear".split())
_DICT_METHODS = frozenset("get keys values items update pop setdefault copy clear".split())
_SET_METHODS = frozenset("add discard remove union intersection difference copy".split())
_METHODS = MappingProxyType({str: _STR_METHODS, list: _LIST_METHODS, dict: _DICT_METHODS, set: _SET_METHODS})
_STR_SEARCHES = frozenset({"find", "index", "count", "partition"})
_STR_STRIPS = frozenset({"strip", "lstrip", "rstrip"})
_ALL_METHODS = _STR_METHODS | _LIST_METHODS | _DICT_METHODS | _SET_METHODS
_ERROR_ATTRS = frozenset({"code", "message"})


def _line(node: ast.AST) -> int | None:
    return getattr(node, "lineno", None)


def _not_allowed(what: str, where: ast.AST | int | None) -> ProgramError:
    line = where if where is None or type(where) is int else _line(where)
    return ProgramError("PTC_NOT_ALLOWED", f"{what} is not allowed", line)


def _parse(code: str, limits: Limits) -> ast.Module:
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > limits.max_code_bytes:
        raise ProgramError("PTC_CODE_TOO_LARGE", f"the program is {size} bytes, more than {limits.max_code_bytes}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. invalid escape sequences: not the program's failure
            return ast.parse(code, mode="exec")
    except SyntaxError as exc:
        return _raise(ProgramError("PTC_SYNTAX", f"SyntaxError: {exc.msg}", exc.lineno))
    except (RecursionError, MemoryError):
        return _raise(ProgramError("PTC_TOO_DEEP", "the program is nested too deeply to parse"))
    except ValueError as exc:  # null bytes, over-long integer literals, unencodable text
        return _raise(ProgramError("PTC_SYNTAX", f"SyntaxError: {exc}"))


def _raise(exc: BaseException) -> Any:
    raise exc


def _static_check(tree: ast.Module, tool_names: Collection[str], limits: Limits) -> None:
    assigned: set[str] = set()
    call_attrs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            assigned.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            assigned.add(node.name)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            call_attrs.add(id(node.func))
    tools = set(tool_names)
    stack: list[tuple[ast.AST, int, int | None]] = [(tree, 0, None)]
    while stack:
        node, depth, line = stack.pop()
        line = _line(node) or line
        if depth > limits.max_depth:
            raise ProgramError("PTC_TOO_DEEP", f"the program is nested more than {limits.max_depth} levels", line)
        t = type(node)
        if t not in _ALLOWED_NODES:
            raise _not_allowed(_NODE_WORDS.get(t.__name__, t.__name__), line)
        if t is ast.Name:
            name = node.id
            if name.startswith("__"):
                raise _not_allowed(f"the name {name!r}", line)
            if (
                isinstance(node.ctx, ast.Load)
                and name not in assigned
                and name not in tools
                and name not in _BUILTINS
                and name not in _ERROR_CLASSES
                and hasattr(_py_builtins, name)
            ):
                raise _not_allowed(f"the builtin {name!r}", line)
        elif t is ast.Attribute:
            attr = node.attr
            if not isinstance(node.ctx, ast.Load) or attr.startswith("_"):
                raise _not_allowed(f"the attribute {attr!r}", line)
            if id(node) in call_attrs:
                if attr not in _ALL_METHODS and attr not in _ERROR_ATTRS:
                    raise _not_allowed(f"the method {attr!r}", line)
            elif attr not in _ERROR_ATTRS:
                raise _not_allowed(f"the attribute {attr!r}", line)
        elif t is ast.Constant:
            if type(node.value) not in _SCALARS and type(node.value) is not str:
                raise _not_allowed(f"a constant of type {type(node.value).__name__}", line)
        elif t is ast.BinOp and type(node.op) is ast.MatMult:
            raise _not_allowed("the @ operator", line)
        elif t is ast.FormattedValue and node.format_spec is not None:
            spec = node.format_spec
            if not (
                type(spec) is ast.JoinedStr
                and all(type(v) is ast.Constant and type(v.value) is str for v in spec.values)
            ) or any("{" in v.value or "}" in v.value for v in spec.values):
                raise _not_allowed("a nested format spec", line)
        elif t is ast.ExceptHandler and node.type is not None:
            kinds = node.type.elts if type(node.type) is ast.Tuple else [node.type]
            for k in kinds:
                if type(k) is not ast.Name or k.id not in _ERROR_CLASSES:
                    what = k.id if type(k) is ast.Name else "an expression"
                    raise _not_allowed(f"except {what}", line)
        elif t is ast.Raise and node.cause is not None:
            raise _not_allowed("raise ... from", line)
        elif t is ast.comprehension and node.is_async:
            raise _not_allowed("async comprehension", line)
        elif t is ast.Call:
            for kw in node.keywords:
                if kw.arg is not None and kw.arg.startswith("__"):
                    raise _not_allowed(f"the keyword {kw.arg!r}", line)
        for child in ast.iter_child_nodes(node):
            flat = (t is ast.BinOp and child is node.left and type(child) is ast.BinOp) or (
                t is ast.If and type(child) is ast.If and len(node.orelse) == 1 and child is node.orelse[0]
            )
            stack.append((child, depth if flat else depth + 1, line))


def check_program(code: str, tool_names: Collection[str], limits: Limits = Limits()) -> None:
    """Parse and statically check (size, syntax, allowed node types, depth); raise ProgramError. No tool is called."""
    _static_check(_parse(code, limits), tool_names, limits)


# --- formatting ---------------------------------------------------------------------------------

_SPEC = re.compile(
    r"(?:(?P<fill>.)?(?P<align>[<>=^]))?(?P<sign>[-+ ])?z?#?0?(?P<width>\d+)?[,_]?"
    r"(?:\.(?P<prec>\d+))?[bcdeEfFgGnosxX%]?",
    re.S,
)


# --- the machine --------------------------------------------------------------------------------

_BREAK = object()
_CONTINUE = object()


class _Machine:
    def __init__(self, call_tool: ToolCaller, tool_names: Collection[str], limits: Limits) -> None:
        self.call_tool = call_tool
        self.limits = limits
        self.max_items = limits.max_value_items
        self.steps = 0
        self.calls = 0
        self.next_checkpoint = _CHECKPOINT_EVERY
        self.out: list[str] = []
        self.out_bytes = 0
        self.truncated = False
        self.scopes: list[dict[str, Any]] = [{}]
        self.handling: list[_Thrown] = []
        self.hashes: dict[int, list[Any]] = {}  # hash -> the distinct tuple / huge int keys seen with it
        self.tools = {
            n: _Tool(n)
            for n in tool_names
            if n.isidentifier() and not keyword.iskeyword(n) and not n.startswith("__") and n not in _BUILTINS
            and n not in _ERROR_CLASSES
        }

    # -- accounting --

    def charge(self, n: int) -> None:
        self.steps += n
        if self.steps > self.limits.max_steps:
            self.steps = self.limits.max_steps + 1  # work past the limit is never done
            raise ProgramError("PTC_STEP_LIMIT", f"the program ran more than {self.limits.max_steps} steps")

    def charge_len(self, value: Any) -> None:
        """Shallow work over ``value``: one step per item (strings: per 64 characters)."""
        t = type(value)
        if t is str:
            self.charge(len(value) // _STR_CHUNK)
        elif t in _CONTAINERS:
            self.charge(len(value))
        elif t is range:
            self.check_len(value)
            self.charge(len(value))

    def charge_deep(self, value: Any) -> None:
        """Work of an operation that may recurse through ``value`` (==, <, in, hash, sort)."""
        t = type(value)
        if t in _SCALARS:
            return
        if t is str:
            self.charge(len(value) // _STR_CHUNK)
            return
        if t is range:
            self.charge_len(value)
            return
        budget = self.limits.max_steps - self.steps + 1
        work, _, depth = _walk(value, budget, 1 << 62, False)
        if depth > _DATA_DEPTH:
            raise ProgramError("PTC_TOO_DEEP", f"a value is nested more than {_DATA_DEPTH} levels")
        self.charge(work)

    def check_size(self, n: int, what: str = "value") -> None:
        if n > self.max_items:
            raise _too_large(f"a {what} of {n} items would exceed the limit of {self.max_items}")

    def check_len(self, value: Any) -> None:
        try:
            n = len(value)
        except OverflowError:
            n = self.max_items + 1
        self.check_size(n, _tname(value))

    def tidy(self, value: Any) -> Any:
        """``value``, rebuilt in place if it is a set or dict whose table is far larger than its items.

        Python never shrinks a table when items are removed, and iterating or copying it walks the
        whole table: a set of 200,000 items emptied (``a ^ a``, ``a -= b``) would cost a step per
        ``list(e)`` yet take milliseconds. The rebuild costs its items; it happens only after at
        least half the table was removed, each removal charged."""
        t = type(value)
        if (t is set or t is dict) and sys.getsizeof(value) > 128 * len(value) + 8192:
            self.charge(len(value))
            copy = t(value)  # (reuses the stored hashes)
            value.clear()
            value.update(copy)
        return value

    def check_int(self, value: int) -> int:
        if value.bit_length() > MAX_INT_BITS:
            raise _too_large(f"an integer of more than {MAX_INT_BITS} bits")
        return value

    # -- values --

    def items(self, value: Any) -> Any:
        """``value`` as something C code may iterate: ranges length-checked, everything charged."""
        t = type(value)
        if t not in _ITERABLES:
            raise _runtime("TypeError", f"'{_tname(value)}' object is not iterable")
        if t is str:
            self.charge(len(value))  # one item per character
        else:
            self.charge_len(value)
        return value

    def materialize(self, value: Any) -> list[Any]:
        return list(self.items(value))

    def text(self, value: Any, as_repr: bool = False) -> str:
        t = type(value)
        if t is str and not as_repr:
            return value
        if t in _SCALARS and t is not int:
            return repr(value)
        budget = self.limits.max_steps - self.steps + 1
        work, chars, depth = _walk(value, budget, self.max_items, True)
        if depth > _DATA_DEPTH:
            raise ProgramError("PTC_TOO_DEEP", f"a value is nested more than {_DATA_DEPTH} levels")
        self.charge(work)
        if chars > self.max_items and (t is not str or len(value) > self.max_items):
            raise _too_large(f"the text of a {_tname(value)} would exceed {self.max_items} characters")
        s = repr(value) if as_repr else str(value)
        self.check_size(len(s), "str")
        self.charge(len(s) // _STR_CHUNK)  # (escapes make it up to 10 times its estimate)
        return s

    def format(self, value: Any, spec: str) -> str:
        if not spec:
            return self.text(value)
        if type(value) not in (int, float, str, bool):
            raise _runtime("TypeError", f"unsupported format string passed to {_tname(value)}")
        m = _SPEC.fullmatch(spec)
        if m is None:
            raise _runtime("ValueError", f"invalid format specifier {spec!r}")
        if type(value) is int:
            self.charge(_int_cost(value.bit_length(), value.bit_length()))
        for field in ("width", "prec"):
            digits = m.group(field)
            if digits is not None and (len(digits) > 9 or int(digits) > self.max_items):
                raise _too_large(f"a format {field} of {digits}")
        s = format(value, spec)
        self.check_size(len(s), "str")
        self.charge(len(s) // _STR_CHUNK)
        return s

    def emit(self, text: str) -> None:
        self.charge(len(text) // _STR_CHUNK)
        if self.truncated or not text:
            return
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates (json_loads('"\\ud800"')) become U+FFFD
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            data = text.encode("utf-8")
        room = self.limits.max_output_bytes - self.out_bytes
        if len(data) <= room:
            self.out.append(text)
            self.out_bytes += len(data)
            return
        piece = data[:room].decode("utf-8", "ignore")  # drops a character cut in two
        self.out.append(piece)
        self.out_bytes += len(piece.encode("utf-8"))
        self.truncated = True

    def key(self, value: Any) -> Any:
        """Charge hashing ``value`` (tuples hash recursively) and refuse keys crafted to collide."""
        t = type(value)
        if t is tuple:
            self.charge_deep(value)
            self.same_hash(value)
        elif t is int and not -_HASH_MOD < value < _HASH_MOD:
            self.same_hash(value)
        return value

    def keys(self, items: Any) -> None:
        """:meth:`key` for every item of a list, tuple or range going into a set (already charged)."""
        if type(items) is range:
            if items and max(abs(items[0]), abs(items[-1])) >= _HASH_MOD:
                for x in items:
                    self.same_hash(x)
            return
        for x in items:
            t = type(x)
            if t is tuple or (t is int and not -_HASH_MOD < x < _HASH_MOD):
                self.same_hash(x)

    def same_hash(self, value: Any) -> None:
        """Python's int hash is ``x mod 2**61-1`` and a tuple's mixes its items' hashes, so a program
        can make any number of distinct keys with one hash; each insert or lookup then compares
        with all of them (``{i * (2**61 - 1) for i in range(30000)}`` took 15 s). Strings hash
        with a random key. At most :data:`_SAME_HASH` distinct such keys may share a hash."""
        h = hash(value)
        seen = self.hashes.get(h)
        if seen is None:
            self.hashes[h] = [value]
            return
        for i, other in enumerate(seen):
            if i:
                self.charge_deep(value)
            if other is value or other == value:
                return
        if len(seen) >= _SAME_HASH:
            raise ProgramError("PTC_NOT_ALLOWED", f"more than {_SAME_HASH} different dict keys or set items "
                               "with the same hash are not allowed")
        seen.append(value)

    def to_json(self, value: Any, depth: int = 0) -> Any:
        """A fresh JSON-like copy of ``value`` for a tool's arguments (tuples become lists)."""
        if depth > _DATA_DEPTH:
            raise ProgramError("PTC_TOO_DEEP", f"tool arguments nested more than {_DATA_DEPTH} levels")
        t = type(value)
        if t in _SCALARS or t is str:
            return value
        if t is list or t is tuple:
            self.charge(len(value))
            kinds = set(map(type, value))
            if kinds <= _JSON_SCALARS:  # (a long list is copied in C, not item by item)
                return list(value)
            if kinds <= {list, tuple} and depth < _DATA_DEPTH and set(map(type, chain.from_iterable(value))) <= _JSON_SCALARS:
                self.charge(sum(map(len, value)))
                return list(map(list, value))
            return [self.to_json(v, depth + 1) for v in value]
        if t is dict:
            self.charge(len(value))
            out = {}
            for k, v in value.items():
                if type(k) is not str:
                    raise _runtime("TypeError", f"tool arguments must be JSON data: a key is a {_tname(k)}, not str")
                out[k] = self.to_json(v, depth + 1)
            return out
        raise _runtime("TypeError", f"tool arguments must be JSON data, not {_tname(value)}")

    # -- names --

    def lookup(self, name: str) -> Any:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name in _BUILTINS:
            return _BUILTINS[name]
        if name in _ERROR_CLASS_VALUES:
            return _ERROR_CLASS_VALUES[name]
        if name in self.tools:
            return self.tools[name]
        raise _Thrown(ErrorValue("NameError", f"name {name!r} is not defined", "PTC_NAME_ERROR"))

    # -- running --

    async def run(self, tree: ast.Module) -> None:
        sig = await self.block(tree.body)
        if sig is not None:  # pragma: no cover - the parser refuses break/continue outside a loop
            raise ProgramError("PTC_SYNTAX", "break or continue outside a loop")

    async def step(self) -> None:
        self.steps += 1
        if self.steps > self.limits.max_steps:
            raise ProgramError("PTC_STEP_LIMIT", f"the program ran more than {self.limits.max_steps} steps")
        if self.steps >= self.next_checkpoint:
            self.next_checkpoint = self.steps + _CHECKPOINT_EVERY
            await trio.lowlevel.checkpoint()

    async def block(self, body: list[ast.stmt]) -> Any:
        for stmt in body:
            sig = await self.eval(stmt)
            if sig is not None:
                return sig
        return None

    async def eval(self, node: ast.stmt | ast.expr) -> Any:
        """Run a statement (to its control signal, or None) or evaluate an expression (to its
        value); an error names the node's line."""
        await self.step()
        try:
            return await _NODES[type(node)](self, node)
        except ProgramError as exc:
            raise exc.at(node.lineno) from None
        except _Thrown as exc:
            raise exc.at(node.lineno)
        except RecursionError:
            raise ProgramError("PTC_TOO_DEEP", "evaluation nested too deeply", node.lineno) from None
        except _PY_ERRORS as exc:
            raise _from_python(exc).at(node.lineno) from None

    # -- assignment --

    async def assign(self, target: ast.expr, value: Any) -> None:
        t = type(target)
        if t is ast.Name:
            self.scopes[-1][target.id] = value
        elif t is ast.Subscript:
            container = await self.eval(target.value)
            await self.set_item(container, target.slice, value)
        elif t is ast.Tuple or t is ast.List:
            await self.unpack(target.elts, value)
        elif t is ast.Starred:  # pragma: no cover - the parser refuses a lone starred target
            raise _not_allowed("a starred assignment target", target)
        else:  # pragma: no cover - attributes are refused statically
            raise _not_allowed(f"assigning to {t.__name__}", target)

    async def unpack(self, elts: list[ast.expr], value: Any) -> None:
        items = self.materialize(value)
        stars = [i for i, e in enumerate(elts) if type(e) is ast.Starred]
        if not stars:
            if len(items) != len(elts):
                many = "too many" if len(items) > len(elts) else "not enough"
                raise _runtime("ValueError", f"{many} values to unpack (expected {len(elts)}, got {len(items)})")
            for e, v in zip(elts, items):
                await self.assign(e, v)
            return
        s = stars[0]
        after = len(elts) - s - 1
        if len(items) < len(elts) - 1:
            raise _runtime("ValueError", f"not enough values to unpack (expected at least {len(elts) - 1}, got {len(items)})")
        for e, v in zip(elts[:s], items[:s]):
            await self.assign(e, v)
        await self.assign(elts[s].value, items[s : len(items) - after])
        for e, v in zip(elts[s + 1 :], items[len(items) - after :]):
            await self.assign(e, v)

    async def index(self, node: ast.expr) -> Any:
        if type(node) is ast.Slice:
            await self.step()
            parts = []
            for part in (node.lower, node.upper, node.step):
                v = None if part is None else await self.eval(part)
                if v is not None and type(v) not in (int, bool):
                    raise _runtime("TypeError", "slice indices must be integers or None")
                parts.append(v)
            return slice(*parts)
        return await self.eval(node)

    async def set_item(self, container: Any, index_node: ast.expr, value: Any) -> None:
        self.store_item(container, await self.index(index_node), value)

    def store_item(self, container: Any, key: Any, value: Any) -> None:
        t = type(container)
        if t is dict:
            self.key(key)
            if key not in container:
                self.check_size(len(container) + 1, "dict")
            container[key] = value
        elif t is list:
            if type(key) is slice:
                new = self.materialize(value)
                old = len(range(*key.indices(len(container))))
                self.check_size(len(container) - old + len(new), "list")
                self.charge(len(container))
                container[key] = new
            elif type(key) in (int, bool):
                container[key] = value
            else:
                raise _runtime("TypeError", f"list indices must be integers or slices, not {_tname(key)}")
        else:
            raise _runtime("TypeError", f"'{_tname(container)}' object does not support item assignment")

    def get_item(self, container: Any, key: Any) -> Any:
        t = type(container)
        if t is dict:
            self.key(key)
            return container[key]
        if t in (list, tuple, str, range):
            if type(key) is slice:
                n = len(range(*key.indices(len(container))))
                self.charge(n if t is not str else n // _STR_CHUNK)
                return container[key]
            if type(key) in (int, bool):
                return container[key]
            raise _runtime("TypeError", f"{t.__name__} indices must be integers or slices, not {_tname(key)}")
        raise _runtime("TypeError", f"'{_tname(container)}' object is not subscriptable")

    # -- operators --

    def binop(self, op: type, a: Any, b: Any) -> Any:
        result = self._binop(op, a, b)
        t = type(result)
        if t is set:
            self.tidy(result)
        elif t is int:
            self.check_int(result)
        elif t not in _PLAIN and t is not range:  # (-8) ** 0.5 is complex in Python
            raise _runtime("ValueError", f"the result would be a {t.__name__} number, which programs cannot hold")
        return result

    def _binop(self, op: type, a: Any, b: Any) -> Any:
        """``a op b`` with sizes checked before anything large is built (binop checks the result)."""
        ta, tb = type(a), type(b)
        if not (ta in _PLAIN or ta is range) or not (tb in _PLAIN or tb is range):
            raise _runtime("TypeError", f"unsupported operand types: {_tname(a)} and {_tname(b)}")
        if op is ast.Add:
            if ta in (str, list, tuple) and ta is tb:
                self.check_size(len(a) + len(b), ta.__name__)
                self.charge_len(a)
                self.charge_len(b)
                return a + b
            return a + b
        if op is ast.Sub:
            if ta is set and tb is set:
                self.charge(len(a) + len(b))
            return a - b
        if op is ast.Mult:
            if ta in (str, list, tuple) and tb in (int, bool):
                seq, n = a, b
            elif tb in (str, list, tuple) and ta in (int, bool):
                seq, n = b, a
            else:
                if ta in (int, bool) and tb in (int, bool):
                    if a.bit_length() + b.bit_length() > MAX_INT_BITS + 1:
                        raise _too_large(f"an integer of more than {MAX_INT_BITS} bits")
                    self.charge(_int_cost(a.bit_length(), b.bit_length()))
                return a * b
            total = len(seq) * max(n, 0)
            self.check_size(total, type(seq).__name__)
            self.charge(total if type(seq) is not str else total // _STR_CHUNK)
            return seq * n
        if op is ast.Div:
            return a / b
        if op is ast.FloorDiv or op is ast.Mod:
            if ta is str and op is ast.Mod:
                raise ProgramError("PTC_NOT_ALLOWED", "%-formatting of strings is not allowed; use f-strings")
            if ta in (int, bool) and tb in (int, bool):
                self.charge(_int_cost(a.bit_length(), b.bit_length()))
            return a // b if op is ast.FloorDiv else a % b
        if op is ast.Pow:
            if ta in (int, bool) and tb in (int, bool) and b > 0 and abs(a) > 1:
                # |a| ** b has more than b * (bits(a) - 1) bits: refuse before computing; the
                # result (at most twice the limit) is checked exactly afterwards.
                if b * (a.bit_length() - 1) > MAX_INT_BITS:
                    raise _too_large(f"an integer of more than {MAX_INT_BITS} bits")
                bits = b * a.bit_length()
                self.charge(_int_cost(bits, bits))
            if ta in (int, bool) and tb in (int, bool) and b > 0:
                self.charge(b.bit_length() >> 7)  # one squaring per bit of b, even for 1 ** b
            if ta is float or tb is float:
                if ta in (int, bool) and a.bit_length() > 1100:
                    raise _runtime("OverflowError", "int too large to convert to float")
            return a**b
        if op is ast.LShift:
            if ta in (int, bool) and tb in (int, bool) and b > 0 and a and a.bit_length() + b > MAX_INT_BITS:
                raise _too_large(f"an integer of more than {MAX_INT_BITS} bits")
            return a << b
        if op is ast.RShift:
            return a >> b
        if op in (ast.BitOr, ast.BitAnd, ast.BitXor):
            if ta in (set, dict) and tb in (set, dict):
                if op is ast.BitOr:
                    self.check_size(len(a) + len(b), ta.__name__)
                self.charge(len(a) + len(b))
            if op is ast.BitOr:
                return a | b
            return a & b if op is ast.BitAnd else a ^ b
        raise _not_allowed(op.__name__, None)  # pragma: no cover - refused statically

    def inplace(self, op: type, a: Any, b: Any) -> Any:
        """``a op= b``: lists, sets and dicts change in place (as in Python)."""
        ta = type(a)
        if ta is list and op is ast.Add:
            items = self.materialize(b)
            self.check_size(len(a) + len(items), "list")
            a.extend(items)
            return a
        if ta is set and type(b) is set and op in (ast.BitOr, ast.BitAnd, ast.BitXor, ast.Sub):
            if op is ast.BitOr:
                self.check_size(len(a) + len(b), "set")
            self.charge(len(b))
            if op is ast.BitOr:
                a |= b
            elif op is ast.BitAnd:
                a &= b
            elif op is ast.BitXor:
                a ^= b
            else:
                a -= b
            return self.tidy(a)
        if ta is dict and type(b) is dict and op is ast.BitOr:
            self.check_size(len(a) + len(b), "dict")
            self.charge(len(b))
            a |= b
            return a
        return self.binop(op, a, b)

    def compare(self, op: type, a: Any, b: Any) -> bool:
        if op is ast.Is:
            return a is b
        if op is ast.IsNot:
            return a is not b
        if op is ast.In or op is ast.NotIn:
            tb = type(b)
            if tb in (dict, set):
                self.key(a)
            elif tb is range:
                if type(a) not in (int, bool):
                    self.charge_len(b)  # range scans for a non-integer
            elif tb is str:
                if type(a) is not str:
                    raise _runtime("TypeError", f"'in <string>' requires string as left operand, not {_tname(a)}")
                self.charge(len(b) // _STR_CHUNK + _search_cost(len(b), len(a)))
            elif tb in (list, tuple):
                self.charge_deep(a)
                self.charge_deep(b)
            else:
                raise _runtime("TypeError", f"argument of type '{_tname(b)}' is not iterable")
            found = a in b
            return found if op is ast.In else not found
        ta, tb = type(a), type(b)
        if not (ta in _SCALARS and tb in _SCALARS):
            self.charge_deep(a)
            self.charge_deep(b)
        if op is ast.Eq:
            return a == b
        if op is ast.NotEq:
            return a != b
        if op is ast.Lt:
            return a < b
        if op is ast.LtE:
            return a <= b
        if op is ast.Gt:
            return a > b
        return a >= b

    # -- calls --

    async def call_args(self, node: ast.Call) -> tuple[list[Any], dict[str, Any]]:
        args: list[Any] = []
        for a in node.args:
            if type(a) is ast.Starred:
                args.extend(self.materialize(await self.eval(a.value)))
            else:
                args.append(await self.eval(a))
        kwargs: dict[str, Any] = {}
        for kw in node.keywords:
            value = await self.eval(kw.value)
            if kw.arg is None:
                if type(value) is not dict:
                    raise _runtime("TypeError", f"argument after ** must be a dict, not {_tname(value)}")
                self.charge(len(value))
                pairs = list(value.items())
            else:
                pairs = [(kw.arg, value)]
            for k, v in pairs:
                if type(k) is not str:
                    raise _runtime("TypeError", "keywords must be strings")
                if k.startswith("__"):
                    raise ProgramError("PTC_NOT_ALLOWED", f"the keyword {k!r} is not allowed")
                if k in kwargs:
                    raise _runtime("TypeError", f"got multiple values for keyword argument {k!r}")
                kwargs[k] = v
        return args, kwargs

    async def call(self, func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        t = type(func)
        if t is _Builtin:
            try:
                bound = func.sig.bind(*args, **kwargs)
            except TypeError as exc:
                raise _runtime("TypeError", f"{func.name}(): {exc}") from None
            if func.is_async:
                return await func.fn(self, *bound.args, **bound.kwargs)
            return func.fn(self, *bound.args, **bound.kwargs)
        if t is _Tool:
            if args and (kwargs or len(args) > 1 or type(args[0]) is not dict):
                raise _runtime(
                    "TypeError",
                    f"{func.name}() takes keyword arguments or exactly one dict of arguments",
                )
            return await self.tool(func.name, args[0] if args else kwargs)
        if t is _ErrorClass:
            return _make_error(func.name, args, kwargs)
        raise _runtime("TypeError", f"'{_tname(func)}' object is not callable")

    def call_sync(self, func: Any, args: list[Any]) -> Any:
        """Call a builtin from inside another builtin (``sorted(key=len)``)."""
        if type(func) is not _Builtin or func.is_async:
            raise _runtime("TypeError", "key must be a builtin function such as len or str")
        try:
            bound = func.sig.bind(*args)
        except TypeError as exc:
            raise _runtime("TypeError", f"{func.name}(): {exc}") from None
        return func.fn(self, *bound.args, **bound.kwargs)

    async def tool(self, name: str, args: Any) -> Any:
        if type(args) is not dict:
            raise _runtime("TypeError", f"the arguments of {name} must be a dict, not {_tname(args)}")
        payload = self.to_json(args)
        if self.calls >= self.limits.max_calls:
            raise ProgramError("PTC_CALL_LIMIT", f"more than {self.limits.max_calls} tool calls")
        self.calls += 1
        try:
            result = await self.call_tool(name, payload)
        except ToolCallFailed as exc:
            raise _Thrown(ErrorValue(str(exc.code), str(exc.message), "PTC_TOOL_FAILED", name)) from None
        except Exception as exc:
            raise _Foreign(exc) from None
        _check_data(result, name)
        return result

    def method(self, recv: Any, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        t = type(recv)
        allowed = _METHODS.get(t)
        if allowed is None or name not in allowed:
            if t is ErrorValue or allowed is None or not hasattr(t, name):
                raise _runtime("AttributeError", f"'{_tname(recv)}' object has no method {name!r}")
            raise ProgramError("PTC_NOT_ALLOWED", f"the method {t.__name__}.{name} is not allowed")
        for a in (*args, *kwargs.values()):
            if type(a) is range:
                self.check_len(a)
        guard = _GUARDED.get((t, name))
        if guard is not None:
            params = _GUARD_SIGS[(t, name)]
            try:
                bound = params.bind(*args, **kwargs)
            except TypeError as exc:
                raise _runtime("TypeError", f"{t.__name__}.{name}(): {exc}") from None
            result = guard(self, recv, *bound.args, **bound.kwargs)
            if t is set or t is dict:
                self.tidy(recv)
                self.tidy(result)
            return result
        cost = _METHOD_COST.get((t, name))
        if t is str:
            self.charge_len(recv)
            for a in args:  # startswith(("...", ...)) compares each prefix
                self.charge_deep(a)
            if name in _STR_SEARCHES and args and type(args[0]) is str:
                self.charge(_search_cost(len(recv), len(args[0])))
            elif name in _STR_STRIPS and args and type(args[0]) is str:
                # each character stripped is looked up in the whole set of characters
                self.charge(len(recv) * len(args[0]) // 256)
        elif cost == "deep":
            self.charge_deep(recv)
            for a in args:
                self.charge_deep(a)
            if name == "index" and args:  # not found: Python's message is the item's repr
                self.charge(_walk(args[0], self.limits.max_steps - self.steps + 1, self.max_items, True)[0])
        elif cost == "key":
            if args:
                self.key(args[0])
        else:
            self.charge_len(recv)
        result = getattr(recv, name)(*args, **kwargs)
        if type(result) is str:
            self.check_size(len(result), "str")
        elif t is set or t is dict:
            self.tidy(recv)
            self.tidy(result)
        return result


_JSON_SCALARS = frozenset({type(None), bool, int, float, str})


def _check_data(value: Any, tool: str) -> None:
    """A tool's result must be plain data of exactly the allowed types."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        x = stack.pop()
        t = type(x)
        if t in _SCALARS or t is str:
            continue
        if id(x) in seen:
            continue
        seen.add(id(x))
        if t is list or t is tuple or t is set:
            kinds = set(map(type, x))  # (long lists of scalars, or of lists of scalars, are checked in C)
            if kinds <= _JSON_SCALARS:
                continue
            if kinds <= {list, tuple} and set(map(type, chain.from_iterable(x))) <= _JSON_SCALARS:
                continue
            stack.extend(x)
        elif t is dict:
            stack.extend(x.keys())
            stack.extend(x.values())
        else:
            raise _runtime("TypeError", f"{tool} returned a value of type {t.__name__}, not plain data")


def _make_error(name: str, args: list[Any], kwargs: dict[str, Any]) -> ErrorValue:
    if name == "ToolError":
        raise _runtime("TypeError", "ToolError can only be caught, not created")
    if kwargs or len(args) > 1:
        raise _runtime("TypeError", f"{name}() takes at most one message")
    message = args[0] if args else ""
    if type(message) is not str:
        raise _runtime("TypeError", f"{name}() message must be a str, not {_tname(message)}")
    return ErrorValue(name, message, "PTC_UNCAUGHT")


# --- statements ---------------------------------------------------------------------------------


async def _s_expr(m: _Machine, node: ast.Expr) -> Any:
    await m.eval(node.value)


async def _s_assign(m: _Machine, node: ast.Assign) -> Any:
    value = await m.eval(node.value)
    for target in node.targets:
        await m.assign(target, value)


async def _s_augassign(m: _Machine, node: ast.AugAssign) -> Any:
    op = type(node.op)
    target = node.target
    if type(target) is ast.Name:
        current = m.lookup(target.id)
        value = await m.eval(node.value)
        m.scopes[-1][target.id] = m.inplace(op, current, value)
    elif type(target) is ast.Subscript:
        container = await m.eval(target.value)
        key = await m.index(target.slice)
        current = m.get_item(container, key)
        value = await m.eval(node.value)
        m.store_item(container, key, m.inplace(op, current, value))
    else:  # pragma: no cover - attributes are refused statically
        raise _not_allowed("this augmented assignment target", node)


async def _s_if(m: _Machine, node: ast.If) -> Any:
    while True:  # an elif chain runs as a loop, not as nested calls
        if _truth(await m.eval(node.test)):
            return await m.block(node.body)
        if len(node.orelse) == 1 and type(node.orelse[0]) is ast.If:
            node = node.orelse[0]
            await m.step()
            continue
        return await m.block(node.orelse)


async def _s_for(m: _Machine, node: ast.For) -> Any:
    iterable = await m.eval(node.iter)
    if type(iterable) not in _ITERABLES:
        raise _runtime("TypeError", f"'{_tname(iterable)}' object is not iterable")
    for item in iterable:
        await m.assign(node.target, item)
        sig = await m.block(node.body)
        if sig is _BREAK:
            return None
    return await m.block(node.orelse)


async def _s_while(m: _Machine, node: ast.While) -> Any:
    while _truth(await m.eval(node.test)):
        sig = await m.block(node.body)
        if sig is _BREAK:
            return None
    return await m.block(node.orelse)


async def _s_break(m: _Machine, node: ast.Break) -> Any:
    return _BREAK


async def _s_continue(m: _Machine, node: ast.Continue) -> Any:
    return _CONTINUE


async def _s_pass(m: _Machine, node: ast.Pass) -> Any:
    return None


def _matches(handler: ast.ExceptHandler, error: ErrorValue) -> bool:
    if handler.type is None:
        return True
    names = [e.id for e in handler.type.elts] if type(handler.type) is ast.Tuple else [handler.type.id]
    for name in names:
        codes = _ERROR_CLASSES[name]
        if codes is None:
            return True
        if name == "ToolError":
            if error._kind == "PTC_TOOL_FAILED":
                return True
        elif error._kind != "PTC_TOOL_FAILED" and error.code in codes:
            return True
    return False


async def _s_try(m: _Machine, node: ast.Try) -> Any:
    pending: _Thrown | None = None
    sig = None
    try:
        sig = await m.block(node.body)
    except _Thrown as thrown:
        for handler in node.handlers:
            if _matches(handler, thrown.error):
                if handler.name:
                    m.scopes[-1][handler.name] = thrown.error
                m.handling.append(thrown)
                try:
                    sig = await m.block(handler.body)
                except _Thrown as again:
                    pending = again
                finally:
                    m.handling.pop()
                    if handler.name:
                        m.scopes[-1].pop(handler.name, None)
                break
        else:
            pending = thrown
    else:
        if node.orelse:
            try:
                sig = await m.block(node.orelse)
            except _Thrown as thrown:
                pending = thrown
    if node.finalbody:
        fsig = await m.block(node.finalbody)
        if fsig is not None:
            return fsig  # break/continue in finally drops a pending error, as in Python
    if pending is not None:
        raise pending.with_traceback(None)
    return sig


async def _s_raise(m: _Machine, node: ast.Raise) -> Any:
    if node.exc is None:
        if not m.handling:
            raise _runtime("RuntimeError", "no active exception to reraise")
        raise m.handling[-1].with_traceback(None)  # (else each re-raise would add to its traceback)
    value = await m.eval(node.exc)
    if type(value) is _ErrorClass:
        value = _make_error(value.name, [], {})
    if type(value) is not ErrorValue:
        raise _runtime("TypeError", f"exceptions must be errors such as ValueError('...'), not {_tname(value)}")
    fresh = ErrorValue(value.code, value.message, value._kind, value._tool)
    raise _Thrown(fresh, node.lineno)


async def _s_assert(m: _Machine, node: ast.Assert) -> Any:
    if not _truth(await m.eval(node.test)):
        message = "" if node.msg is None else m.text(await m.eval(node.msg))
        raise _Thrown(ErrorValue("AssertionError", message, "PTC_UNCAUGHT"), node.lineno)


async def _s_delete(m: _Machine, node: ast.Delete) -> Any:
    for target in node.targets:
        await _delete(m, target)


async def _delete(m: _Machine, target: ast.expr) -> None:
    t = type(target)
    if t is ast.Name:
        scope = m.scopes[-1]
        if target.id not in scope:
            raise _Thrown(ErrorValue("NameError", f"name {target.id!r} is not defined", "PTC_NAME_ERROR"))
        del scope[target.id]
    elif t is ast.Subscript:
        container = await m.eval(target.value)
        key = await m.index(target.slice)
        if type(container) is dict:
            m.key(key)
        elif type(container) is list:
            m.charge_len(container)
        else:
            raise _runtime("TypeError", f"'{_tname(container)}' object doesn't support item deletion")
        del container[key]
        m.tidy(container)
    elif t in (ast.Tuple, ast.List):
        for e in target.elts:
            await _delete(m, e)
    else:  # pragma: no cover - attributes are refused statically
        raise _not_allowed("this del target", target)


_STATEMENTS: MappingProxyType[type, Callable[..., Awaitable[Any]]] = MappingProxyType(
    {
        ast.Expr: _s_expr,
        ast.Assign: _s_assign,
        ast.AugAssign: _s_augassign,
        ast.If: _s_if,
        ast.For: _s_for,
        ast.While: _s_while,
        ast.Break: _s_break,
        ast.Continue: _s_continue,
        ast.Pass: _s_pass,
        ast.Try: _s_try,
        ast.Raise: _s_raise,
        ast.Assert: _s_assert,
        ast.Delete: _s_delete,
    }
)


# --- expressions --------------------------------------------------------------------------------


def _truth(value: Any) -> bool:
    return bool(value)


async def _e_constant(m: _Machine, node: ast.Constant) -> Any:
    return node.value


async def _e_name(m: _Machine, node: ast.Name) -> Any:
    return m.lookup(node.id)


async def _elements(m: _Machine, elts: list[ast.expr]) -> list[Any]:
    out: list[Any] = []
    for e in elts:
        if type(e) is ast.Starred:
            items = m.materialize(await m.eval(e.value))
            m.check_size(len(out) + len(items), "list")
            out.extend(items)
        else:
            out.append(await m.eval(e))
    return out


async def _e_list(m: _Machine, node: ast.List) -> Any:
    return await _elements(m, node.elts)


async def _e_tuple(m: _Machine, node: ast.Tuple) -> Any:
    return tuple(await _elements(m, node.elts))


async def _e_set(m: _Machine, node: ast.Set) -> Any:
    items = await _elements(m, node.elts)
    for x in items:
        m.key(x)
    return set(items)


async def _e_dict(m: _Machine, node: ast.Dict) -> Any:
    out: dict[Any, Any] = {}
    for k, v in zip(node.keys, node.values):
        if k is None:
            other = await m.eval(v)
            if type(other) is not dict:
                raise _runtime("TypeError", f"'{_tname(other)}' object is not a mapping")
            m.check_size(len(out) + len(other), "dict")
            m.charge(len(other))
            out.update(other)
        else:
            key = m.key(await m.eval(k))
            out[key] = await m.eval(v)
    return out


async def _e_joinedstr(m: _Machine, node: ast.JoinedStr) -> Any:
    parts: list[str] = []
    total = 0
    for v in node.values:
        s = await m.eval(v) if type(v) is ast.FormattedValue else v.value
        total += len(s)
        m.check_size(total, "str")
        parts.append(s)
    m.charge(total // _STR_CHUNK)  # the joined text is a new string (f"{s}{s}")
    return "".join(parts)


async def _e_formattedvalue(m: _Machine, node: ast.FormattedValue) -> Any:
    value = await m.eval(node.value)
    if node.conversion == ord("r"):
        value = m.text(value, as_repr=True)
    elif node.conversion == ord("s"):
        value = m.text(value)
    elif node.conversion == ord("a"):
        m.text(value, as_repr=True)  # size and cost
        value = ascii(value)
        m.check_size(len(value), "str")
    spec = "" if node.format_spec is None else "".join(v.value for v in node.format_spec.values)
    return m.format(value, spec)


async def _e_binop(m: _Machine, node: ast.BinOp) -> Any:
    chain = [node]  # a + b + c + ... is left-nested: evaluate it as a loop
    while type(chain[-1].left) is ast.BinOp:
        chain.append(chain[-1].left)
    value = await m.eval(chain[-1].left)
    for i, link in enumerate(reversed(chain)):
        if i:
            await m.step()
        right = await m.eval(link.right)
        try:
            value = m.binop(type(link.op), value, right)
        except ProgramError as exc:
            raise exc.at(link.lineno) from None
        except _Thrown as exc:
            raise exc.at(link.lineno)
        except _PY_ERRORS as exc:
            raise _from_python(exc).at(link.lineno) from None
    return value


async def _e_unaryop(m: _Machine, node: ast.UnaryOp) -> Any:
    value = await m.eval(node.operand)
    op = type(node.op)
    if op is ast.Not:
        return not _truth(value)
    if type(value) not in (int, float, bool):
        raise _runtime("TypeError", f"bad operand type for unary operator: {_tname(value)}")
    if op is ast.USub:
        return -value
    if op is ast.UAdd:
        return +value
    return ~value


async def _e_boolop(m: _Machine, node: ast.BoolOp) -> Any:
    is_and = type(node.op) is ast.And
    value = None
    for v in node.values:
        value = await m.eval(v)
        if _truth(value) != is_and:
            return value
    return value


async def _e_compare(m: _Machine, node: ast.Compare) -> Any:
    left = await m.eval(node.left)
    for op, comp in zip(node.ops, node.comparators):
        right = await m.eval(comp)
        if not m.compare(type(op), left, right):
            return False
        left = right
    return True


async def _e_ifexp(m: _Machine, node: ast.IfExp) -> Any:
    return await m.eval(node.body if _truth(await m.eval(node.test)) else node.orelse)


async def _e_subscript(m: _Machine, node: ast.Subscript) -> Any:
    container = await m.eval(node.value)
    key = await m.index(node.slice)
    return m.get_item(container, key)


async def _e_attribute(m: _Machine, node: ast.Attribute) -> Any:
    value = await m.eval(node.value)
    if type(value) is ErrorValue and node.attr in _ERROR_ATTRS:
        return getattr(value, node.attr)
    raise _runtime("AttributeError", f"'{_tname(value)}' object has no attribute {node.attr!r}")


async def _e_call(m: _Machine, node: ast.Call) -> Any:
    func = node.func
    if type(func) is ast.Attribute:
        await m.step()
        recv = await m.eval(func.value)
        args, kwargs = await m.call_args(node)
        if type(recv) is ErrorValue and func.attr in _ERROR_ATTRS:
            raise _runtime("TypeError", "'str' object is not callable")
        return m.method(recv, func.attr, args, kwargs)
    f = await m.eval(func)
    args, kwargs = await m.call_args(node)
    return await m.call(f, args, kwargs)


async def _comprehension(m: _Machine, gens: list[ast.comprehension], i: int, emit: Callable[[], Awaitable[None]]) -> None:
    gen = gens[i]
    iterable = await m.eval(gen.iter)
    if type(iterable) not in _ITERABLES:
        raise _runtime("TypeError", f"'{_tname(iterable)}' object is not iterable")
    for item in iterable:
        await m.assign(gen.target, item)
        for cond in gen.ifs:
            if not _truth(await m.eval(cond)):
                break
        else:
            if i + 1 < len(gens):
                await _comprehension(m, gens, i + 1, emit)
            else:
                await emit()


async def _comprehend(m: _Machine, gens: list[ast.comprehension], emit: Callable[[], Awaitable[None]]) -> None:
    """Run a comprehension's loops in a scope of its own (its targets do not leak), calling
    ``emit`` for each item they yield."""
    m.scopes.append({})
    try:
        await _comprehension(m, gens, 0, emit)
    finally:
        m.scopes.pop()


async def _e_listcomp(m: _Machine, node: ast.ListComp | ast.GeneratorExp) -> Any:
    out: list[Any] = []

    async def emit() -> None:
        m.check_size(len(out) + 1, "list")
        out.append(await m.eval(node.elt))

    await _comprehend(m, node.generators, emit)
    return out


async def _e_setcomp(m: _Machine, node: ast.SetComp) -> Any:
    out: set[Any] = set()

    async def emit() -> None:
        m.check_size(len(out) + 1, "set")
        out.add(m.key(await m.eval(node.elt)))

    await _comprehend(m, node.generators, emit)
    return out


async def _e_dictcomp(m: _Machine, node: ast.DictComp) -> Any:
    out: dict[Any, Any] = {}

    async def emit() -> None:
        m.check_size(len(out) + 1, "dict")
        key = m.key(await m.eval(node.key))
        out[key] = await m.eval(node.value)

    await _comprehend(m, node.generators, emit)
    return out


async def _e_starred(m: _Machine, node: ast.Starred) -> Any:
    raise _not_allowed("a starred expression here", node)


async def _e_slice(m: _Machine, node: ast.Slice) -> Any:
    raise _runtime("TypeError", "a slice is only allowed alone in a subscript, as in x[a:b]")


_EXPRESSIONS: MappingProxyType[type, Callable[..., Awaitable[Any]]] = MappingProxyType(
    {
        ast.Constant: _e_constant,
        ast.Name: _e_name,
        ast.List: _e_list,
        ast.Tuple: _e_tuple,
        ast.Set: _e_set,
        ast.Dict: _e_dict,
        ast.JoinedStr: _e_joinedstr,
        ast.FormattedValue: _e_formattedvalue,
        ast.BinOp: _e_binop,
        ast.UnaryOp: _e_unaryop,
        ast.BoolOp: _e_boolop,
        ast.Compare: _e_compare,
        ast.IfExp: _e_ifexp,
        ast.Subscript: _e_subscript,
        ast.Attribute: _e_attribute,
        ast.Call: _e_call,
        ast.ListComp: _e_listcomp,
        ast.GeneratorExp: _e_listcomp,
        ast.SetComp: _e_setcomp,
        ast.DictComp: _e_dictcomp,
        ast.Starred: _e_starred,
        ast.Slice: _e_slice,
    }
)

_NODES = MappingProxyType({**_STATEMENTS, **_EXPRESSIONS})  # (a node is a statement or an expression, never both)


# --- builtins -----------------------------------------------------------------------------------

_NO = object()


def _b_print(m: _Machine, *values: Any, sep: Any = " ", end: Any = "\n") -> None:
    sep = " " if sep is None else sep
    end = "\n" if end is None else end
    if type(sep) is not str or type(end) is not str:
        raise _runtime("TypeError", "sep and end must be str or None")
    parts = [m.text(v) for v in values]
    total = sum(map(len, parts)) + len(sep) * max(len(parts) - 1, 0) + len(end)
    m.check_size(total, "str")
    m.emit(sep.join(parts) + end)


def _b_len(m: _Machine, value: Any, /) -> int:
    if type(value) not in _ITERABLES:
        raise _runtime("TypeError", f"object of type '{_tname(value)}' has no len()")
    return len(value)


def _b_str(m: _Machine, value: Any = "", /) -> str:
    return m.text(value)


def _b_repr(m: _Machine, value: Any, /) -> str:
    return m.text(value, as_repr=True)


def _b_int(m: _Machine, value: Any = 0, /, base: Any = _NO) -> int:
    if base is not _NO:
        if type(value) is not str or type(base) not in (int, bool):
            raise _runtime("TypeError", "int() with a base needs a str and an int base")
        digits = min(len(value), sys.get_int_max_str_digits() or len(value))
        m.charge(len(value) // _STR_CHUNK + _int_cost(4 * digits, 4 * digits))
        return m.check_int(int(value, base))
    if type(value) not in (int, float, bool, str):
        raise _runtime("TypeError", f"int() argument must be a string or a number, not '{_tname(value)}'")
    if type(value) is str:
        digits = min(len(value), sys.get_int_max_str_digits() or len(value))
        m.charge(len(value) // _STR_CHUNK + _int_cost(4 * digits, 4 * digits))
        return m.check_int(int(value))
    return int(value)


def _b_float(m: _Machine, value: Any = 0.0, /) -> float:
    if type(value) not in (int, float, bool, str):
        raise _runtime("TypeError", f"float() argument must be a string or a number, not '{_tname(value)}'")
    if type(value) is str:
        m.charge(len(value) // _STR_CHUNK)
        if len(value) > 4096 and not _FLOAT_TEXT.fullmatch(value):  # Python's message would repeat it all
            raise _runtime("ValueError", f"could not convert string to float: {value[:100]!r}...")
    return float(value)


_FLOAT_TEXT = re.compile(r"\s*[-+]?(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][-+]?\d[\d_]*)?\s*")


def _b_bool(m: _Machine, value: Any = False, /) -> bool:
    return _truth(value)


def _b_list(m: _Machine, iterable: Any = (), /) -> list[Any]:
    return m.materialize(iterable)


def _b_tuple(m: _Machine, iterable: Any = (), /) -> tuple[Any, ...]:
    return tuple(m.items(iterable))


def _b_set(m: _Machine, iterable: Any = (), /) -> set[Any]:
    items = m.items(iterable)
    if type(items) in (list, tuple):
        m.charge_deep(items)
    if type(items) in (list, tuple, range):
        m.keys(items)
    return set(items)


def _b_dict(m: _Machine, iterable: Any = _NO, /, **kwargs: Any) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    if iterable is not _NO:
        if type(iterable) is dict:
            m.charge(len(iterable))
            out.update(iterable)
        else:
            for pair in m.items(iterable):
                if type(pair) not in (list, tuple) or len(pair) != 2:
                    raise _runtime("TypeError", "dict() needs pairs of key and value")
                out[m.key(pair[0])] = pair[1]
    m.check_size(len(out) + len(kwargs), "dict")
    out.update(kwargs)
    return out


def _keyed(m: _Machine, items: list[Any], key: Any) -> list[Any]:
    if key is None or not items:
        return items
    first = m.call_sync(key, [items[0]])  # (checks that key takes one argument)
    m.charge(len(items))  # one call per item, with what the key itself charges
    fn = key.fn
    return [first, *[fn(m, x) for x in islice(items, 1, None)]]


def _b_sorted(m: _Machine, iterable: Any, /, *, key: Any = None, reverse: Any = False) -> list[Any]:
    items = m.materialize(iterable)
    return _sort(m, items, key, reverse)


def _sort(m: _Machine, items: list[Any], key: Any, reverse: Any) -> list[Any]:
    keys = _keyed(m, items, key)
    m.charge_deep(keys)
    if key is None:
        return sorted(items, reverse=bool(reverse))
    order = sorted(range(len(items)), key=keys.__getitem__, reverse=bool(reverse))
    return [items[i] for i in order]


def _b_reversed(m: _Machine, seq: Any, /) -> list[Any]:
    if type(seq) not in (list, tuple, str, range):
        raise _runtime("TypeError", f"'{_tname(seq)}' object is not reversible")
    return list(reversed(m.items(seq)))


def _minmax(m: _Machine, name: str, args: tuple[Any, ...], key: Any, default: Any) -> Any:
    if len(args) == 1:
        items = m.materialize(args[0])
    elif not args:
        raise _runtime("TypeError", f"{name} expected at least 1 argument, got 0")
    else:
        items = list(args)
    if not items:
        if default is _NO:
            raise _runtime("ValueError", f"{name}() arg is an empty sequence")
        return default
    keys = _keyed(m, items, key)
    m.charge_deep(keys)
    pick = min if name == "min" else max
    i = pick(range(len(items)), key=keys.__getitem__)
    return items[i]


def _b_min(m: _Machine, *args: Any, key: Any = None, default: Any = _NO) -> Any:
    return _minmax(m, "min", args, key, default)


def _b_max(m: _Machine, *args: Any, key: Any = None, default: Any = _NO) -> Any:
    return _minmax(m, "max", args, key, default)


_NUMBERS = frozenset({int, float, bool})


def _b_sum(m: _Machine, iterable: Any, /, start: Any = 0) -> Any:
    items = m.items(iterable)
    if type(start) not in _NUMBERS:
        raise _runtime("TypeError", f"sum() adds numbers only, not {_tname(start)}")
    if type(items) is range:
        kinds = {int}
        bits = max(abs(items[0]), abs(items[-1])).bit_length() if items else 0
    else:
        kinds = set(map(type, items))
        if not kinds <= _NUMBERS:
            bad = next((x for x in items if type(x) not in _NUMBERS), None)
            raise _runtime("TypeError", f"sum() adds numbers only, not {_tname(bad)}")
        bits = max(map(int.bit_length, items), default=0) if kinds <= {int, bool} else 0
    if type(start) is int:
        bits = max(bits, start.bit_length())
    m.charge(len(items) * (bits // 2048))  # (adding 10,000-bit integers is ~0.3 us each)
    total = sum(items, start)  # (in C: partial sums stay within a few bits of the largest item)
    if type(total) is int:
        m.check_int(total)
    return total


def _b_range(m: _Machine, *args: Any) -> range:
    if not 1 <= len(args) <= 3:
        raise _runtime("TypeError", f"range expected 1 to 3 arguments, got {len(args)}")
    for a in args:
        if type(a) not in (int, bool):
            raise _runtime("TypeError", f"'{_tname(a)}' object cannot be interpreted as an integer")
    return range(*args)


def _b_enumerate(m: _Machine, iterable: Any, /, start: Any = 0) -> list[tuple[int, Any]]:
    if type(start) not in (int, bool):
        raise _runtime("TypeError", "enumerate() start must be an integer")
    return list(enumerate(m.items(iterable), start))


def _b_zip(m: _Machine, *iterables: Any, strict: Any = False) -> list[tuple[Any, ...]]:
    if not iterables:
        return []
    sizes = []
    for it in iterables:
        if type(it) not in _ITERABLES:
            raise _runtime("TypeError", f"'{_tname(it)}' object is not iterable")
        try:
            sizes.append(len(it))
        except OverflowError:
            sizes.append(m.max_items + 1)
    n = min(sizes)
    if strict and len(set(sizes)) > 1:
        raise _runtime("ValueError", "zip() arguments have different lengths")
    m.check_size(n, "list")
    m.charge(n * len(iterables))
    return list(zip(*iterables))


def _b_any(m: _Machine, iterable: Any, /) -> bool:
    return any(m.items(iterable))


def _b_all(m: _Machine, iterable: Any, /) -> bool:
    return all(m.items(iterable))


def _b_abs(m: _Machine, value: Any, /) -> Any:
    if type(value) not in (int, float, bool):
        raise _runtime("TypeError", f"bad operand type for abs(): '{_tname(value)}'")
    return abs(value)


def _b_round(m: _Machine, number: Any, /, ndigits: Any = None) -> Any:
    if type(number) not in (int, float, bool):
        raise _runtime("TypeError", f"type {_tname(number)} doesn't define __round__ method")
    if ndigits is None:
        return round(number)
    if type(ndigits) not in (int, bool):
        raise _runtime("TypeError", "round() ndigits must be an integer")
    if type(number) is int and ndigits < 0:  # builds 10**-ndigits and divides by it
        bits = max(number.bit_length(), min(-ndigits, 5000) * 10 // 3)
        m.charge(_int_cost(bits, bits))
    if abs(ndigits) > 5000:  # int rounding builds 10**-ndigits
        return round(number, 5000 if ndigits > 0 else -5000) if type(number) is float else (number if ndigits > 0 else 0)
    return round(number, ndigits)


def _b_json_dumps(m: _Machine, value: Any, /, indent: Any = None) -> str:
    if indent is not None and (type(indent) not in (int, bool) or not 0 <= indent <= 16):
        raise _runtime("ValueError", "indent must be None or an integer from 0 to 16")
    budget = m.limits.max_steps - m.steps + 1
    work, chars, depth = _walk(value, budget, m.max_items, True, indent or 0)
    if depth > _DATA_DEPTH:
        raise ProgramError("PTC_TOO_DEEP", f"a value is nested more than {_DATA_DEPTH} levels")
    m.charge(work)
    if chars > m.max_items:
        raise _too_large(f"the JSON text would exceed {m.max_items} characters")
    try:
        s = json.dumps(value, ensure_ascii=False, indent=indent)
    except TypeError as exc:
        raise _runtime("TypeError", str(exc).replace("ErrorValue", "error")) from None
    m.check_size(len(s), "str")
    m.charge(len(s) // _STR_CHUNK)  # (a control character is 6 characters of JSON)
    return s


def _b_json_loads(m: _Machine, text: Any, /) -> Any:
    if type(text) is not str:
        raise _runtime("TypeError", f"json_loads() needs a str, not {_tname(text)}")
    m.charge(len(text) // 16)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _runtime("ValueError", str(exc)) from None


async def _b_call_tool(m: _Machine, name: Any, args: Any = _NO, /) -> Any:
    if type(name) is not str:
        raise _runtime("TypeError", f"call_tool() name must be a str, not {_tname(name)}")
    return await m.tool(name, {} if args is _NO else args)


_BUILTINS: MappingProxyType[str, _Builtin] = MappingProxyType(
    {
        "print": _Builtin("print", _b_print),
        "len": _Builtin("len", _b_len),
        "str": _Builtin("str", _b_str),
        "int": _Builtin("int", _b_int),
        "float": _Builtin("float", _b_float),
        "bool": _Builtin("bool", _b_bool),
        "list": _Builtin("list", _b_list),
        "dict": _Builtin("dict", _b_dict),
        "tuple": _Builtin("tuple", _b_tuple),
        "set": _Builtin("set", _b_set),
        "sorted": _Builtin("sorted", _b_sorted),
        "reversed": _Builtin("reversed", _b_reversed),
        "min": _Builtin("min", _b_min),
        "max": _Builtin("max", _b_max),
        "sum": _Builtin("sum", _b_sum),
        "range": _Builtin("range", _b_range),
        "enumerate": _Builtin("enumerate", _b_enumerate),
        "zip": _Builtin("zip", _b_zip),
        "any": _Builtin("any", _b_any),
        "all": _Builtin("all", _b_all),
        "abs": _Builtin("abs", _b_abs),
        "round": _Builtin("round", _b_round),
        "repr": _Builtin("repr", _b_repr),
        "json_dumps": _Builtin("json_dumps", _b_json_dumps),
        "json_loads": _Builtin("json_loads", _b_json_loads),
        "call_tool": _Builtin("call_tool", _b_call_tool, is_async=True),
    }
)


# --- guarded methods ----------------------------------------------------------------------------


def _g_replace(m: _Machine, s: str, old: Any, new: Any, count: Any = -1, /) -> str:
    if type(old) is not str or type(new) is not str or type(count) not in (int, bool):
        raise _runtime("TypeError", "replace() needs two str and an optional int count")
    m.charge(len(s) // _STR_CHUNK + 2 * _search_cost(len(s), len(old)))
    n = s.count(old)
    if 0 <= count < n:
        n = count
    size = len(s) + n * (len(new) - len(old))
    m.check_size(size, "str")
    m.charge(size // _STR_CHUNK)  # the result, which may be far longer than s
    return s.replace(old, new, count)


def _g_join(m: _Machine, sep: str, iterable: Any, /) -> str:
    items = m.items(iterable)
    if type(items) is dict:
        items = list(items)
    total = 0
    for x in items:
        if type(x) is not str:
            raise _runtime("TypeError", f"join() expects str items, found {_tname(x)}")
        total += len(x)
    total += len(sep) * max(len(items) - 1, 0)
    m.check_size(total, "str")
    m.charge(total // _STR_CHUNK)
    return sep.join(items)


def _pad(name: str) -> Callable[..., str]:
    def pad(m: _Machine, s: str, width: Any, fillchar: Any = " ", /) -> str:
        if type(width) not in (int, bool):
            raise _runtime("TypeError", f"{name}() width must be an integer")
        m.check_size(width, "str")
        m.charge(max(width, len(s)) // _STR_CHUNK)
        return getattr(s, name)(width, fillchar)

    return pad


def _g_zfill(m: _Machine, s: str, width: Any, /) -> str:
    if type(width) not in (int, bool):
        raise _runtime("TypeError", "zfill() width must be an integer")
    m.check_size(width, "str")
    m.charge(max(width, len(s)) // _STR_CHUNK)
    return s.zfill(width)


def _case(name: str) -> Callable[..., str]:
    def case(m: _Machine, s: str, /) -> str:
        m.charge(len(s) // _STR_CHUNK)
        out = getattr(s, name)()
        m.check_size(len(out), "str")
        m.charge(len(out) // _STR_CHUNK)  # ("ΐ".upper() is 3 characters)
        return out

    return case


def _splitter(name: str) -> Callable[..., list[str]]:
    def split(m: _Machine, s: str, sep: Any = None, maxsplit: Any = -1) -> list[str]:
        if (sep is not None and type(sep) is not str) or type(maxsplit) not in (int, bool):
            raise _runtime("TypeError", f"{name}() needs a str or None separator and an int maxsplit")
        m.charge(len(s) // _STR_CHUNK + (2 * _search_cost(len(s), len(sep)) if sep else 0))
        pieces = (s.count(sep) if sep else len(s) // 2) + 1  # at most this many, charged before the list exists
        m.charge(pieces if maxsplit < 0 else min(pieces, maxsplit + 1))
        if name == "rsplit" and _reverse_search(s, sep):
            m.charge(len(s) // _STR_CHUNK)
            return [p[::-1] for p in reversed(s[::-1].split(sep[::-1], maxsplit))]
        return getattr(s, name)(sep, maxsplit)

    return split


def _reverse_search(s: str, sub: Any) -> bool:
    """Whether to search ``s`` from the right by searching it reversed from the left.

    CPython's own right-to-left search may compare the whole needle at every position (n * m
    comparisons: seconds for a 100,000-character needle); its left-to-right search is linear."""
    return type(sub) is str and len(sub) > 1 and len(s) * len(sub) > 1 << 16


def _g_rfind(m: _Machine, s: str, sub: Any, start: Any = None, end: Any = None, /) -> int:
    if type(sub) is not str or any(x is not None and type(x) not in (int, bool) for x in (start, end)):
        raise _runtime("TypeError", "rfind() needs a str and optional int start and end")
    m.charge(len(s) // _STR_CHUNK + len(sub) // _STR_CHUNK)
    if not _reverse_search(s, sub):
        return s.rfind(sub, start, end)
    i, j, _ = slice(start, end).indices(len(s))
    if j - i < len(sub):
        return -1
    m.charge(2 * (j - i) // _STR_CHUNK + _search_cost(j - i, len(sub)))
    found = s[i:j][::-1].find(sub[::-1])
    return -1 if found < 0 else j - found - len(sub)


def _g_rpartition(m: _Machine, s: str, sep: Any, /) -> tuple[str, str, str]:
    if type(sep) is not str:
        raise _runtime("TypeError", f"must be str, not {_tname(sep)}")
    m.charge(len(s) // _STR_CHUNK + len(sep) // _STR_CHUNK)
    if not _reverse_search(s, sep):
        return s.rpartition(sep)
    m.charge(2 * len(s) // _STR_CHUNK + _search_cost(len(s), len(sep)))
    after, found, before = s[::-1].partition(sep[::-1])
    return before[::-1], found[::-1], after[::-1]


_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def _g_splitlines(m: _Machine, s: str, keepends: Any = False) -> list[str]:
    m.charge(len(s) // _STR_CHUNK)
    if s.isprintable() and s.isascii():  # (no line break can be in it)
        lines = 1
    else:
        m.charge(len(_LINE_BREAKS) * len(s) // (16 * _STR_CHUNK))
        lines = sum(s.count(c) for c in _LINE_BREAKS) + 1  # at most this many, charged before the list exists
    m.charge(lines)
    return s.splitlines(keepends)


def _g_append(m: _Machine, lst: list[Any], value: Any, /) -> None:
    m.check_size(len(lst) + 1, "list")
    lst.append(value)


def _g_insert(m: _Machine, lst: list[Any], index: Any, value: Any, /) -> None:
    m.check_size(len(lst) + 1, "list")
    m.charge(len(lst) // 16)
    lst.insert(index, value)


def _g_pop(m: _Machine, lst: list[Any], index: Any = -1, /) -> Any:
    if type(index) not in (int, bool):
        raise _runtime("TypeError", f"'{_tname(index)}' object cannot be interpreted as an integer")
    n = len(lst)
    i = index + n if index < 0 else index
    if 0 <= i < n:
        m.charge((n - i - 1) // 16)  # the items after i move down (as for insert)
    return lst.pop(index)


def _g_extend(m: _Machine, lst: list[Any], iterable: Any, /) -> None:
    items = m.items(iterable)
    m.check_size(len(lst) + len(items), "list")
    lst.extend(items)


def _g_sort(m: _Machine, lst: list[Any], /, *, key: Any = None, reverse: Any = False) -> None:
    lst[:] = _sort(m, lst, key, reverse)


def _g_keys(m: _Machine, d: dict[Any, Any], /) -> list[Any]:
    m.charge(len(d))
    return list(d.keys())


def _g_values(m: _Machine, d: dict[Any, Any], /) -> list[Any]:
    m.charge(len(d))
    return list(d.values())


def _g_items(m: _Machine, d: dict[Any, Any], /) -> list[tuple[Any, Any]]:
    m.charge(len(d))
    return list(d.items())


def _g_update(m: _Machine, d: dict[Any, Any], other: Any = _NO, /, **kwargs: Any) -> None:
    if other is not _NO:
        merged = _b_dict(m, other)
    else:
        merged = {}
    m.check_size(len(d) + len(merged) + len(kwargs), "dict")
    d.update(merged)
    d.update(kwargs)


def _g_setdefault(m: _Machine, d: dict[Any, Any], key: Any, default: Any = None, /) -> Any:
    m.key(key)
    if key not in d:
        m.check_size(len(d) + 1, "dict")
    return d.setdefault(key, default)


def _g_add(m: _Machine, s: set[Any], value: Any, /) -> None:
    m.key(value)
    if value not in s:
        m.check_size(len(s) + 1, "set")
    s.add(value)


def _setop(name: str) -> Callable[..., set[Any]]:
    def op(m: _Machine, s: set[Any], /, *others: Any) -> set[Any]:
        m.charge(len(s))
        total = len(s)
        sets = []
        for o in others:
            items = m.items(o)
            if type(items) in (list, tuple):
                m.charge_deep(items)
            if type(items) in (list, tuple, range):
                m.keys(items)
            total += len(items)
            sets.append(items)
        if name == "union":
            m.check_size(total, "set")
        return getattr(s, name)(*sets)

    return op


_GUARDED: MappingProxyType[tuple[type, str], Callable[..., Any]] = MappingProxyType(
    {
        (str, "replace"): _g_replace,
        (str, "join"): _g_join,
        (str, "ljust"): _pad("ljust"),
        (str, "rjust"): _pad("rjust"),
        (str, "center"): _pad("center"),
        (str, "zfill"): _g_zfill,
        (str, "lower"): _case("lower"),
        (str, "upper"): _case("upper"),
        (str, "title"): _case("title"),
        (str, "split"): _splitter("split"),
        (str, "rsplit"): _splitter("rsplit"),
        (str, "splitlines"): _g_splitlines,
        (str, "rfind"): _g_rfind,
        (str, "rpartition"): _g_rpartition,
        (list, "append"): _g_append,
        (list, "insert"): _g_insert,
        (list, "extend"): _g_extend,
        (list, "pop"): _g_pop,
        (list, "sort"): _g_sort,
        (dict, "keys"): _g_keys,
        (dict, "values"): _g_values,
        (dict, "items"): _g_items,
        (dict, "update"): _g_update,
        (dict, "setdefault"): _g_setdefault,
        (set, "add"): _g_add,
        (set, "union"): _setop("union"),
        (set, "intersection"): _setop("intersection"),
        (set, "difference"): _setop("difference"),
    }
)
_GUARD_SIGS = MappingProxyType(
    {k: inspect.Signature(list(inspect.signature(f).parameters.values())[2:]) for k, f in _GUARDED.items()}
)
# How the unguarded methods are charged: "deep" (they compare items), "key" (they hash the first
# argument); anything else costs the receiver's length.
_METHOD_COST = MappingProxyType(
    {
        (list, "remove"): "deep",
        (list, "index"): "deep",
        (list, "count"): "deep",
        (list, "clear"): "key",
        (dict, "get"): "key",
        (dict, "pop"): "key",
        (dict, "clear"): "key",
        (set, "discard"): "key",
        (set, "remove"): "key",
        (set, "clear"): "key",
    }
)


# --- running a program --------------------------------------------------------------------------


async def run_program(
    code: str, call_tool: ToolCaller, tool_names: Collection[str], limits: Limits = Limits(),
    *, deadline: float | None = None, limiter: trio.CapacityLimiter | None = None,
    on_cancelled: Callable[[Outcome], None] | None = None,
) -> Outcome:
    """Run the program. Never raises for anything the program does (every failure, including
    RecursionError/MemoryError-risking inputs, becomes Outcome.error with the output printed so
    far); trio.Cancelled and other BaseExceptions from call_tool propagate unchanged, and so does
    any exception of call_tool other than ToolCallFailed.

    ``deadline`` (trio's clock): the run stops there, in a tool call or between two checkpoints,
    with ``PTC_TIMEOUT`` and the output printed so far.

    The static check walks the whole tree in Python (about 0.2 s of CPU for 32,000 statements
    within ``max_code_bytes``): it runs in a worker thread taken through ``limiter``
    (default: trio's), so other tasks go on meanwhile. The parse stays here: ``ast.parse`` is
    one C call that holds the GIL throughout, so a thread would stall this one all the same
    (and it sets the process's warning filters aside while it runs).

    ``on_cancelled``: given the outcome so far (what was printed, the calls made; no error) when
    the run is cancelled from outside (an abort), before the cancellation goes on."""
    machine = _Machine(call_tool, tool_names, limits)
    error: ProgramError | None = None
    foreign: BaseException | None = None
    try:
        tree = _parse(code, limits)
        # (not abandoned on cancel: a cancelled run waits for the check, which ends on its own)
        await trio.to_thread.run_sync(_static_check, tree, tool_names, limits, limiter=limiter)
        with trio.move_on_at(float("inf") if deadline is None else deadline) as scope:
            await machine.run(tree)
        if scope.cancelled_caught:
            raise ProgramError("PTC_TIMEOUT", f"the program ran past its time limit after {machine.calls} "
                               f"tool call(s) and {machine.steps} steps")
    except trio.Cancelled:
        if on_cancelled is not None:
            on_cancelled(Outcome(output="".join(machine.out), truncated=machine.truncated,
                                 calls=machine.calls, steps=machine.steps, error=None))
        raise
    except ProgramError as exc:
        error = exc
    except _Thrown as exc:
        error = exc.to_program_error()
    except _Foreign as carried:
        foreign = carried.exc
    except RecursionError:
        error = ProgramError("PTC_TOO_DEEP", "evaluation nested too deeply")
    except MemoryError:
        error = ProgramError("PTC_VALUE_TOO_LARGE", "the program ran out of memory")
    except Exception as exc:  # a bug of the interpreter: still the program's outcome, not the daemon's crash
        error = ProgramError("PTC_RUNTIME", f"internal error: {type(exc).__name__}: {exc}")
    if foreign is not None:
        raise foreign  # outside the except block: the caller's exception keeps its own context
    return Outcome(
        output="".join(machine.out),
        truncated=machine.truncated,
        calls=machine.calls,
        steps=machine.steps,
        error=error,
    )
