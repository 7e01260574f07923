"""The execution plane's policy maps (F-TOOL-2): a map's check as it is given (config
``tools.policy``, a session's ``toolPolicy``), its stored form, and the workspace allowlist and
JSON equality its fields are applied with (:meth:`tools.catalog.ToolCatalog.policy_refusal`).

Nothing here does I/O or reads a clock."""

from __future__ import annotations

import posixpath
import re
from typing import Any, Mapping, Sequence

import msgspec

from runtime.errors import short_reason  # (imports nothing: no cycle)

from .base import _unrecordable
from .catalog_config import ToolPolicy

# Arguments the workspace allowlist applies to (workspace-relative paths of the file tools and
# run_command's working directory).
PATH_ARGUMENTS = ("path", "cwd")
POLICY_FIELDS = ("enabled", "approval", "workspaceAllowlist", "paramRestrictions")
POLICY_DEFAULTS: dict[str, Any] = {"enabled": True, "approval": "none", "workspaceAllowlist": None,
                                   "paramRestrictions": {}}
MAX_POLICY_ENTRIES = 1000  # tool names or patterns in one policy map (config or session)


class PolicyError(ValueError):
    """A policy map that cannot be used; the message names the key."""


def check_policy_map(policy: Mapping[str, ToolPolicy], where: str) -> None:
    """Raise :class:`PolicyError` for a policy map that cannot be applied as written."""
    if len(policy) > MAX_POLICY_ENTRIES:
        raise PolicyError(f"{where} has more than {MAX_POLICY_ENTRIES} entries")
    for name, p in policy.items():
        if not name or len(name) > 256:
            raise PolicyError(f"{where}: a tool name or pattern must be 1 to 256 characters")
        if p.workspace_allowlist is not None:
            for prefix in p.workspace_allowlist:
                if not isinstance(prefix, str) or _normal(prefix) is None:
                    raise PolicyError(f"{where}.{name}.workspaceAllowlist: {str(prefix)[:100]!r} must be a "
                                      f"workspace-relative path without '..' ('.' for the whole workspace)")
        for arg, r in (p.param_restrictions or {}).items():
            if r.min is not None and r.max is not None and r.min > r.max:
                raise PolicyError(f"{where}.{name}.paramRestrictions.{arg}: min is greater than max")
            if r.min is None and r.max is None and r.enum is None:
                raise PolicyError(f"{where}.{name}.paramRestrictions.{arg}: give min, max or enum")
            for bound in (r.min, r.max):
                if bound is not None and bound != bound:
                    raise PolicyError(f"{where}.{name}.paramRestrictions.{arg}: a bound is not a number")
            # (a session's map is recorded in the log: an integer past 64 bits failed the append
            # and crashed the session's actor, three times and it was quarantined)
            problem = _unrecordable(r.enum) if r.enum is not None else None
            if problem is not None:
                raise PolicyError(f"{where}.{name}.paramRestrictions.{arg}.enum: the values {problem}")


def parse_policy_map(data: Any, where: str) -> dict[str, ToolPolicy]:
    """A policy map from JSON (camelCase keys), checked; :class:`PolicyError` names the problem."""
    try:
        policy = msgspec.convert(data, dict[str, ToolPolicy])
    except msgspec.ValidationError as exc:
        raise PolicyError(f"{where}: {short_reason(exc)}") from None
    check_policy_map(policy, where)
    return policy


def stored_policy_map(saved: Mapping[str, Any]) -> dict[str, ToolPolicy]:
    """A saved map (``session.configured`` settings, as folded) for use: its entries were checked
    when saved. One that no longer converts is left out alone; the others still apply (dropping
    the whole map would drop the restrictions it holds too)."""
    out: dict[str, ToolPolicy] = {}
    for name, entry in saved.items():
        try:
            out[name] = msgspec.convert(entry, ToolPolicy)
        except msgspec.ValidationError:
            continue
    return out


def policy_json(policy: Mapping[str, ToolPolicy]) -> dict[str, Any]:
    """A policy map as stored in ``session.configured`` settings (unset fields left out)."""
    return {name: msgspec.to_builtins(p) for name, p in policy.items()}


def _normal(path: str) -> str | None:
    """A workspace-relative path normalised (``.`` for the root), or None when it is absolute or
    leaves the workspace (``..``). Read as the executor reads it: ``/`` is the only separator (a
    backslash is part of a name there, so ``a\\..\\src\\f`` is one file at the root, never
    ``src/f``)."""
    if not path or "\0" in path or path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return None if path else "."
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../"):
        return None
    return norm


def within_allowlist(path: str, prefixes: Sequence[str]) -> bool:
    """Whether workspace-relative ``path`` lies under one of the allowlist's ``prefixes``."""
    return _within(path, prefixes)


def _within(path: str, prefixes: Sequence[str]) -> bool:
    norm = _normal(path)
    if norm is None:
        return False
    for prefix in prefixes:
        p = _normal(prefix)
        if p is not None and (p == "." or norm == p or norm.startswith(p + "/")):
            return True
    return False


def same_json(a: Any, b: Any) -> bool:
    """JSON equality (as JSON Schema's ``enum`` compares): ``true`` is not ``1``, ``1`` is ``1.0``.
    Python's ``==`` takes ``True == 1`` and ``False == 0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b
