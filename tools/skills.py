"""``skill`` (F-TOOL-6): workspace skills, listed with their load state and loaded on demand.

A skill is a directory ``<root>/<dir>/`` holding a ``SKILL.md``, under one of the roots
:data:`SKILL_ROOTS` of the workspace. ``SKILL.md`` may open with front matter (``---`` lines
around ``key: value`` lines, :func:`parse_front_matter`); ``name`` (default: the directory's
name) and ``description`` are read from it, the rest is the skill's instructions.

Discovery reads through the project's executor with ``read_file`` and ``follow_symlinks: false``
(a skill's resource samples with ``browse_list``, which tells each entry's kind):
a symlinked root, skill directory or ``SKILL.md`` is never followed (a symlinked directory is
listed by the executor without ``/`` and so is not a skill directory; a symlinked ``SKILL.md``
is listed with a problem). A skill that cannot be used (bad front matter, bad name, too large,
not UTF-8, instructions larger than one event of the log, a directory name the executor cannot
show as it is, a name taken by an earlier root) is listed with its ``problem`` and cannot be
loaded; discovery itself never fails on one skill's content.

``skill({})`` lists; ``skill({"name"})`` loads: the result confirms, names the resource base dir
and at most :data:`MAX_SAMPLES` resource files, and carries a ``skill.loaded`` event (the
snapshot: instructions, base dir, SHA-256 of ``SKILL.md``) that the session actor records after
the tool-result batch. A skill already loaded for the agent is not appended again.
``skill({"name", "unload": true})`` carries ``skill.unloaded``. See docs/decisions.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Mapping

from events import types as t
from events.errors import AppendRejected
from events.secrets import Secrets
from projections.session_state import HeldSkill
from runtime.errors import shortened_json, shortened_names  # (imports nothing: no cycle)
from runtime.jsonc import LINE_BREAK  # (YAML's line ends are JSON's; it imports no Lens module)

from .base import ToolContext, ToolError, ToolResult, ToolSpec
from .rerun import Respawning, executor_failures, once_more_if_died

SKILL_ROOTS = ("skills", ".agents/skills", ".codex/skills")  # in precedence order
SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 256 * 1024  # SKILL.md, front matter included
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_SKILLS = 200  # skill directories looked at per discovery (all roots)
MAX_LISTING_ENTRIES = 5000  # entries read from one directory listing
MAX_SAMPLES = 10
MAX_SAMPLE_DEPTH = 3
# The call id a load's size check allows for (bytes): a tool call's ``skill.loaded`` carries its
# call id. The runtime records at most 128 characters of the id rule's ASCII as given (a longer id
# under a 29-character digest id: runtime.actor.recordable_call_id) and adds at most a "-<n>" to
# one made twice, so a skill listed loadable is never refused on load for its size.
CALL_ID_ROOM = 256
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # whole names only: fullmatch

log = logging.getLogger("lens.skills")
_NO_SECRETS = Secrets()

# an executor read tool's arguments (read_file, browse_list) -> its result dict; raises ToolError
# with the executor's code.
Read = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


# --------------------------------------------------------------------------- front matter


class FrontMatterError(ValueError):
    """Front matter that cannot be read; the message names the line."""


_KEY_RE = re.compile(r"([A-Za-z0-9_](?:[A-Za-z0-9_. -]*[A-Za-z0-9_.-])?)[ \t]*:(?:[ \t]+(.*)|[ \t]*)$")
_BLOCK_MARKS = ("|", "|-", "|+", ">", ">-", ">+")


def parse_front_matter(text: str, secrets: Secrets | None = None) -> tuple[dict[str, str], str]:
    """``(fields, body)`` of a SKILL.md text; no front matter gives ``({}, text)``.

    Lines end at ``\r\n``, ``\r`` or ``\n``, as YAML's do (the body keeps its own). The front
    matter starts at the first line when it is ``---`` (trailing blanks allowed, as YAML does)
    and ends at the next line that is ``---`` (or ``...``). Inside: ``key: value``
    lines (a key may hold blanks: ``allowed tools``); blank lines and ``#`` lines are skipped; a value may be double-quoted (JSON escapes), single-quoted (``''`` for a quote)
    or plain (a `` #`` comment after it is dropped; indented lines after it continue it, joined
    by spaces); ``|`` / ``>`` start a block of indented lines (kept / folded); an empty value
    followed by indented lines (a nested map or list), or by ``- item`` lines at the key's own
    indentation (a YAML block sequence), is kept as that raw text. A plain YAML
    subset, stdlib only. Raises :class:`FrontMatterError` naming the line (a line it quotes is
    cut to a limit after ``secrets``, the daemon's keys, are replaced in it: ``Secrets.cut``).
    """
    secrets = secrets or _NO_SECRETS
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = LINE_BREAK.split(text)  # (as YAML reads them; the body keeps its own line ends)
    if lines[0].rstrip() != "---":
        return {}, text
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip("\r").rstrip() in ("---", "...")), None)
    if end is None:
        raise FrontMatterError("the front matter opened by '---' on line 1 is never closed by a '---' line")
    fields: dict[str, str] = {}
    key: str | None = None
    mode = ""  # "plain" (continuation lines), "block|", "block>", "nested", "" (no continuation)
    block: list[str] = []

    def finish() -> None:
        if key is None or mode not in ("block|", "block>", "nested"):
            return
        if mode == "block>":
            fields[key] = " ".join(x.strip() for x in block if x.strip())
        else:
            indent = min((len(x) - len(x.lstrip()) for x in block if x.strip()), default=0)
            fields[key] = "\n".join(x[indent:] for x in block).strip("\n")

    for n in range(1, end):
        line = lines[n].rstrip("\r")
        number = n + 1
        if not line.strip():
            if mode.startswith("block"):
                block.append("")
            continue
        if line[0] in " \t":
            if key is None:
                raise FrontMatterError(f"line {number}: an indented line before any key")
            if mode in ("block|", "block>", "nested"):
                block.append(line)
            elif mode == "plain":
                fields[key] = f"{fields[key]} {line.strip()}".strip()
            else:
                raise FrontMatterError(f"line {number}: an indented line after a quoted value")
            continue
        if mode == "nested" and (line == "-" or line.startswith(("- ", "-\t"))):
            block.append(line)  # a sequence item at the key's own indentation continues the key
            continue
        if line.lstrip().startswith("#"):
            continue
        finish()
        m = _KEY_RE.fullmatch(line)
        if m is None:
            raise FrontMatterError(f"line {number}: expected 'key: value', got {secrets.cut(line, 60)!r}")
        key, raw = m.group(1), (m.group(2) or "").strip()
        if key in fields:
            raise FrontMatterError(f"line {number}: the key {key!r} appears twice")
        block = []
        if not raw:
            mode, fields[key] = "nested", ""
        elif raw in _BLOCK_MARKS:
            mode, fields[key] = ("block|" if raw[0] == "|" else "block>"), ""
        elif raw[0] == '"':
            mode = ""
            try:
                value = json.loads(raw)
            except ValueError:
                value = None
            if not isinstance(value, str):
                raise FrontMatterError(f"line {number}: the double-quoted value of {key!r} is not closed "
                                       "or has a bad escape")
            fields[key] = value
        elif raw[0] == "'":
            mode = ""
            inner = raw[1:-1] if len(raw) >= 2 and raw.endswith("'") else None
            if inner is None or "'" in inner.replace("''", ""):
                raise FrontMatterError(f"line {number}: the single-quoted value of {key!r} is not closed")
            fields[key] = inner.replace("''", "'")
        else:
            mode = "plain"
            fields[key] = re.split(r"[ \t]#", raw, maxsplit=1)[0].rstrip()
    finish()
    starts = [0, *(m.end() for m in LINE_BREAK.finditer(text))]  # (where each of ``lines`` starts)
    body = text[starts[end + 1]:] if end + 1 < len(starts) else ""
    return fields, body


# --------------------------------------------------------------------------- discovery


@dataclass(frozen=True)
class Skill:
    """One discovered skill. ``problem`` set: listed, never loaded."""

    name: str
    base_dir: str  # workspace-relative: "skills/review"
    description: str = ""
    problem: str | None = None
    body: str = ""
    digest: str = ""  # SHA-256 hex of SKILL.md's bytes
    declared: str = ""  # the name its front matter gives, when longer than the listed one (cut)


async def _listing(read: Read, path: str) -> list[str]:
    """The entries of a workspace directory (dirs end with "/"), every page of them."""
    entries: list[str] = []
    args: dict[str, Any] = {"path": path, "follow_symlinks": False}
    while True:
        page = await read(args)
        if page.get("kind") != "directory":
            raise ToolError("NOT_A_DIRECTORY", f"{path}: not a directory")
        entries.extend(page.get("entries", []))
        if page.get("eof", True) or len(entries) >= MAX_LISTING_ENTRIES:
            return entries[:MAX_LISTING_ENTRIES]
        args = {"path": path, "follow_symlinks": False, "offset": page["next_offset"]}


async def _skill_text(read: Read, path: str, secrets: Secrets) -> tuple[str | None, str | None]:
    """(SKILL.md text, None) or (None, problem); (None, None) when there is no SKILL.md. A
    problem quoting the executor's message cuts it after ``secrets`` are replaced in it."""
    args: dict[str, Any] = {"path": path, "follow_symlinks": False}
    parts: list[str] = []
    try:
        while True:
            page = await read(args)
            if page.get("kind") != "file":
                return None, f"{SKILL_FILE} is a directory, not a file"
            size = page.get("size", 0)
            if size > MAX_SKILL_BYTES:
                return None, f"{SKILL_FILE} is {size} bytes; a skill's {SKILL_FILE} may have at most {MAX_SKILL_BYTES}"
            parts.append(page.get("content", ""))
            if page.get("eof", True):
                break
            args = {"path": path, "follow_symlinks": False, "offset": page["next_offset"]}
    except ToolError as exc:
        if exc.code == "NOT_FOUND":
            return None, None
        if exc.code == "SYMLINK_NOT_FOLLOWED":
            return None, f"{SKILL_FILE} is a symbolic link; symlinks are not followed"
        if exc.code == "NOT_UTF8":
            return None, f"{SKILL_FILE} is not valid UTF-8"
        if exc.code == "NOT_A_FILE":
            return None, f"{SKILL_FILE} is not a regular file"
        if exc.code.startswith("EXECUTOR_") or exc.code in ("NO_WORKSPACE", "CANCELLED"):
            raise  # the executor failed, not this skill
        return None, f"{SKILL_FILE} cannot be read ({exc.code}: {secrets.cut(exc.message, 200)})"
    text = "".join(parts)
    if len(text.encode("utf-8")) > MAX_SKILL_BYTES:  # (grew while it was read)
        return None, f"{SKILL_FILE} is larger than {MAX_SKILL_BYTES} bytes"
    return text, None


def _skill_of(base_dir: str, dir_name: str, text: str, secrets: Secrets = _NO_SECRETS) -> Skill:
    """The skill a SKILL.md's ``text`` describes. What it quotes of that text cut to a limit (a bad
    line, a bad name, the description) is cut after ``secrets`` are replaced in it: a 4xx answer quoting a skill's
    problem (a ``/skill:`` input's) is scrubbed of whole keys only, so a key cut first would show
    its first characters."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    try:
        fields, body = parse_front_matter(text, secrets)
    except FrontMatterError as exc:
        return Skill(dir_name, base_dir, problem=f"{SKILL_FILE} front matter: {exc}", digest=digest)
    name = fields.get("name", "").strip() or dir_name
    description = " ".join(fields.get("description", "").split())
    if len(description) > MAX_DESCRIPTION_CHARS:  # (keys replaced whole first: the listing and the system prompt show it)
        description = secrets.scrub_text(description)
        if len(description) > MAX_DESCRIPTION_CHARS:
            description = description[:MAX_DESCRIPTION_CHARS - 1] + "…"
    problem = None
    declared = ""
    if len(name) > MAX_NAME_CHARS or not NAME_RE.fullmatch(name):
        problem = (f"the skill name {secrets.cut(name, 80)!r} is not valid: 1 to {MAX_NAME_CHARS} characters of ASCII letters, "
                   "digits, '.', '_' and '-', starting with a letter or digit")
        name, declared = secrets.cut(name, MAX_NAME_CHARS), (name if len(name) > MAX_NAME_CHARS else "")
    elif not body.strip():
        problem = f"{SKILL_FILE} holds no instructions after its front matter"
    return Skill(name, base_dir, description, problem, body.strip("\r\n"), digest, declared)


@dataclass(frozen=True)
class Discovery:
    """The skills found, and how many directories of the roots were past :data:`MAX_SKILLS` and
    so not looked at (a skill among them is neither listed nor loadable)."""

    skills: list[Skill]
    unread_dirs: int = 0

    def unread_note(self) -> str:
        """What a listing or a failed load says of the directories not looked at ("" if none)."""
        if not self.unread_dirs:
            return ""
        return (f"{self.unread_dirs} more skill director{'y was' if self.unread_dirs == 1 else 'ies were'} "
                f"not looked at: at most {MAX_SKILLS} are, per discovery, in root and name order")


async def discover(read: Read, *, browse: Read | None = None,
                   recordable: Callable[[t._Event], object] | None = None,
                   sizes: SkillSizes | None = None, secrets: Secrets | None = None) -> Discovery:
    """Every skill of the workspace, roots in :data:`SKILL_ROOTS` order, directories sorted.

    A name found again in a later directory is listed with a problem (the first one that can be
    loaded wins; a skill with a problem of its own claims no name, so it never shadows a good one).
    Directories past the first :data:`MAX_SKILLS` are counted, not read.

    ``recordable`` (the log codec's ``pack_checked``): a skill whose ``skill.loaded`` it refuses
    (:func:`too_large_for_the_log`; a verdict ``sizes`` holds is not asked again) is listed with
    that problem. A skill directory whose name the
    executor cannot show as it is (a newline, bytes that are not UTF-8: :func:`_unshowable_dir`,
    which looks with ``browse``, the executor's ``browse_list``) is listed with a problem naming it.
    ``secrets`` (the daemon's keys) are replaced in what a problem quotes of a SKILL.md before
    it is cut (:func:`_skill_of`).
    Raises ToolError only when the executor itself fails (not for a missing root or a bad skill).
    """
    secrets = secrets or _NO_SECRETS
    found: list[Skill] = []
    seen: dict[str, str] = {}
    looked = unread = 0
    for root in SKILL_ROOTS:
        try:
            entries = await _listing(read, root)
        except ToolError as exc:
            if exc.code in ("NOT_FOUND", "NOT_A_DIRECTORY", "SYMLINK_NOT_FOLLOWED", "PERMISSION_DENIED"):
                continue  # no such root (or a file, or a link: not followed, or unreadable)
            raise
        holding: dict[str, str] | None = None  # (the root's directories holding a SKILL.md, when one is asked)
        cut = False  # (whether that listing is cut, or could not be had)
        for entry in entries:
            if not entry.endswith("/"):
                continue  # a file, or a symlink (listed without "/"): not a skill directory
            if looked >= MAX_SKILLS:
                unread += 1  # (it used to be dropped unsaid: "no skill named …" for a skill it held)
                continue
            looked += 1
            dir_name = entry[:-1]
            base = f"{root}/{dir_name}"
            text, problem = await _skill_text(read, f"{base}/{SKILL_FILE}", secrets)
            if text is None and problem is None:
                if not _maybe_shown_otherwise(dir_name) or await _exists(read, base):
                    continue  # a directory without SKILL.md is not a skill
                if holding is None:
                    holding, cut = await _dirs_holding_skill_files(browse, root)
                if dir_name not in holding and not cut:
                    continue  # (its name cannot be shown, but it holds no SKILL.md: not a skill either)
                own = holding.get(dir_name, dir_name.replace("\\n", "\n"))
                found.append(Skill(dir_name, base, problem=f"its directory name cannot be used as a skill name: "
                                   f"{own!r} (it holds a newline or bytes that are not UTF-8, shown here as U+FFFD)"))
                continue
            skill = Skill(dir_name, base, problem=problem) if text is None else _skill_of(base, dir_name, text, secrets)
            if skill.problem is None and recordable is not None and (why := (
                    too_large_for_the_log(recordable, skill, secrets) if sizes is None
                    else sizes.verdict(recordable, skill, secrets))):
                skill = Skill(skill.name, base, skill.description, why, digest=skill.digest)
            if skill.name in seen and skill.problem is None:
                # (only a skill that could be loaded but for the name is told it is taken: one with a
                # problem of its own, a name past 64 characters cut to a taken one too, keeps it)
                skill = Skill(skill.name, base, skill.description,
                              f"the name {skill.name!r} is taken by the skill in {seen[skill.name]}/",
                              declared=skill.declared)
            elif skill.problem is None:
                seen[skill.name] = base  # only a loadable skill claims its name; a broken one is listed with its problem
            found.append(skill)
    return Discovery(found, unread)


def _maybe_shown_otherwise(shown: str) -> bool:
    """Whether a name of ``read_file``'s listing may not be the entry's own name: the listing
    shows a newline in a name as the two characters ``\\n`` and bytes that are not UTF-8 as U+FFFD."""
    return "\\n" in shown or "\ufffd" in shown


async def _exists(read: Read, path: str) -> bool:
    """Whether ``path`` names an entry (a listed name that is not the entry's own names none)."""
    try:
        await read({"path": path, "follow_symlinks": False, "max_lines": 1})
    except ToolError as exc:
        if exc.code == "NOT_FOUND":
            return False
        if exc.code.startswith("EXECUTOR_") or exc.code in ("NO_WORKSPACE", "CANCELLED"):
            raise
    return True


async def _dirs_holding_skill_files(browse: Read | None, root: str) -> tuple[dict[str, str], bool]:
    """``root``'s directories holding an entry named SKILL.md, seen through ``browse_list`` (two
    levels: it reads a directory by its own name, so also one whose name cannot be written as a
    path): their names as ``read_file`` lists them, each to its name as ``browse_list`` shows it
    (a newline kept); and whether that is not all of them (no ``browse``, or the listing was cut
    first: a directory not seen is then taken to hold one)."""
    if browse is None:
        return {}, True
    try:
        page = await browse({"path": root, "depth": 2, "max_entries": MAX_LISTING_ENTRIES, "include_ignored": True})
    except ToolError as exc:
        if exc.code.startswith("EXECUTOR_") or exc.code in ("NO_WORKSPACE", "CANCELLED"):
            raise
        return {}, True
    out: dict[str, str] = {}
    prefix = f"{page.get('path', root)}/"
    for entry in page.get("entries", []):
        path = entry.get("path", "")
        if entry.get("name") == SKILL_FILE and path.startswith(prefix):
            parent = path[len(prefix):-len(SKILL_FILE) - 1]
            out[parent.replace("\n", "\\n")] = parent
    return out, bool(page.get("truncated"))


def too_large_for_the_log(recordable: Callable[[t._Event], object], skill: Skill,
                          secrets: Secrets | None = None) -> str | None:
    """Why the log could never hold the ``skill.loaded`` a load of ``skill`` records (None: it
    can). Checked with a call id of :data:`CALL_ID_ROOM` bytes, what a load from a tool call
    carries at most in practice (a ``/skill:`` input's carries none), so that a skill listed
    loadable is not refused on load for its size."""
    try:
        recordable(t.SkillLoaded(name=skill.name, instructions=instructions_text(skill),
                                 base_dir=skill.base_dir, digest=skill.digest, call_id="x" * CALL_ID_ROOM))
    except AppendRejected as exc:
        if exc.size is not None and exc.limit is not None:
            return (f"its instructions are too large for the event log (a load records {exc.size} bytes; "
                    f"the log holds events up to {exc.limit} bytes, log.maxEventBytes)")
        # (the store's message, cut after the daemon's keys are replaced in it: ``Secrets.cut``)
        return f"its instructions could not be recorded: {(secrets or _NO_SECRETS).cut(exc.message, 300)}"
    return None


MAX_SIZE_VERDICTS = 4096  # verdicts a SkillSizes holds (the oldest goes first): 20 projects of MAX_SKILLS


class SkillSizes:
    """The log's verdicts on the size of skills' ``skill.loaded`` (:func:`too_large_for_the_log`),
    each asked once: a discovery (a listing, a load, a system prompt) over unchanged skills
    encodes none of them again. A verdict is kept by what decides it: the log's codec
    (``recordable``), and the skill's ``SKILL.md`` (its digest), name and directory, which make up
    the event; an edited ``SKILL.md`` has another digest, and is asked again.

    One per daemon, shared by the ``skill`` tool and the system prompt's skills
    (:func:`skill_tool`, :func:`prompt_skills`); ``checks`` counts the verdicts asked."""

    def __init__(self, max_verdicts: int = MAX_SIZE_VERDICTS) -> None:
        self._verdicts: dict[tuple[object, str, str, str, object], str | None] = {}
        self._max = max_verdicts
        self.checks = 0

    def verdict(self, recordable: Callable[[t._Event], object], skill: Skill,
                secrets: Secrets | None = None) -> str | None:
        """:func:`too_large_for_the_log` of ``skill``, asked only when no verdict is held (its
        text made with ``secrets``, which are part of what the verdict is kept by)."""
        key = (recordable, skill.digest, skill.name, skill.base_dir, secrets)
        if key in self._verdicts:
            return self._verdicts[key]
        self.checks += 1
        why = self._verdicts[key] = too_large_for_the_log(recordable, skill, secrets)
        if len(self._verdicts) > self._max:
            del self._verdicts[next(iter(self._verdicts))]
        return why


async def resource_samples(browse: Read, base_dir: str) -> tuple[list[str], bool]:
    """Up to :data:`MAX_SAMPLES` regular files of the skill directory other than SKILL.md, as
    paths relative to it, in sorted (depth-first) order; and whether there are more. ``browse``
    is the executor's ``browse_list`` (it tells each entry's kind): symlinks are not followed, so
    a symlinked file or directory is neither a sample nor entered, nor is anything else that is
    not a regular file or a directory. A directory :data:`MAX_SAMPLE_DEPTH` levels down is not
    entered, nor are entries of a directory past :data:`MAX_LISTING_ENTRIES` read; they count as
    more (unseen, so perhaps none)."""
    out: list[str] = []
    unseen = False  # a directory past the depth limit, or a listing cut, was met

    async def walk(rel: str, depth: int) -> bool:
        nonlocal unseen
        try:
            page = await browse({"path": f"{base_dir}/{rel}".rstrip("/"), "depth": 1,
                                 "max_entries": MAX_LISTING_ENTRIES, "include_ignored": True})
        except ToolError as exc:
            if exc.code in ("NOT_FOUND", "NOT_A_DIRECTORY", "PATH_HIDDEN", "PERMISSION_DENIED"):
                return False
            raise
        unseen = unseen or bool(page.get("truncated"))
        for entry in page.get("entries", []):
            name, kind = entry.get("name", ""), entry.get("kind")
            path = f"{rel}{name}"
            if kind == "directory":
                if depth >= MAX_SAMPLE_DEPTH:
                    unseen = True
                elif await walk(f"{path}/", depth + 1):
                    return True
                continue
            if kind != "file" or path == SKILL_FILE:
                continue  # a symlink (not followed) or a FIFO, socket, device: not a resource
            if len(out) == MAX_SAMPLES:
                return True
            out.append(path)
        return False

    more = await walk("", 1)
    return out, more or unseen


def instructions_text(skill: Skill) -> str:
    """What the appended instruction message says (the snapshot recorded by skill.loaded)."""
    return (f"Skill \"{skill.name}\" loaded. Its resource files are under {skill.base_dir}/ "
            f"(paths in these instructions are relative to it).\n\n{skill.body}")


# --------------------------------------------------------------------------- the tool


def workspace_reader(pool: Respawning, project_id: str | None, call_id: str, *, wait: bool = True,
                     tool: str = "read_file") -> Read:
    """read_file (or another read-only executor tool: ``browse_list``) through the project's
    executor (under its read lock), errors as ToolError; a read whose local child died under it
    runs once more on the next (:func:`once_more_if_died`).
    ``wait=False``: ``DomainBusy`` (runtime.executors) instead of waiting while a write holds the lock."""

    async def read(args: dict[str, Any]) -> dict[str, Any]:
        if project_id is None:
            raise ToolError("NO_WORKSPACE", "this session belongs to no project, so it has no workspace skills")
        with executor_failures("EXECUTOR_UNAVAILABLE"):
            ex = await pool.get(project_id)

        async def attempt(ex: Any) -> Any:
            with executor_failures("EXECUTOR_ERROR"):
                return await ex.client.call(tool, args, call_id=call_id)

        async with ex.lock.read(wait=wait):
            reached = await once_more_if_died(pool, ex, attempt, f"skill read {call_id} ({args.get('path')!r})")
        return reached.out.result

    return read


def _loaded_at(skills: list[Skill], loaded: Mapping[str, HeldSkill]) -> dict[str, int]:
    """name -> the index of the listed skill a loaded skill of that name was loaded from: the one
    of that name whose ``base_dir`` is the load's (``skill.loaded``'s ``base_dir``), loadable or
    not; none when that directory is no longer listed under the name. A load whose directory is
    not known (a log of an older build) is taken to be of the loadable one, else the first listed."""
    out: dict[str, int] = {}
    for i, s in enumerate(skills):
        held = loaded.get(s.name)
        if held is None:
            continue
        if held.base_dir:
            if s.base_dir == held.base_dir:
                out[s.name] = i
        elif s.name not in out or (s.problem is None and skills[out[s.name]].problem is not None):
            out[s.name] = i
    return out


def _list_text(found: Discovery, loaded: Mapping[str, HeldSkill]) -> str:
    skills = found.skills
    if not skills and not loaded and not found.unread_dirs:
        return ("No skills in this workspace (a skill is a directory with a SKILL.md under "
                + ", ".join(f"{r}/" for r in SKILL_ROOTS) + ").")
    lines = []
    at = _loaded_at(skills, loaded)
    for i, s in enumerate(skills):
        mine = at.get(s.name) == i
        if s.problem:
            if mine:
                # (loaded before its SKILL.md broke, or before an earlier root's took the name: the
                # snapshot stands until it is unloaded)
                lines.append(f"- {s.name} [loaded; cannot be loaded again: {s.problem}] ({s.base_dir}/)")
            else:
                lines.append(f"- {s.name} [cannot be loaded: {s.problem}] ({s.base_dir}/)")
            continue
        state = "loaded" if mine else "not loaded"
        if mine and loaded[s.name].digest and loaded[s.name].digest != s.digest:
            state += f", {SKILL_FILE} changed since"
        lines.append(f"- {s.name} [{state}]{': ' + s.description if s.description else ''} ({s.base_dir}/)")
    gone = (f"not among the {MAX_SKILLS} skill directories looked at" if found.unread_dirs
            else "no longer in the workspace")
    for name in sorted(set(loaded) - set(at)):
        where = f" ({loaded[name].base_dir}/)" if loaded[name].base_dir else ""
        lines.append(f"- {name} [loaded; {gone}]{where}")
    if found.unread_dirs:
        lines.append(f"({found.unread_note()})")
    return "Skills (load one with skill {\"name\": ...}):\n" + "\n".join(lines)


def _held_unlisted(name: str, held: HeldSkill, mine: Skill | None, current: Skill | None,
                   discovery: Discovery) -> ToolResult:
    """A repeat load of ``name``, loaded from a directory that is listed with a problem now
    (``mine``) or not listed under that name at all; ``current`` is the skill a load of that name
    would take now, if any. Nothing is appended: the snapshot stands until an unload."""
    then = (f"once unloaded, loading {name!r} takes the skill in {current.base_dir}/." if current is not None
            else "once unloaded it cannot be loaded again until that is mended.")
    if mine is not None:
        assert mine.problem is not None
        return ToolResult.text(
            f"Skill \"{name}\" is already loaded; nothing was appended. Its {SKILL_FILE} "
            f"({mine.base_dir}/) cannot be loaded now: {mine.problem}. The instructions loaded before "
            f"stay in the context; {then}",
            {"name": name, "status": "already_loaded", "base_dir": mine.base_dir, "problem": mine.problem})
    if discovery.unread_dirs:
        where = f"not among the {MAX_SKILLS} skill directories looked at"
    elif held.base_dir and (other := next((s for s in discovery.skills if s.base_dir == held.base_dir), None)):
        where = f"its directory {held.base_dir}/ is now listed as {other.name!r}"
    elif held.base_dir:
        where = f"its directory {held.base_dir}/ is no longer in the workspace"
    else:
        where = "it is no longer in the workspace"
    after = f" Once unloaded, loading {name!r} takes the skill in {current.base_dir}/." if current is not None else ""
    return ToolResult.text(f"Skill \"{name}\" is already loaded ({where}); nothing was appended.{after}",
                           {"name": name, "status": "already_loaded"})


def _quoted(name: str, secrets: Secrets) -> str:
    """``name`` quoted for a message, cut to :data:`MAX_NAME_CHARS` with ``…`` after it when
    longer (a front matter's or a call's name may be of any length). Cut by ``secrets``
    (:meth:`Secrets.cut`): a key across the cut is replaced whole, where a cut made first would
    leave a piece of it that no later scrub of the message recognises."""
    shown = secrets.cut(name, MAX_NAME_CHARS)
    return repr(shown) if shown == secrets.scrub(name) else f"{shown!r}…"


def _too_long(name: str, secrets: Secrets) -> ToolError:
    """A name no skill is listed under: longer than :data:`MAX_NAME_CHARS` (echoed cut)."""
    return ToolError("SKILL_NOT_FOUND", f"no skill named {_quoted(name, secrets)}: a skill name has at most "
                                        f"{MAX_NAME_CHARS} characters")


def _named_otherwise(skills: list[Skill], name: str, secrets: Secrets) -> str:
    """What a failed load by ``name`` adds when a skill directory is called that but its front
    matter names the skill otherwise: a skill is named by its front matter, not its directory."""
    held = next((s for s in skills if s.base_dir.rpartition("/")[2] == name and (s.declared or s.name) != name),
                None)
    if held is None:
        return _named_by_path(skills, name, secrets) or _named_in_another_case(skills, name)
    cannot = f" (it cannot be loaded: {held.problem})" if held.problem else ""
    return f" ({held.base_dir}/ holds the skill named {_quoted(held.declared or held.name, secrets)}, its front matter's name{cannot})"


def _named_by_path(skills: list[Skill], name: str, secrets: Secrets) -> str:
    """What a failed load by ``name`` adds when it is a skill's path rather than its name: its
    directory (``skills/review``, ``./skills/review/``, ``review/``) or its ``SKILL.md`` (as the
    system prompt lists it). A skill is loaded by its name only."""
    path = name.strip()
    if "/" not in path:
        return ""
    path = path.removeprefix("./").rstrip("/")
    path = path.removesuffix(f"/{SKILL_FILE}") if path != SKILL_FILE else ""
    at = next((s for s in skills if path and (s.base_dir == path or s.base_dir.rpartition("/")[2] == path)), None)
    if at is None:
        return ""
    cannot = f"; it cannot be loaded: {at.problem}" if at.problem else ""
    return (f" ({at.base_dir}/ holds the skill named {_quoted(at.declared or at.name, secrets)}: a skill is loaded by its name, not its "
            f"path{cannot})")


def _named_in_another_case(skills: list[Skill], name: str) -> str:
    """What a failed load by ``name`` adds when skills are listed under that name in another
    case (or with blanks around it, full-width or invisible characters: :func:`_other_case`)."""
    return _other_case([s.name for s in skills], name, "listed")


def _name_key(name: str) -> str:
    """``name`` as a reader would take it: compatibility forms unified (full-width letters), format
    characters (a zero-width space) dropped, blanks around it stripped, case folded."""
    text = "".join(c for c in unicodedata.normalize("NFKC", name) if unicodedata.category(c) != "Cf")
    return text.strip().casefold()


def _other_case(names: Iterable[str], name: str, how: str) -> str:
    """`` (skill names are case-sensitive: <how> as 'Review')`` when ``names`` holds ``name`` in
    another case only; `` (skill names are matched exactly, character for character: <how> as
    'review')`` when it differs otherwise only by what :func:`_name_key` sets aside (blanks around
    it, full-width or invisible characters); else ``""``. For a load, the names listed; for an
    unload, those loaded. Names stay exact: the hint loads or unloads nothing."""
    key = _name_key(name)
    others = list(dict.fromkeys(n for n in names if n != name and _name_key(n) == key))
    if not others:
        return ""
    shown = ", ".join(repr(o) for o in others[:5])
    if all(o.casefold() == name.casefold() for o in others):
        return f" (skill names are case-sensitive: {how} as {shown})"
    return f" (skill names are matched exactly, character for character: {how} as {shown})"


def skill_tool(pool: Respawning, sizes: SkillSizes | None = None, secrets: Secrets | None = None) -> ToolSpec:
    """The ``skill`` tool; ``sizes`` (a new one when not given) keeps its discoveries' size verdicts.
    ``secrets`` (the store's keys; else the call's ``ToolContext.secrets``) are replaced in what a
    skill's problem quotes of its SKILL.md before it is cut, whoever runs the tool (a ``/skill:``
    input's check runs it too)."""
    sizes = SkillSizes() if sizes is None else sizes

    async def skill(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        keys = secrets or ctx.secrets  # (replaced in what the answers quote, before any cut)
        extra = set(args) - {"name", "unload"}
        name, unload = args.get("name"), args.get("unload")
        if unload is None:
            unload = False  # (sent as null: left out, as a null name is)
        problem = None
        if extra:
            problem = f"skill does not take {shortened_names(extra)}"
        elif name is not None and not isinstance(name, str):
            problem = f"name must be a string, got {shortened_json(name)}"
        elif not isinstance(unload, bool):
            problem = f"unload must be true or false, got {shortened_json(unload)}"
        elif unload and name is None:
            problem = "unload needs a name"
        elif name is not None and not name.strip():
            problem = f"name must not be empty, got {shortened_json(name)} (omit it to list the skills)"
        if problem is not None:
            raise ToolError("INVALID_ARGUMENT", f'{problem}; skill takes {{}} (list), {{"name": "..."}} (load) '
                                                f'or {{"name": "...", "unload": true}}')
        too_long = name is not None and len(name) > MAX_NAME_CHARS
        if too_long and unload:  # (such a name is never loaded: nothing to unload, nothing to read)
            raise _too_long(name, keys)
        loaded: Mapping[str, HeldSkill] = ctx.loaded_skills() if ctx.loaded_skills is not None else {}
        if unload:
            assert name is not None
            if name not in loaded:
                return ToolResult.text(f"Skill \"{name}\" is not loaded{_other_case(loaded, name, 'loaded')}; "
                                       "nothing to unload.",
                                       {"name": name, "status": "not_loaded"})
            return ToolResult.text(
                f"Skill \"{name}\" unloaded: its instructions leave the working context from the next request. "
                "Loading it again takes its current text.",
                {"name": name, "status": "unloaded"}, events=[t.SkillUnloaded(name=name, call_id=ctx.call_id)])
        read = workspace_reader(pool, ctx.project_id, f"{ctx.session_id}:{ctx.call_id}:skill")
        browse = workspace_reader(pool, ctx.project_id, f"{ctx.session_id}:{ctx.call_id}:skill", tool="browse_list")
        discovery = await discover(read, browse=browse, recordable=ctx.recordable, sizes=sizes,
                                   secrets=keys)
        skills = discovery.skills
        if name is None:
            at = _loaded_at(skills, loaded)
            listed = [{"name": s.name, "description": s.description, "base_dir": s.base_dir,
                       "loaded": at.get(s.name) == i,
                       **({"problem": s.problem} if s.problem else {})} for i, s in enumerate(skills)]
            return ToolResult.text(_list_text(discovery, loaded), {
                "skills": listed, **({"unread_dirs": discovery.unread_dirs} if discovery.unread_dirs else {})})
        if too_long:
            # A SKILL.md that gives this name is listed under it cut, with its problem: named as
            # for the cut name (below), not as a skill that does not exist.
            bad = next((s for s in skills if s.declared == name), None)
            if bad is None:
                raise _too_long(name, keys)
            raise ToolError("SKILL_INVALID", f"skill {_quoted(name, keys)} ({bad.base_dir}/) cannot be loaded: "
                                             f"{bad.problem}")
        found = next((s for s in skills if s.name == name and s.problem is None), None)
        held = loaded.get(name)
        if held is not None:
            # Its snapshot is in the context whatever became of the directory it was loaded from:
            # a repeat load appends nothing, so what that holds now matters only for what it says.
            at_index = _loaded_at(skills, {name: held}).get(name)
            mine = skills[at_index] if at_index is not None else None
            if mine is None or mine.problem is not None:
                return _held_unlisted(name, held, mine, found, discovery)
            found = mine  # (the loadable one of that name)
        elif found is None:
            bad = next((s for s in skills if s.name == name), None)
            if bad is not None:
                raise ToolError("SKILL_INVALID", f"skill {name!r} ({bad.base_dir}/) cannot be loaded: {bad.problem}")
            usable = [s.name for s in skills if s.problem is None]
            past = (f" among the first {MAX_SKILLS} skill directories, which are all that are looked at "
                    f"({discovery.unread_note()}; a skill among them cannot be loaded)" if discovery.unread_dirs else "")
            raise ToolError("SKILL_NOT_FOUND", f"no skill named {name!r}{past}{_named_otherwise(skills, name, keys)}; "
                            f"available: {', '.join(usable[:50]) if usable else 'none'}")
        samples, more = await resource_samples(browse, found.base_dir)
        structured = {"name": found.name, "base_dir": found.base_dir, "resources": samples,
                      "more_resources": more, "digest": found.digest}
        shown = "\n".join(f"- {found.base_dir}/{p}" for p in samples) or "(none)"
        if more:
            shown += f"\n(more files not shown; list {found.base_dir}/ with read_file)"
        if held is not None:
            note = ""
            if held.digest and held.digest != found.digest:
                note = (f" Its {SKILL_FILE} changed since it was loaded; to take the current text, unload it "
                        "and load it again.")
            return ToolResult.text(
                f"Skill \"{found.name}\" is already loaded: its instructions are in the context; nothing was "
                f"appended.{note}\nResource base dir: {found.base_dir}/\nResources:\n{shown}",
                {**structured, "status": "already_loaded"})
        return ToolResult.text(
            f"Skill \"{found.name}\" loaded. Its full instructions follow as a system message after this "
            f"round's tool results.\nResource base dir: {found.base_dir}/\nResources:\n{shown}",
            {**structured, "status": "loaded", "instructions_follow": True},
            events=[t.SkillLoaded(name=found.name, instructions=instructions_text(found), base_dir=found.base_dir,
                                  digest=found.digest, call_id=ctx.call_id)])

    return ToolSpec(
        "skill",
        "Workspace skills: {} lists them with their load state; {\"name\"} loads one (its instructions are "
        "added to the context after this round's tool results); {\"name\", \"unload\": true} unloads it.",
        {"type": "object", "properties": {"name": {"type": "string"}, "unload": {"type": "boolean"}},
         "additionalProperties": False},
        skill,
        replay_safe=True,
        read_only=True,
    )


async def prompt_skills(pool: Respawning, project_id: str, *, wait: bool = True,
                        recordable: Callable[[t._Event], object] | None = None,
                        sizes: SkillSizes | None = None, secrets: Secrets | None = None) -> list[tuple[str, str, str]]:
    """(name, description, SKILL.md path) of the project's loadable skills, for the system
    prompt's skills section; an executor that fails leaves the section out (logged).
    ``wait=False``: ``DomainBusy`` instead of waiting while a command holds the workspace.
    ``recordable`` (the log codec's ``pack_checked``): a skill whose ``skill.loaded`` it refuses
    (instructions past the log's maximum event size) could never be loaded, and is left out
    (the same check as the ``skill`` tool's: :func:`discover`; ``sizes`` keeps its verdicts)."""
    who = f"prompt:{project_id}:skills"
    try:
        found = await discover(workspace_reader(pool, project_id, who, wait=wait),
                               browse=workspace_reader(pool, project_id, who, wait=wait, tool="browse_list"),
                               recordable=recordable, sizes=sizes, secrets=secrets)
    except ToolError as exc:
        log.warning("project %s: skills not listed for the system prompt (%s)", project_id, exc.code)
        return []
    return [(s.name, s.description, f"{s.base_dir}/{SKILL_FILE}") for s in found.skills if s.problem is None]
