"""Confinement (F-EXE-9): `..`, absolute paths, sibling prefixes, symlinks, swap races, NUL."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import pytest

from tools.files import LIMITS, FileToolError, Workspace

from .helpers import fails

def every_tool(path: str) -> list[tuple[str, Callable[[Workspace], Any]]]:
    return [
        ("read_file", lambda ws: ws.read_file(path)),
        ("view_image", lambda ws: ws.view_image(path)),
        ("create", lambda ws: ws.edit_file(path, "create", content="x")),
        ("rewrite", lambda ws: ws.edit_file(path, "rewrite", content="x")),
        ("edit", lambda ws: ws.edit_file(path, "edit", edits=[{"old_string": "top", "new_string": "x"}])),
        ("patch", lambda ws: ws.patch_file(path, "@@\n-top secret\n+x\n")),
        ("restore", lambda ws: ws.restore(path, b"x", None)),
        ("read_bytes", lambda ws: ws.read_bytes(path)),
        ("open_directory", lambda ws: os.close(ws.open_directory(path))),
    ]


def held(ws: Workspace, path: str) -> Path:
    """The directory ``open_directory`` holds open for ``path`` (a command's cwd)."""
    fd = ws.open_directory(path)
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    finally:
        os.close(fd)


def assert_refused(ws: Workspace, path: str, tmp_path: Path, code: str = "PATH_OUTSIDE_WORKSPACE") -> None:
    for name, call in every_tool(path):
        with pytest.raises(FileToolError) as info:
            call(ws)
        assert info.value.code == code, (name, info.value.code, info.value.message)
        assert str(tmp_path) not in info.value.message, (name, info.value.message)


def assert_outside_untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_bytes() == b"top secret\n"


@pytest.mark.parametrize("path", ["..", "../ws-evil/secret.txt", "a/../../ws-evil/secret.txt", "./../x",
                                  "sub/../../ws-evil/secret.txt"])
def test_dotdot_escapes(ws: Workspace, root: Path, outside: Path, tmp_path: Path, path: str) -> None:
    (root / "sub").mkdir()
    (root / "a").mkdir()
    assert_refused(ws, path, tmp_path)
    assert_outside_untouched(outside)


def test_dotdot_inside_is_fine(ws: Workspace, root: Path) -> None:
    (root / "a").mkdir()
    (root / "b.txt").write_text("b")
    assert ws.read_file("a/../b.txt")["content"] == "b"
    assert ws.read_file("a/..")["entries"] == ["a/", "b.txt"]
    ws.edit_file("a/../c.txt", "create", content="c")
    assert (root / "c.txt").read_text() == "c"


def test_absolute_paths(ws: Workspace, root: Path, outside: Path, tmp_path: Path) -> None:
    (root / "in.txt").write_text("inside")
    assert ws.read_file(str(root / "in.txt"))["content"] == "inside"  # inside the root: accepted
    assert ws.read_file(str(root))["kind"] == "directory"
    assert_refused(ws, str(outside / "secret.txt"), tmp_path)  # the ws-evil sibling prefix
    assert_refused(ws, str(outside), tmp_path)
    assert_refused(ws, "/etc/passwd", tmp_path)
    assert_refused(ws, str(root) + "/../ws-evil/secret.txt", tmp_path)
    assert_outside_untouched(outside)


def test_root_given_through_a_symlink(root: Path, tmp_path: Path) -> None:
    (root / "f").write_text("via link")
    link = tmp_path / "root-link"
    link.symlink_to(root)
    ws = Workspace(link)
    assert ws.read_file(str(link / "f"))["content"] == "via link"
    assert ws.read_file(str(root / "f"))["content"] == "via link"
    assert held(ws, ".") == root.resolve()


@pytest.mark.parametrize("relative", [True, False])
def test_symlinked_file_pointing_out(ws: Workspace, root: Path, outside: Path, tmp_path: Path,
                                     relative: bool) -> None:
    (root / "leak").symlink_to("../ws-evil/secret.txt" if relative else outside / "secret.txt")
    for name, call in every_tool("leak"):
        with pytest.raises(FileToolError) as info:
            call(ws)
        # (a create never writes through a final link; one leading out is named as the escape it is)
        assert info.value.code == "PATH_OUTSIDE_WORKSPACE", (name, info.value.message)
        assert str(tmp_path) not in info.value.message
    assert_outside_untouched(outside)


@pytest.mark.parametrize("relative", [True, False])
def test_symlinked_directory_pointing_out(ws: Workspace, root: Path, outside: Path, tmp_path: Path,
                                          relative: bool) -> None:
    (root / "door").symlink_to("../ws-evil" if relative else outside)
    assert_refused(ws, "door/secret.txt", tmp_path)
    assert_refused(ws, "door/new.txt", tmp_path)  # create must not land outside either
    assert_refused(ws, "door/deeper/new.txt", tmp_path)
    fails("PATH_OUTSIDE_WORKSPACE", ws.read_file, "door")
    assert_outside_untouched(outside)


def test_dangling_symlinks(ws: Workspace, root: Path, outside: Path, tmp_path: Path) -> None:
    (root / "dangling-in").symlink_to("nothing-here")
    (root / "dangling-out").symlink_to("../ws-evil/not-yet")
    fails("NOT_FOUND", ws.read_file, "dangling-in")
    fails("NOT_FOUND", ws.view_image, "dangling-in")
    fails("NOT_FOUND", ws.edit_file, "dangling-in", "rewrite", content="x")
    fails("ALREADY_EXISTS", ws.edit_file, "dangling-in", "create", content="x")
    fails("PATH_OUTSIDE_WORKSPACE", ws.edit_file, "dangling-out", "create", content="x")
    fails("PATH_OUTSIDE_WORKSPACE", ws.read_file, "dangling-out")
    fails("PATH_OUTSIDE_WORKSPACE", ws.edit_file, "dangling-out", "rewrite", content="x")
    fails("PATH_OUTSIDE_WORKSPACE", ws.restore, "dangling-out", b"x", None)
    assert not (root / "nothing-here").exists()
    assert_outside_untouched(outside)


def test_symlinks_inside_are_followed(ws: Workspace, root: Path) -> None:
    (root / "real").mkdir()
    (root / "real" / "f.txt").write_text("v1\n")
    (root / "dirlink").symlink_to("real")
    (root / "abslink").symlink_to(root / "real" / "f.txt")
    (root / "chain").symlink_to("dirlink/../abslink")
    assert ws.read_file("dirlink/f.txt")["content"] == "v1\n"
    assert ws.read_file("chain")["content"] == "v1\n"
    assert ws.read_file("dirlink")["entries"] == ["f.txt"]
    ws.edit_file("abslink", "rewrite", content="v2\n")  # writes the target, keeps the link
    assert (root / "abslink").is_symlink() and (root / "real" / "f.txt").read_text() == "v2\n"
    ws.patch_file("dirlink/f.txt", "@@\n-v2\n+v3\n")
    assert (root / "real" / "f.txt").read_text() == "v3\n" and (root / "dirlink").is_symlink()
    ws.edit_file("dirlink/new.txt", "create", content="n")
    assert (root / "real" / "new.txt").read_text() == "n"


def test_symlink_loop(ws: Workspace, root: Path) -> None:
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    fails("TOO_MANY_LINKS", ws.read_file, "loop1")
    (root / "self").symlink_to("self/x")
    fails("TOO_MANY_LINKS", ws.read_file, "self")


def _swap_for_link(directory: Path, target: Path) -> None:
    directory.rename(directory.with_name(directory.name + ".moved"))
    directory.symlink_to(target)


def test_swap_race_before_a_directory_is_opened(ws: Workspace, root: Path, outside: Path,
                                                tmp_path: Path) -> None:
    """The walker looked at `sub` (a directory); before it opens it, `sub` becomes a symlink out."""
    (root / "sub").mkdir()
    (root / "sub" / "secret.txt").write_text("inside copy\n")
    seen: list[tuple[str, str]] = []

    def hook(event: str, rel: str) -> None:
        seen.append((event, rel))
        if (event, rel) == ("open_dir", "sub") and not (root / "sub").is_symlink():
            _swap_for_link(root / "sub", outside)

    ws.resolve_hook = hook
    err = fails("PATH_OUTSIDE_WORKSPACE", ws.read_file, "sub/secret.txt")
    assert ("open_dir", "sub") in seen and str(tmp_path) not in err.message
    (root / "sub").unlink()
    (root / "sub.moved").rename(root / "sub")
    fails("PATH_OUTSIDE_WORKSPACE", ws.edit_file, "sub/new.txt", "create", content="x")
    assert_outside_untouched(outside)


def test_swap_race_after_a_directory_is_opened(ws: Workspace, root: Path, outside: Path) -> None:
    """Once `sub` is open, swapping it for a symlink changes nothing: the walk holds the fd."""
    (root / "sub").mkdir()
    (root / "sub" / "secret.txt").write_text("inside copy\n")

    def hook(event: str, rel: str) -> None:
        if (event, rel) == ("open_final", "sub/secret.txt") and not (root / "sub").is_symlink():
            _swap_for_link(root / "sub", outside)

    ws.resolve_hook = hook
    assert ws.read_file("sub/secret.txt")["content"] == "inside copy\n"
    (root / "sub").unlink()
    (root / "sub.moved").rename(root / "sub")
    ws.edit_file("sub/secret.txt", "rewrite", content="rewritten\n")
    assert (root / "sub.moved" / "secret.txt").read_text() == "rewritten\n"
    assert_outside_untouched(outside)


def test_swap_race_between_a_links_lstat_and_its_readlink(ws: Workspace, root: Path) -> None:
    """`d` was a symlink at its lstat and is a directory (or gone) at its readlink: looked at
    again, not an IO_ERROR (EINVAL / ENOENT from readlink)."""
    (root / "real").mkdir()
    (root / "real" / "t").write_text("via the link\n")
    (root / "d").symlink_to("real")

    def hook(event: str, rel: str) -> None:
        if (event, rel) == ("readlink", "d") and (root / "d").is_symlink():
            (root / "d").unlink()
            (root / "d").mkdir()
            (root / "d" / "t").write_text("a directory now\n")

    ws.resolve_hook = hook
    assert ws.read_file("d/t")["content"] == "a directory now\n"
    ws.resolve_hook = None
    (root / "gone").symlink_to("real")
    ws.resolve_hook = lambda event, rel: (root / "gone").unlink() if (event, rel) == ("readlink", "gone") else None
    fails("NOT_FOUND", ws.read_file, "gone/t")


def test_swap_race_on_the_final_file(ws: Workspace, root: Path, outside: Path) -> None:
    """The final entry turns into a symlink out between its lstat and its open."""
    (root / "f.txt").write_text("mine\n")

    def hook(event: str, rel: str) -> None:
        if (event, rel) == ("open_final", "f.txt") and not (root / "f.txt").is_symlink():
            (root / "f.txt").unlink()
            (root / "f.txt").symlink_to(outside / "secret.txt")

    ws.resolve_hook = hook
    fails("PATH_OUTSIDE_WORKSPACE", ws.read_file, "f.txt")
    assert_outside_untouched(outside)


def test_swap_between_two_calls(ws: Workspace, root: Path, outside: Path, tmp_path: Path) -> None:
    (root / "sub").mkdir()
    (root / "sub" / "secret.txt").write_text("inside\n")
    assert ws.read_file("sub/secret.txt")["content"] == "inside\n"
    _swap_for_link(root / "sub", outside)
    assert_refused(ws, "sub/secret.txt", tmp_path)
    assert_outside_untouched(outside)


def test_nul_bytes_in_paths(ws: Workspace, tmp_path: Path) -> None:
    assert_refused(ws, "a\x00b", tmp_path, code="INVALID_ARGUMENT")
    assert_refused(ws, "\x00", tmp_path, code="INVALID_ARGUMENT")


def test_messages_use_the_callers_path(ws: Workspace, root: Path, tmp_path: Path) -> None:
    (root / "d").mkdir()
    (root / "f").write_text("x")
    errors = [
        fails("NOT_FOUND", ws.read_file, "d/missing.txt"),
        fails("NOT_A_DIRECTORY", ws.read_file, "f/x"),
        fails("NOT_A_FILE", ws.edit_file, "d", "rewrite", content="x"),
        fails("ALREADY_EXISTS", ws.edit_file, "f", "create", content="x"),
        fails("NOT_AN_IMAGE", ws.view_image, "f"),
    ]
    for err in errors:
        assert str(tmp_path) not in err.message and str(root) not in err.message


def test_directory_helper(ws: Workspace, root: Path, tmp_path: Path) -> None:
    (root / "d").mkdir()
    (root / "f").write_text("x")
    assert held(ws, "d") == root.resolve() / "d"
    assert held(ws, ".") == root.resolve()
    fails("NOT_A_DIRECTORY", ws.open_directory, "f")
    fails("NOT_FOUND", ws.open_directory, "nope")
    fails("PATH_OUTSIDE_WORKSPACE", ws.open_directory, "..")
    assert ws.read_bytes("f")[0] == b"x"


def test_workspace_root_must_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    fails("NOT_A_DIRECTORY", Workspace, tmp_path / "file")
    fails("NOT_A_DIRECTORY", Workspace, tmp_path / "missing")


def test_trailing_slash_names_a_directory(ws: Workspace, root: Path) -> None:
    (root / "f").write_text("x")
    (root / "d").mkdir()
    fails("NOT_A_DIRECTORY", ws.read_file, "f/")
    fails("NOT_A_DIRECTORY", ws.edit_file, "f/", "rewrite", content="y")
    fails("NOT_FOUND", ws.read_file, "missing/")
    fails("INVALID_ARGUMENT", ws.edit_file, "newdir/", "create", content="y")
    fails("ALREADY_EXISTS", ws.edit_file, "d/", "create", content="y")
    assert ws.read_file("d/")["kind"] == "directory"
    assert (root / "f").read_text() == "x" and not (root / "newdir").exists()


@pytest.mark.parametrize("links,code", [(LIMITS["MAX_SYMLINK_HOPS"], None), (LIMITS["MAX_SYMLINK_HOPS"] + 1, "TOO_MANY_LINKS")])
def test_symlink_chain_edge(ws: Workspace, root: Path, links: int, code: str | None) -> None:
    (root / "real.txt").write_text("end of chain")
    for i in range(links):
        (root / f"l{i}").symlink_to(f"l{i + 1}" if i + 1 < links else "real.txt")
    if code:
        fails(code, ws.read_file, "l0")
    else:
        assert ws.read_file("l0")["content"] == "end of chain"


def test_a_refused_create_makes_no_directories(ws: Workspace, root: Path) -> None:
    # Each of these made the missing directories first and was refused after.
    for path in ("n1/../../escape.txt", "n2/n3/", "n4/n5/..", "n6/file/.."):
        err = fails("INVALID_ARGUMENT", ws.edit_file, path, "create", content="y")
        assert path in err.message
    assert sorted(p.name for p in root.iterdir()) == []
    # ".." through directories that exist is a path like any other
    (root / "d").mkdir()
    assert ws.edit_file("d/../x.txt", "create", content="y").structured["changed"] is True
    assert (root / "x.txt").read_text() == "y"
    fails("INVALID_ARGUMENT", ws.edit_file, "d/new/../y.txt", "create", content="y")
    assert list((root / "d").iterdir()) == []


def test_a_walk_goes_at_most_max_path_depth_directories_deep(ws: Workspace, root: Path) -> None:
    # A walk holds every directory it passed open. A create 25,000 directories deep made ~20,000
    # of them, then failed with IO_ERROR (EMFILE) when the process ran out of file descriptors —
    # and every call running beside it could fail the same way meanwhile.
    from tools.files.confine import MAX_PATH_DEPTH

    deep = "d/" * MAX_PATH_DEPTH
    assert ws.edit_file(deep + "f", "create", content="x").structured["changed"] is True
    assert ws.read_file(deep + "f")["content"] == "x"
    assert ws.read_file("d/../" * 3 + deep + "f")["content"] == "x"  # ".." gives depth back
    for path in ("e/" * (MAX_PATH_DEPTH + 1) + "f", "e/" * 600 + "f"):
        err = fails("INVALID_ARGUMENT", ws.edit_file, path, "create", content="x")
        assert f"more than {MAX_PATH_DEPTH} directories deep" in err.message and len(err.message) < 300
    assert sorted(p.name for p in root.iterdir()) == ["d"]  # nothing of "e" was made
    # deeper than that through a symlink that splices directories in
    bottom = root.joinpath(*["d"] * MAX_PATH_DEPTH)
    (bottom / "x").mkdir()
    (bottom / "x" / "g").write_text("g")
    (root / "s").symlink_to(deep.rstrip("/"))
    fails("INVALID_ARGUMENT", ws.read_file, "s/x/g")
    fails("INVALID_ARGUMENT", ws.edit_file, "s/x/g", "rewrite", content="y")
    assert (bottom / "x" / "g").read_text() == "g"


def test_a_path_ending_with_slash_dot_names_a_directory(ws: Workspace, root: Path) -> None:
    # "new/." was taken as "new": a create made a *file* named "new", and "f/." read and
    # rewrote the file "f"; the path says it is a directory, as "new/" and "f/" do.
    (root / "f").write_text("x")
    (root / "d").mkdir()
    fails("NOT_A_DIRECTORY", ws.read_file, "f/.")
    fails("NOT_A_DIRECTORY", ws.edit_file, "f/.", "rewrite", content="y")
    fails("NOT_A_DIRECTORY", ws.patch_file, "f/.", "@@\n-x\n+y\n")
    fails("NOT_FOUND", ws.read_file, "missing/.")
    err = fails("INVALID_ARGUMENT", ws.edit_file, "newdir/.", "create", content="y")
    assert "names a directory" in err.message
    fails("INVALID_ARGUMENT", ws.edit_file, "n1/n2/.", "create", content="y")
    fails("ALREADY_EXISTS", ws.edit_file, "d/.", "create", content="y")
    assert ws.read_file("d/.")["kind"] == "directory" and ws.read_file(".")["kind"] == "directory"
    assert (root / "f").read_text() == "x" and sorted(p.name for p in root.iterdir()) == ["d", "f"]


def test_paths_through_proc_magic_links_are_refused(ws: Workspace, root: Path, outside: Path, tmp_path: Path) -> None:
    # /proc/self/root, /proc/self/cwd and /proc/self/fd/N are links the kernel resolves by itself;
    # the walk never goes through them: absolute ones are judged by their text, and a link in
    # the workspace to one leads outside (even one that ends inside the workspace again).
    real = os.path.realpath(root)
    (root / "f").write_text("top secret")
    for path in (f"/proc/self/root{real}/f", f"/proc/self/root{outside}/secret.txt", "/proc/self/cwd/f",
                 "/proc/thread-self/root/etc/hostname"):
        assert_refused(ws, path, tmp_path)
    fd = os.open(outside, os.O_RDONLY | os.O_DIRECTORY)
    try:
        (root / "l_fd").symlink_to(f"/proc/self/fd/{fd}")
        (root / "l_root").symlink_to(f"/proc/self/root{outside}")
        (root / "l_back").symlink_to(f"/proc/self/root{real}")
        (root / "l_rel").symlink_to(os.path.relpath("/proc/self/root", root) + str(outside))
        for link in ("l_fd", "l_root", "l_back", "l_rel"):
            assert_refused(ws, f"{link}/secret.txt", tmp_path)
            assert_refused(ws, f"{link}/f", tmp_path)
    finally:
        os.close(fd)
