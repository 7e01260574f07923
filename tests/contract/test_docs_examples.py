"""The user-facing docs beside the README (docs/storage-format.md, docs/executor.md,
docs/providers.md, docs/ptc.md, docs/errors.md) read as a user reads them, against the code and
the running daemon, executor and CLI: here what every page names (error codes, environment
variables, files of the repository); each page's own checks are in test_docs_<page>.py.

What a page shows is taken from its own text wherever that is robust (the tables and columns of
the storage format, the format marker, the refusals it quotes, the command lines and flags, the
keys `decode` prints, the codes `verify` reports, the limits and defaults it states), so that a
page and a code that drift apart fail here. The live checks run the real daemon on a loopback
port 0 (built-in defaults, the ``faux`` model, a real executor child), the real ``lens`` CLI and
a real ``lens executor serve`` process.
"""

from __future__ import annotations

import re

from tests.contract.error_codes import ROOT, documented_codes
from .docs_pages import PAGES, CODE_PATTERN


def _environment_names(text: str) -> set[str]:
    """The environment variables a page names (upper-case names in backquotes that are no code)."""
    return set(re.findall(r"`\$?((?:OPENAI|ANTHROPIC|LENS|EXA|XDG|HTTPS?|NO)_[A-Z_]+)\b(?!\()", text)) - {"HTTP_ERROR"}


def test_every_error_code_a_page_names_is_documented():
    documented = set(documented_codes())
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "runtime").rglob("*.py")) + "\n".join(
        p.read_text(encoding="utf-8") for pkg in ("tools", "events", "projections") for p in (ROOT / pkg).rglob("*.py"))
    for name, text in PAGES.items():
        if name == "errors.md":  # (its table is the documented list; it also names retired codes)
            continue
        named = set(re.findall(rf"`(?:lens(?: [a-z]+)*: )?({CODE_PATTERN})`", text)) - _environment_names(text)
        # (names the code itself has: a constant, grpc's status names, the credential variables
        # it knows; a code the code does not spell anywhere and errors.md lacks is a page's slip)
        unknown = sorted(c for c in named if c not in documented and not re.search(rf"\b{c}\b", source))
        assert not unknown, (name, unknown)


def test_every_environment_variable_a_page_names_is_one_lens_reads():
    """A variable the pages tell a user to set (or say Lens reads or drops) is named in the code."""
    source = "\n".join(p.read_text(encoding="utf-8") for pkg in ("runtime", "tools", "events", "projections", "tests")
                       for p in (ROOT / pkg).rglob("*.py"))  # (tests: the SDKs' own variables Lens drops)
    named = set().union(*(_environment_names(t) for t in PAGES.values())) - {"LENS_ERROR"}  # (a base class's code)
    assert {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "LENS_EXECUTOR_TOKEN", "XDG_STATE_HOME"} <= named, named
    # (the HTTP client's proxy variables are httpx's, which the page says still apply)
    missing = sorted(v for v in named - {"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"} if v not in source)
    assert not missing, missing


def test_every_file_of_the_repository_a_page_names_exists():
    """A page pointing at ``runtime/executors.py`` or ``tests/executor/`` points at something."""
    missing = []
    for name, text in PAGES.items():
        for path in set(re.findall(r"`((?:runtime|tools|events|projections|proto|config|tests|bench|docs)/[\w./-]*)`", text)):
            if not (ROOT / path).exists() and path not in {"config/lens.jsonc", "config/pair.json"}:  # (local, git-ignored)
                missing.append((name, path))
    assert not missing, missing
