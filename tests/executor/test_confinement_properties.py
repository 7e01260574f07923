"""Workspace confinement (SPEC F-EXE-9, with F-EXE-2..6, F-HAR-3) as a property.

A real ``lens executor serve`` process over gRPC serves a workspace; beside it (outside the
workspace) lies a canary tree whose files hold a unique canary string. For every example
hypothesis draws a fresh tree inside the workspace — files, directories and symlinks to files
and directories inside, to the canary tree, to ``/``, to ``..``, to the workspace itself,
chains, loops, dangling links, a directory name that is a link in the middle of a path, and a
hard link to a canary file — and then calls with drawn paths (relative, with ``.``/``..``/empty
components, absolute inside and outside, trailing slashes, NFC/NFD twins, NUL, names at and
past NAME_MAX, paths past PATH_MAX, ``.git``, ``.env``, ``.gitignore``) to every path-taking
tool the executor serves: ``read_file`` (files, listings, offsets), ``edit_file`` (create,
rewrite, edit), ``patch_file``, ``view_image``, ``restore`` (what ``revert_call`` sends),
``browse_list`` / ``browse_read`` (F-HAR-3), ``resolve`` and a command's ``cwd``.

The oracle, after every call:

* no answer (result, bytes, before/after, error message) holds the canary string;
* nothing outside the workspace — the canary tree and the workspace's other neighbours — was
  created, written, truncated, renamed, chmodded or had its mtime changed (snapshot by lstat
  and content before and after);
* a refusal is an :class:`ExecutorToolError` with a stable code, and its message names the path
  as the caller gave it (an absolute path as its part below the root, one outside as
  ``<absolute path>``; a NUL or over-long name is described, not echoed);
* an accepted call did what it says inside the workspace: the entry it read or wrote is the one
  POSIX resolution of the path reaches, and that lies inside the workspace.

A hard link in the workspace to an outside file is a name *inside* the workspace (F-EXE-9 speaks
of paths: ``..``, absolute and symlink escapes), but its other name is outside: no file tool
reads or edits a file with more than one name (``HARD_LINKED``, browsing too),
and the outside file stays as it was (it holds its own marker, not the canary).

Then a bounded race: a thread swaps a workspace directory for a symlink to the canary tree (and
a workspace file for a symlink to a canary file) and back while the executor serves reads and
writes under them; the same oracle holds. A second race swaps a command's ``cwd`` the same way
while commands run ``pwd -P`` in it: each starts in the directory the walk reached, never in the
canary tree.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import stat
import threading
import unicodedata
from pathlib import Path
from typing import Any, Iterator

import pytest
import trio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from runtime.executor_client import ExecutorClient, ExecutorToolError, ToolOutcome
from tests.files.sample_images import png_saying

from .conftest import ExecutorProcess, running_executor, said_hello, start_executor, stop_process

CANARY = "CANARY-7f3a9c1e-outside"
HARD = "HARDLINKED-inside-name"   # the hard-linked outside file's text (see the module docstring)
CODE = re.compile(r"^[A-Z][A-Z0-9_]+$")
NFC, NFD = unicodedata.normalize("NFC", "caf\u00e9"), unicodedata.normalize("NFD", "caf\u00e9")
LONG = "n" * 255       # NAME_MAX
TOO_LONG = "n" * 256
PATH_MAX = 4096

FILES = ["f.txt", "d/g.txt", "d/e/h.txt", NFC, ".env", ".gitignore", "img.png", "d/.git/config", "AGENTS.md",
         "skills/s/SKILL.md", ".f.txt.lens-0123456789ab.tmp"]
DIRS = ["d", "d/e", "e2", "d/.git", "skills/s"]
# (name inside the workspace, link target); the target may name the canary tree with "{canary}",
# the workspace with "{ws}".
LINKS = [
    ("l_in_file", "f.txt"), ("l_in_dir", "d"), ("d/l_up", ".."), ("d/e/l_up2", "../.."),
    ("l_canary_dir", "{canary}"), ("l_canary_file", "{canary}/c.txt"), ("l_rel_out", "../canary"),
    ("l_rel_out_file", "../canary/c.txt"), ("l_root", "/"), ("l_dotdot", ".."), ("l_ws", "{ws}"),
    ("l_ws_rel", "."), ("l_chain1", "l_chain2"), ("l_chain2", "l_in_dir"), ("l_chain_out", "l_canary_dir"),
    ("l_loop1", "l_loop2"), ("l_loop2", "l_loop1"), ("l_self", "l_self"), ("l_dangling", "nowhere/x"),
    ("l_dangling_out", "{canary}/missing"), ("d/l_mid", "../e2"), ("d/l_mid_out", "../../canary"),
    ("l_abs_in", "{ws}/d"), ("l_abs_escape", "{ws}/../canary"), ("l_img_out", "{canary}/c.png"),
    (NFD, "{canary}/c.txt"), ("l_env_out", "{canary}/.env"), ("e2/l_back", "../d/e"),
    ("e2/.gitignore", "{canary}/c.txt"), ("skills/l_skill_out", "{canary}/sub"), ("skills/s/l_res", "{canary}/c.txt"),
]
KNOWN = sorted(set(FILES + DIRS + [n for n, _ in LINKS] + [
    "l_in_dir/g.txt", "l_in_dir/e/h.txt", "l_canary_dir/c.txt", "l_canary_dir/sub", "d/l_up/f.txt",
    "d/e/l_up2/d/g.txt", "d/l_mid/l_back/h.txt", "l_chain1/e/h.txt", "l_chain_out/c.txt", "l_loop1/x",
    "l_ws/f.txt", "l_ws_rel/d/g.txt", "l_abs_in/g.txt", "l_abs_escape/c.txt", "l_dotdot/canary/c.txt",
    "l_root/etc/passwd", "d/l_mid_out/c.txt", "l_rel_out/sub/c2.txt", "e2/l_back/h.txt", "l_dangling",
    "hard.txt", "d/.git", ".", "./", "d/..", "d/e/../..", "l_in_dir/..", "l_ws/..", "l_ws_rel/..",
]))
DIR_PATHS = DIRS + [".", "l_in_dir", "l_ws", "l_ws_rel", "l_canary_dir", "d/l_up", "d/e/l_up2", "d/l_mid",
                   "d/l_mid_out", "l_chain1", "l_chain_out", "l_abs_in", "l_abs_escape", "l_root", "l_dotdot",
                   "skills/l_skill_out", "e2/l_back", "l_loop1", "l_rel_out"]
FILE_PATHS = FILES + ["l_in_file", "l_canary_file", "l_rel_out_file", "l_img_out", NFD, "l_env_out", "hard.txt",
                      "l_in_dir/g.txt", "l_canary_dir/c.png", "skills/s/l_res", "d/l_up/img.png", "l_ws/img.png",
                      "d/l_mid/l_back/h.txt", "l_abs_escape/c.txt", "l_dotdot/canary/c.png"]
NAMES = sorted({p.split("/")[-1] for p in FILES + DIRS} | {n.split("/")[-1] for n, _ in LINKS}
               | {"new", "new2", "c.txt", "canary", "workspace", NFD, LONG, TOO_LONG, ".git"})


# ---------------------------------------------------------------------------- trees


def canary_tree(canary: Path) -> None:
    (canary / "sub").mkdir(parents=True)
    (canary / "c.txt").write_text(f"{CANARY} c.txt\n")
    (canary / "sub" / "c2.txt").write_text(f"{CANARY} c2.txt\n")
    (canary / ".env").write_text(f"SECRET={CANARY}\n")
    (canary / "c.png").write_bytes(png_saying(CANARY.encode()))
    (canary / "hard.txt").write_text(f"{HARD}\n")
    (canary / "f.txt").write_text(f"{CANARY} f.txt\n")


def clear(ws: Path) -> None:
    for entry in os.scandir(ws):
        p = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(p)
        else:
            p.unlink()


def build(ws: Path, canary: Path, chosen_links: list[int], hard: bool) -> None:
    clear(ws)
    for d in DIRS:
        (ws / d).mkdir(parents=True, exist_ok=True)
    for f in FILES:
        (ws / f).write_bytes(png_saying(b"inside") if f.endswith(".png") else f"inside {f}\n".encode())
    for i in chosen_links:
        name, target = LINKS[i]
        os.symlink(target.format(canary=canary, ws=ws), ws / name)
    if hard:
        try:
            os.link(canary / "hard.txt", ws / "hard.txt")
        except OSError:
            pass  # a file system without hard links (or across devices): nothing to test


def snapshot(top: Path, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Every entry below ``top`` (not following symlinks): type, mode, size, mtime, content or
    link target. ``skip``: names directly below ``top`` left out (and not entered)."""
    out: dict[str, Any] = {}

    def one(p: Path, rel: str) -> None:
        s = os.lstat(p)
        row: tuple[Any, ...] = (stat.S_IFMT(s.st_mode), stat.S_IMODE(s.st_mode), s.st_mtime_ns)
        if stat.S_ISLNK(s.st_mode):
            row += (os.readlink(p),)
        elif stat.S_ISREG(s.st_mode):
            row += (s.st_size, hashlib.sha256(p.read_bytes()).hexdigest())
        out[rel] = row
        if stat.S_ISDIR(s.st_mode):
            for name in sorted(os.listdir(p)):
                if rel == "." and name in skip:
                    continue
                one(p / name, name if rel == "." else f"{rel}/{name}")

    one(top, ".")
    return out


# ---------------------------------------------------------------------------- the reference


def posix_target(ws: Path, path: str) -> Path | None:
    """Where POSIX resolution of ``path`` leads (symlinks followed, missing parts lexically), or
    None when the text cannot name a host path."""
    if "\x00" in path or path == "":
        return None
    return Path(os.path.realpath(path if path.startswith("/") else ws / path))


def inside(ws: Path, p: Path) -> bool:
    return p == ws or ws in p.parents


# ---------------------------------------------------------------------------- paths and calls


def one_in(k: int) -> st.SearchStrategy[bool]:
    return st.integers(0, k - 1).map(lambda i: i == 0)


@st.composite
def paths(draw: st.DrawFn, ws: Path, canary: Path) -> str:
    if draw(one_in(3)):
        comps = draw(st.lists(st.sampled_from(NAMES + [".", "..", ""]), min_size=1, max_size=5))
        text = "/".join(comps)
    else:  # a path that exists, or runs through links that do, now and then with more after it
        text = draw(st.sampled_from(KNOWN))
        text += draw(st.sampled_from(["", "", "", "/f.txt", "/c.txt", "/e/h.txt", "/sub/c2.txt", "/new/x.txt",
                                      "/../f.txt", "/../canary/c.txt", "/l_in_file", "/l_up/f.txt"]))
    prefix = draw(st.sampled_from([""] * 8 + ["./", "ws", "ws", "canary", "/", "ws/..", "parent"]))
    if prefix == "ws":
        text = f"{ws}/{text}"
    elif prefix == "canary":
        text = f"{canary}/{text}"
    elif prefix == "ws/..":
        text = f"{ws}/../{text}"
    elif prefix == "parent":
        text = f"../{ws.name}/{text}"
    else:
        text = prefix + text
    tail = draw(st.sampled_from([""] * 12 + ["/", "/.", "/..", "\x00", "/" + LONG, "/" + TOO_LONG]))
    text += tail
    repeat = draw(st.sampled_from([1] * 16 + [20, 300]))  # 300 x a long name: past PATH_MAX
    if repeat > 1:
        text = "/".join([text.strip("/") or "d"] * repeat) if not text.startswith("/") else text + ("/d" * repeat)
    return text


@st.composite
def calls(draw: st.DrawFn, ws: Path, canary: Path) -> tuple[str, dict[str, Any]]:
    path = draw(paths(ws, canary))
    dir_path = draw(st.sampled_from(DIR_PATHS)) + draw(st.sampled_from(["", "", "/", "/."]))
    file_path = draw(st.sampled_from(FILE_PATHS)) + draw(st.sampled_from(["", "", "", "/"]))
    either = draw(st.sampled_from([path, file_path]))
    tool = draw(st.sampled_from(["read_file", "read_file_page", "edit_create", "edit_rewrite", "edit_edit",
                                 "patch_file", "view_image", "restore_new", "restore_canary", "browse_list",
                                 "browse_read", "resolve", "read_nofollow", "run_cwd"]))
    if tool == "read_file":
        return "read_file", {"path": draw(st.sampled_from([path, dir_path]))}
    if tool == "read_nofollow":  # skill discovery's reads
        return "read_file", {"path": path, "follow_symlinks": False}
    if tool == "read_file_page":
        return "read_file", {"path": path, **draw(st.sampled_from([{"offset": 3}, {"start_line": 1, "max_lines": 1},
                                                                     {"offset": 0, "max_lines": 2}]))}
    if tool == "edit_create":
        return "edit_file", {"path": path, "mode": "create", "content": "made\n"}
    if tool == "edit_rewrite":
        return "edit_file", {"path": either, "mode": "rewrite", "content": "rewritten\n"}
    if tool == "edit_edit":
        old = draw(st.sampled_from(["inside", CANARY, HARD, "c"]))
        return "edit_file", {"path": either, "mode": "edit", "edits": [{"old_string": old, "new_string": "EDITED"}]}
    if tool == "patch_file":
        line = draw(st.sampled_from([f"{CANARY} c.txt", "inside f.txt", HARD]))
        return "patch_file", {"path": either, "patch": f"@@\n-{line}\n+patched\n"}
    if tool == "view_image":
        return "view_image", {"path": either}
    if tool == "restore_new":  # a revert_call of a create: the file must not exist
        return "restore", {"path": path, "content_hex": b"restored\n".hex(), "expect_sha256": None}
    if tool == "restore_canary":  # a revert_call whose expected bytes are a canary file's
        want = draw(st.sampled_from([f"{CANARY} c.txt\n", f"{CANARY} f.txt\n", f"{HARD}\n", "inside f.txt\n"]))
        content = draw(st.sampled_from([None, b"reverted\n".hex()]))
        return "restore", {"path": either, "content_hex": content,
                           "expect_sha256": hashlib.sha256(want.encode()).hexdigest()}
    if tool == "browse_list":
        return "browse_list", {"path": draw(st.sampled_from([path, dir_path])), "depth": draw(st.sampled_from([1, 3])), "include_ignored": True}
    if tool == "browse_read":
        return "browse_read", {"path": either}
    if tool == "run_cwd":  # a command's cwd (commands themselves are not confined: F-EXE-7)
        return "run", {"path": draw(st.sampled_from([path, dir_path]))}
    return "resolve", {"path": path}


async def run_pwd(client: ExecutorClient, cwd: str) -> Any:
    """``pwd`` in ``cwd``: a ToolOutcome-like answer, or the refusal raised."""
    out = b""
    async with client.run("pwd -P", cwd=cwd) as events:
        async for ev in events:
            if isinstance(ev, Exception):
                raise ev
            if ev.WhichOneof("event") == "stdout":
                out += ev.stdout
    return ToolOutcome({"pwd": out.decode()})


# ---------------------------------------------------------------------------- the oracle


@pytest.fixture(scope="module")
def confined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ExecutorProcess, Path]]:
    root = tmp_path_factory.mktemp("confine")
    canary = root / "canary"
    canary_tree(canary)
    ex = start_executor(root)
    try:
        yield ex, canary
    finally:
        stop_process(ex.proc)


OWN = frozenset({"workspace", "state", "executor.stdout", "executor.stderr"})


def outside_state(ws: Path, canary: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    return snapshot(canary), snapshot(ws.parent, OWN)


def named(path: str, ws: Path) -> list[str]:
    """The ways a refusal's message may name ``path`` (see the module docstring)."""
    if path.startswith("/"):
        real = str(ws)
        if path == real or path.startswith(real + "/"):
            below = "/".join(c for c in path[len(real):].split("/") if c not in ("", "."))
            return [(below or ".")[:80], path[:80]]
        return ["<absolute path>", path[:80]]
    return [path[:80]]


async def check_call(client: ExecutorClient, ws: Path, canary: Path, tool: str, args: dict[str, Any]) -> str:
    """Make the call and check the oracle; returns how it ended (for hypothesis's statistics)."""
    before = outside_state(ws, canary)
    path = args["path"]
    try:
        out = await (run_pwd(client, path) if tool == "run" else client.call(tool, args))
    except ExecutorToolError as exc:
        msg = str(exc)
        assert CODE.match(exc.code), (tool, args, exc.code, msg)
        assert CANARY not in msg, (tool, args, msg)
        if "\x00" not in path and len(path.encode()) <= 4096 and exc.code not in ("TOO_MANY_UNITS",):
            assert any(n in msg for n in named(path, ws)), (tool, args, exc.code, msg)
        assert outside_state(ws, canary) == before, (tool, args, "changed outside on a refusal")
        return f"{tool} refused {exc.code}"
    answer = repr(out.result).encode() + out.data + (out.before or b"") + (out.after or b"")
    assert CANARY.encode() not in answer, (tool, args, out)
    assert outside_state(ws, canary) == before, (tool, args, out.result, "changed outside")
    target = posix_target(ws, path)
    assert target is not None, (tool, args, "accepted a path no host path can be")
    assert inside(ws, target), (tool, args, out.result, target)
    if len(os.fsencode(target)) >= PATH_MAX:
        # (the component walk makes and reads such paths — docs/decisions.md, "A command's cwd the
        # kernel cannot enter" — but the reference cannot open them whole)
        return f"{tool} accepted"
    rel = os.path.relpath(target, ws)
    if tool == "run":
        assert out.result["pwd"] == f"{target}\n", (args, out.result)
    if tool in ("resolve", "browse_list"):
        assert out.result["path"] == rel, (tool, args, out.result, rel)
    if tool == "read_file" and out.result["kind"] == "directory" and "offset" not in args and "max_lines" not in args:
        assert [e.rstrip("/") for e in out.result["entries"]] == sorted(os.listdir(target)), (args, out.result)
    if tool == "view_image":
        assert out.data == target.read_bytes(), (args, out.result)
    if tool == "browse_read":
        assert out.result["text"] == target.read_text() and out.result["path"] == rel, (args, out.result)
    if tool == "read_file" and out.result["kind"] == "file" and not args.get("offset") and "start_line" not in args \
            and not args.get("max_lines"):
        assert out.result["content"] == target.read_text(), (args, out.result)
    if tool in ("edit_file", "patch_file") or (tool == "restore" and args["content_hex"] is not None):
        if out.result["changed"]:
            assert target.read_bytes() == out.after, (tool, args, out.result)
    return f"{tool} accepted"


def run_examples(client: ExecutorClient, ws: Path, canary: Path, examples: int) -> None:
    @settings(max_examples=examples, deadline=None,  # (derandomized by the suite's profile)
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(one_in(4).map(lambda absent: not absent), min_size=len(LINKS), max_size=len(LINKS)),
           st.booleans(),
           st.lists(calls(ws, canary), min_size=1, max_size=6))
    def prop(links: list[bool], hard: bool, todo: list[tuple[str, dict[str, Any]]]) -> None:
        build(ws, canary, [i for i, made in enumerate(links) if made], hard)
        for tool, args in todo:
            event(trio.from_thread.run(check_call, client, ws, canary, tool, args))

    prop()


async def test_no_call_reaches_outside_the_workspace(confined: tuple[ExecutorProcess, Path]) -> None:
    ex, canary = confined
    async with said_hello(ex) as client:
        await trio.to_thread.run_sync(run_examples, client, ex.workspace, canary, 400)


# ---------------------------------------------------------------------------- the swap race

SWAPS = 600
_libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2


def exchange(a: Path, b: Path) -> None:
    if _libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


async def test_a_directory_swapped_for_a_link_out_during_calls(confined: tuple[ExecutorProcess, Path]) -> None:
    ex, canary = confined
    ws = ex.workspace
    build(ws, canary, [], False)
    (ws / "sw").mkdir()
    (ws / "sw" / "c.txt").write_text("inside sw\n")
    before = outside_state(ws, canary)
    stop = threading.Event()

    os.symlink(canary, ws / "sw.link")
    (ws / "swf.txt").write_text(f"inside swf\n")
    os.symlink(canary / "c.txt", ws / "swf.link")
    failures: list[BaseException] = []

    def swapper() -> None:
        # Each swap exchanges the directory and the link atomically (renameat2 RENAME_EXCHANGE),
        # so "sw" is never missing: a create would otherwise make a fresh "sw" meanwhile.
        try:
            for _ in range(SWAPS * 100_000):  # (until the calls are done; bounded all the same)
                if stop.is_set():
                    return
                exchange(ws / "sw", ws / "sw.link")
                exchange(ws / "swf.txt", ws / "swf.link")
        except BaseException as exc:  # (reported by the test, not lost in the thread)
            failures.append(exc)

    async with said_hello(ex) as client:
        thread = threading.Thread(target=swapper)
        thread.start()
        try:
            calls_ = [("read_file", {"path": "sw/c.txt"}), ("read_file", {"path": "sw"}),
                      ("edit_file", {"path": "sw/c.txt", "mode": "rewrite", "content": "inside sw\n"}),
                      ("edit_file", {"path": "sw/f.txt", "mode": "edit",
                                     "edits": [{"old_string": CANARY, "new_string": "x"}]}),
                      ("patch_file", {"path": "sw/c.txt", "patch": f"@@\n-{CANARY} c.txt\n+x\n"}),
                      ("edit_file", {"path": "sw/new/n.txt", "mode": "create", "content": "n\n"}),
                      ("view_image", {"path": "sw/c.png"}), ("browse_list", {"path": "sw", "depth": 2}),
                      ("browse_read", {"path": "sw/c.txt"}), ("resolve", {"path": "sw/sub/c2.txt"}),
                      ("restore", {"path": "sw/c.txt", "content_hex": None,
                                   "expect_sha256": hashlib.sha256(f"{CANARY} c.txt\n".encode()).hexdigest()}),
                      ("read_file", {"path": "swf.txt"}), ("view_image", {"path": "swf.txt"}),
                      ("edit_file", {"path": "swf.txt", "mode": "rewrite", "content": "inside swf\n"}),
                      ("patch_file", {"path": "swf.txt", "patch": f"@@\n-{CANARY} c.txt\n+x\n"}),
                      ("browse_read", {"path": "swf.txt"}),
                      ("restore", {"path": "swf.txt", "content_hex": b"r\n".hex(),
                                   "expect_sha256": hashlib.sha256(f"{CANARY} c.txt\n".encode()).hexdigest()})]
            for i in range(SWAPS):
                tool, args = calls_[i % len(calls_)]
                try:
                    out = await client.call(tool, args)
                except ExecutorToolError as exc:
                    assert CODE.match(exc.code) and CANARY not in str(exc), (tool, exc.code, str(exc))
                    continue
                answer = repr(out.result).encode() + out.data + (out.before or b"") + (out.after or b"")
                assert CANARY.encode() not in answer, (tool, args, out)
        finally:
            stop.set()
            await trio.to_thread.run_sync(thread.join)
    assert not failures, failures
    if (ws / "sw").is_symlink():
        exchange(ws / "sw", ws / "sw.link")
    if (ws / "swf.txt").is_symlink():
        exchange(ws / "swf.txt", ws / "swf.link")
    assert outside_state(ws, canary) == before


CWD_RUNS = 120


async def test_a_commands_cwd_swapped_for_a_link_out_is_never_entered(confined: tuple[ExecutorProcess, Path]) -> None:
    # The cwd passes the confined walk; the command must start in the directory the walk
    # reached, not in whatever its host path names when the shell is spawned a moment later.
    ex, canary = confined
    ws = ex.workspace
    build(ws, canary, [], False)
    (ws / "cw").mkdir()
    os.symlink(canary, ws / "cw.link")
    inside = os.path.join(os.path.realpath(ws), "cw")
    moved = os.path.join(os.path.realpath(ws), "cw.link")  # (the same directory, exchanged with the link)
    stop = threading.Event()
    failures: list[BaseException] = []

    def swapper() -> None:
        try:
            for _ in range(CWD_RUNS * 1_000_000):  # (until the commands are done; bounded all the same)
                if stop.is_set():
                    return
                exchange(ws / "cw", ws / "cw.link")
        except BaseException as exc:
            failures.append(exc)

    seen: dict[str, int] = {}
    async with said_hello(ex) as client:
        thread = threading.Thread(target=swapper)
        thread.start()
        try:
            for _ in range(CWD_RUNS):
                try:
                    out = await run_pwd(client, "cw")
                except ExecutorToolError as exc:  # (the walk met the link: refused)
                    assert exc.code == "PATH_OUTSIDE_WORKSPACE" and CANARY not in str(exc), (exc.code, str(exc))
                    seen["refused"] = seen.get("refused", 0) + 1
                    continue
                pwd = out.result["pwd"].strip()
                seen[pwd] = seen.get(pwd, 0) + 1
        finally:
            stop.set()
            await trio.to_thread.run_sync(thread.join)
    assert not failures, failures
    if (ws / "cw").is_symlink():
        exchange(ws / "cw", ws / "cw.link")
    # every command that started, started in the workspace's directory (wherever it stood then)
    assert set(seen) <= {"refused", inside, moved}, seen
    assert seen.get(inside, 0) + seen.get(moved, 0) > 0, seen


async def test_a_workspace_given_as_a_symlink_stays_the_directory_it_named_at_start(tmp_path: Path) -> None:
    # `--workspace` names a link; the executor serves the directory it led to when it started,
    # through the link's path and the real one, and keeps serving it when the link is turned
    # to another tree (the canary) meanwhile.
    real, canary = tmp_path / "real", tmp_path / "canary"
    real.mkdir()
    (real / "f.txt").write_text("inside\n")
    canary_tree(canary)
    (tmp_path / "workspace").symlink_to(real)
    async with running_executor(tmp_path) as (ex, client):
        for path in ("f.txt", str(tmp_path / "workspace" / "f.txt"), str(real / "f.txt")):
            assert (await client.call("read_file", {"path": path})).result["content"] == "inside\n", path
        os.replace(tmp_path / "workspace", tmp_path / "old-link")
        (tmp_path / "workspace").symlink_to(canary)
        for path in ("f.txt", str(tmp_path / "workspace" / "f.txt")):
            assert (await client.call("read_file", {"path": path})).result["content"] == "inside\n", path
        with pytest.raises(ExecutorToolError) as info:
            await client.call("read_file", {"path": "c.txt"})
        assert info.value.code == "NOT_FOUND" and CANARY not in str(info.value)
        assert (await run_pwd(client, ".")).result["pwd"].strip() == os.path.realpath(real)
        await client.call("edit_file", {"path": "new.txt", "mode": "create", "content": "n\n"})
        assert (real / "new.txt").read_text() == "n\n" and not (canary / "new.txt").exists()
