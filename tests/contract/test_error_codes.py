"""Every error code Lens can produce is documented in docs/errors.md, once, and every code
documented there is one Lens produces; the HTTP statuses the docs give are the API's.

The codes are gathered from the source's typed errors (tests/contract/error_codes.py says
where it looks), and from the error classes themselves once imported, so a code added without
its row fails here. Codes that were retired for another of the same meaning are produced nowhere.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re

import pytest
import trio

from runtime.http_parts import STATUS
from runtime.errors import LensError
from events.errors import LogError

from .error_codes import DOC, PACKAGES, ROOT, documented_codes, documented_rows, produced_codes, source_files

# Retired codes: each had a meaning another code already had (docs/errors.md names the one kept).
RETIRED = ("TOOL_ARGUMENTS_INVALID", "UNKNOWN_TOOL", "CANNOT_LISTEN", "PATH_INVALID", "LENS_ERROR", "LOG_ERROR",
           "PROVIDER_UNSUPPORTED", "INTERNAL_ERROR")
_STATUS_CELL = re.compile(r"^\| `([A-Z][A-Z0-9_]*)` \| ([0-9]{3}|–) \|", re.M)


def _error_classes() -> list[type[BaseException]]:
    """The exception classes Lens's packages define (every module imported)."""
    for pkg in PACKAGES:
        root = importlib.import_module(pkg)
        for mod in pkgutil.walk_packages(root.__path__, f"{pkg}."):
            if not mod.name.endswith("_pb2") and not mod.name.endswith("_pb2_grpc"):
                importlib.import_module(mod.name)
    seen: list[type[BaseException]] = []
    todo: list[type[BaseException]] = [BaseException]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.append(sub)
                todo.append(sub)
    return [c for c in seen if c.__module__.split(".")[0] in PACKAGES]


def test_every_code_the_source_produces_is_documented() -> None:
    documented = documented_codes()
    missing = {code: where[:3] for code, where in produced_codes().items() if code not in documented}
    assert not missing, f"codes without a row in {DOC.relative_to(ROOT)}: {missing}"


def test_every_documented_code_is_produced_and_has_one_row() -> None:
    produced = produced_codes()
    documented = documented_codes()
    assert len(documented) > 150  # (the table was read: a broken pattern would find none)
    assert not [c for c in documented if c not in produced], "documented codes nothing produces"
    assert not {c: n for c, n in documented.items() if n != 1}, "codes with more than one row"


def test_the_documented_codes_are_in_alphabetical_order() -> None:
    # (a reader finds a code by its place: SYSTEM_TIME_UNREPRESENTABLE came before SYMLINK_…)
    rows = documented_rows()
    assert not [(a, b) for a, b in zip(rows, rows[1:]) if a > b], f"rows out of order in {DOC.relative_to(ROOT)}"


def test_every_error_class_has_a_documented_code_of_its_own() -> None:
    documented = documented_codes()
    classes = _error_classes()
    assert LensError in classes and LogError in classes
    without, undocumented = [], []
    for cls in classes:
        code = cls.__dict__.get("code")
        if isinstance(code, str):
            if code not in documented:
                undocumented.append((cls.__qualname__, code))
        elif issubclass(cls, (LensError, LogError)) and cls not in (LensError, LogError):
            # No class attribute: the code must come in through the constructor, or from a base.
            takes_code = "code" in inspect.signature(cls.__init__).parameters
            inherited = any(isinstance(b.__dict__.get("code"), str) for b in cls.__mro__[1:])
            if not (takes_code or inherited):
                without.append(cls.__qualname__)
    assert not undocumented, undocumented
    assert not without, f"typed errors without a code: {without}"
    # The bases name no code: a bare LensError or LogError would leave with none documented.
    assert "code" not in LensError.__dict__ and "code" not in LogError.__dict__


def test_each_documented_http_status_is_the_apis() -> None:
    cells = dict(_STATUS_CELL.findall(DOC.read_text(encoding="utf-8")))
    assert len(cells) == len(documented_codes())
    wrong = {code: (cells.get(code), status) for code, status in STATUS.items() if cells.get(code) != str(status)}
    assert not wrong, f"docs status vs runtime.http_parts.STATUS: {wrong}"
    # a status in the docs for a code the table lacks is one the route gives itself
    assert {c for c, s in cells.items() if s != "–" and c not in STATUS} == {"RANGE_NOT_SATISFIABLE"}


def test_each_status_fits_its_code() -> None:
    # SPEC §9: 400 bad input, 401 no/invalid credential, 403 not allowed, 404, 409, 413, 422; a
    # retry can help: 503. A skill an input names that does not exist is the input's fault (the
    # route exists): 422, as a model no provider offers is.
    fits = {"_NOT_FOUND": {404}, "_FORBIDDEN": {403}, "_TOO_LARGE": {413, 431}, "_UNAVAILABLE": {503}}
    named_in_a_body = {"SKILL_NOT_FOUND"}
    wrong = [(code, status) for code, status in STATUS.items() for end, ok in fits.items()
             if code.endswith(end) and status not in ok and code not in named_in_a_body]
    wrong += [(code, status) for code, status in STATUS.items() if code.startswith("AUTH_") and status != 401]
    assert not wrong, wrong
    assert STATUS["SKILL_NOT_FOUND"] == 422 and STATUS["INVALID_ARGUMENT"] == 400


def test_retired_codes_are_produced_nowhere() -> None:
    produced = produced_codes()
    assert not [c for c in RETIRED if c in produced]
    # Nor written anywhere in the source but where Core reads an older executor's name for one.
    left = []
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in RETIRED:
                left.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value}")
    assert left == [f"runtime/executor_client.py:{_line_of('_RENAMED = ')} UNKNOWN_TOOL"], left


def _line_of(text: str) -> int:
    lines = (ROOT / "runtime" / "executor_client.py").read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.startswith(text))


async def test_a_job_started_while_the_sessions_jobs_do_not_run_is_jobs_unavailable() -> None:
    # It was a bare LensError: the model read LENS_ERROR, a code no page documented.
    from runtime.jobs import SessionJobs

    async def emit(_events: object) -> None:
        raise AssertionError("nothing is recorded")

    jobs = SessionJobs("ses_x", emit=emit, state=lambda: None, new_id=lambda p: f"{p}_1",  # type: ignore[arg-type]
                       wake=lambda: None)

    async def run(_write: object) -> None:
        raise AssertionError("the job never runs")

    with trio.fail_after(5), pytest.raises(LensError) as info:
        await jobs.start("true", run, call_id=None)
    assert info.value.code == "JOBS_UNAVAILABLE" and "background jobs" in info.value.message
