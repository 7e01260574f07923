"""What the docs-page tests share: the pages' text, reading a page's sentences and tables, reading a
database a daemon made, and a stopped daemon's data directory holding one answered input (``made``)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import apsw
import pytest

from tests.contract.error_codes import ROOT
from tests.daemon.conftest import Daemon, lens_command, stop_daemon

DOCS = ROOT / "docs"
STORAGE = (DOCS / "storage-format.md").read_text(encoding="utf-8")
EXECUTOR = (DOCS / "executor.md").read_text(encoding="utf-8")
PROVIDERS = (DOCS / "providers.md").read_text(encoding="utf-8")
PTC = (DOCS / "ptc.md").read_text(encoding="utf-8")
ERRORS = (DOCS / "errors.md").read_text(encoding="utf-8")
# Every user-facing page but the decision record and the performance notes.
PAGES = {p.name: p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md"))
         if p.name not in {"decisions.md", "performance.md"}}

CODE_PATTERN = r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+"


def one_match(pattern: str, text: str, flags: int = 0) -> re.Match[str]:
    """The single place ``pattern`` matches ``text`` (a sentence rewritten fails here, to be
    pointed again at the new words)."""
    found = list(re.finditer(pattern, text, flags))
    assert len(found) == 1, (pattern, [m.group(0) for m in found])
    return found[0]


def section_of(text: str, heading: str) -> str:
    """The body of the section whose heading line is ``heading`` (up to the next heading of the
    same or a higher level)."""
    level = heading.split(" ", 1)[0]
    body = text.split("\n" + heading + "\n", 1)[1]
    return re.split(rf"\n#{{1,{len(level)}}} ", body, maxsplit=1)[0]


def columns_of(db: Path, table: str) -> list[tuple[str, str, int, str | None, int]]:
    """``PRAGMA table_info``: (name, type, notnull, default, pk) of each column, in order."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [(r[1], r[2], r[3], r[4], r[5]) for r in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def query_db(db: Path, sql: str) -> list[tuple]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


@pytest.fixture
async def made(daemon: Daemon, strong: str) -> Daemon:
    """A stopped daemon's data directory holding a project, a session and one answered input."""
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    await daemon.submit(strong, sid, "r1", "hello")
    await daemon.wait_idle(strong, sid)
    await stop_daemon(daemon)
    return daemon


def lens_help(words: list[str]) -> str:
    out = subprocess.run([*lens_command(), *words, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, (words, out.stderr)
    return out.stdout


def shell_lines(text: str, inline: str) -> list[str]:
    """The lines of the page's ``sh`` code blocks (their comments cut), then each inline code span
    the pattern ``inline`` captures."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines += [ln.split("#")[0] for ln in block.splitlines()]
    return lines + re.findall(inline, text)


def shown_command_lines(text: str, command: str) -> list[list[str]]:
    """Every ``lens COMMAND …`` line of the page's code blocks and inline code: its words, then
    the flags it shows."""
    out = []
    for line in shell_lines(text, r"`(lens [^`]*)`"):
        for part in re.split(r"&&|\|(?![^\[]*\])", line):  # (not the `|` of `[--data DIR | --config PATH]`)
            m = re.match(rf"\s*(?:\.\.\.|lens) ({command}(?: [a-z]+)*)(.*)$", part.strip())
            if m and ": " not in part:
                out.append([*m.group(1).split(), *re.findall(r"(?<![\w-])--[a-z][a-z-]*", m.group(2))])
    return out


def assert_taken(commands: list[list[str]]) -> None:
    for argv in commands:
        words = [w for w in argv if not w.startswith("--")]
        text = lens_help(words)
        assert text.startswith(f"usage: lens {' '.join(words)} "), (argv, text)
        options = text.split("options:", 1)[1]
        for flag in (w for w in argv if w.startswith("--")):
            assert re.search(rf"^  (?:-\w, )?{re.escape(flag)}\b", options, re.M), (argv, flag, text)
