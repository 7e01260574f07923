"""The error codes Lens can produce, collected from its source, and the documented list.

Codes are found where the typed errors carry them, not in a hand list:

* the ``code`` class attribute of an error class (``code: ClassVar[str] = "…"``);
* the code given to an error or error result built with one: an argument in the place of a
  parameter named ``code``, ``error_code`` or ``kind`` of any class or function (``ToolError``,
  ``FileToolError``, ``ApiError``, ``ProviderError``, ``ToolResult.error``, ``error_response``,
  a program's ``ErrorValue``…), the first argument of ``super().__init__(…)`` in their
  subclasses, and each branch of a conditional there;
* a ``code=`` or ``error_code=`` keyword anywhere (the ``model.failed`` and ``tool.finished``
  bodies);
* a text written as ``CODE: message`` (a string or the first part of an f-string): what ``lens``
  prints on stderr (``lens: CODE: …``), a ``lens log verify`` finding, a gRPC status's details;
* the tables that name codes: a module-level mapping called ``*STATUS``, ``*CODES`` or
  ``_FROM_*`` / ``_RENAMED`` (HTTP statuses, hypercorn's own answers, renamed executor codes),
  (of a renaming table, its values: its keys are what a peer built before the rename sends),
  and a function annotated as returning a code (``-> Code`` or ``-> tuple[Code, …]``).

The documented list is the table of ``docs/errors.md``: each row's first cell is a code.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runtime", "tools", "events", "projections")
CODE = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$")
DOC = ROOT / "docs" / "errors.md"
_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]*)` \|", re.M)
_TABLE = re.compile(r"(STATUS|CODES)$|^_FROM_|^_RENAMED$")
# A text written as ``CODE: message`` (``lens: CODE: …`` on stderr, a verify finding, a gRPC
# status's details, a tool result's text): the code it starts with.
# (Without the ``lens…:`` in front, only a word with ``_`` is taken: "URL: …" is no code.)
_PREFIXED = re.compile(r"^(?:(?:lens(?: [a-z]+)*|\{self\.prog\}): ([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*)"
                       r"|([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)): ")


def source_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "_pb2" not in p.name)


def _codes_in(node: ast.AST) -> set[str]:
    """Code literals of an expression: a string, or the branches of a conditional."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and CODE.match(node.value):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _codes_in(node.body) | _codes_in(node.orelse)
    if isinstance(node, ast.BoolOp):
        return set().union(*(_codes_in(v) for v in node.values))
    return set()


CODE_PARAMS = ("code", "error_code", "kind")  # (an event's kind is dotted lower case: never a code)


def _code_params(args: ast.arguments) -> set[tuple[int, str]]:
    """(position, name) of a callable's parameters that take a code (``self`` not counted)."""
    names = [a.arg for a in args.posonlyargs + args.args]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return {(i, n) for i, n in enumerate(names) if n in CODE_PARAMS}


def _returns_code(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    ann = ast.unparse(fn.returns) if fn.returns is not None else ""
    return ann == "Code" or ann.startswith("tuple[Code")


def produced_codes() -> dict[str, list[str]]:
    """Every code the source can produce -> where (``path:line``)."""
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in source_files()}
    takers: dict[str, set[tuple[int, str]]] = {}  # callable name -> its code parameters
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                        takers.setdefault(node.name, set()).update(_code_params(item.args))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "__init__":
                takers.setdefault(node.name, set()).update(_code_params(node.args))
    found: dict[str, list[str]] = {}

    def add(codes: set[str], path: Path, node: ast.AST) -> None:
        for c in codes:
            found.setdefault(c, []).append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}")

    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    target = item.targets[0] if isinstance(item, ast.Assign) and len(item.targets) == 1 else (
                        item.target if isinstance(item, ast.AnnAssign) else None)
                    if isinstance(target, ast.Name) and target.id == "code" and item.value is not None:
                        add(_codes_in(item.value), path, item)
            elif isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                head = node.values[0] if isinstance(node, ast.JoinedStr) and node.values else node
                text = ast.unparse(node)[2:] if isinstance(node, ast.JoinedStr) else head.value
                if isinstance(text, str):
                    m = _PREFIXED.match(text)
                    if m:
                        add({m.group(1) or m.group(2)}, path, node)
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                is_super_init = (isinstance(f, ast.Attribute) and f.attr == "__init__"
                                 and isinstance(f.value, ast.Call) and getattr(f.value.func, "id", "") == "super")
                params = takers.get(name or "", set()) | ({(0, "code")} if is_super_init else set())
                for i, _ in params:
                    if i < len(node.args):
                        add(_codes_in(node.args[i]), path, node)
                for kw in node.keywords:
                    if kw.arg in ("code", "error_code") or kw.arg in {n for _, n in params}:
                        add(_codes_in(kw.value), path, node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t_, ast.Name) and _TABLE.search(t_.id) for t_ in targets) and isinstance(node.value, ast.Dict):
                    renames = any(isinstance(t_, ast.Name) and t_.id.startswith(("_FROM_", "_RENAMED"))
                                  for t_ in targets)
                    for k, v in zip(node.value.keys, node.value.values):
                        if k is not None and not renames:  # (a renaming table's keys are what a peer sends)
                            add(_codes_in(k), path, node)
                        add(_codes_in(v), path, node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _returns_code(node):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Return) and sub.value is not None:
                        value = sub.value.elts[0] if isinstance(sub.value, ast.Tuple) else sub.value
                        add(_codes_in(value), path, sub)
    return found


def documented_rows() -> list[str]:
    """The code of each row of the table in docs/errors.md, in the table's order."""
    return _ROW.findall(DOC.read_text(encoding="utf-8"))


def documented_codes() -> dict[str, int]:
    """The codes of the table in docs/errors.md -> how many rows name each."""
    counts: dict[str, int] = {}
    for code in documented_rows():
        counts[code] = counts.get(code, 0) + 1
    return counts
