"""gitignore semantics (tools.files.gitignore) against what gitignore(5) says, and against git
itself (``git check-ignore``) when git is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.files.browse import list_tree
from tools.files.confine import Root
from tools.files.gitignore import Rules, parse, parse_line


def rules(*files: tuple[str, str]) -> Rules:
    r = Rules()
    for base, text in files:
        r = r.child(base, text)
    return r


def ignored(r: Rules, path: str, is_dir: bool = False) -> bool:
    """As a walk decides it: a path under an ignored directory is ignored."""
    parts = path.split("/")
    above = False
    for i in range(1, len(parts)):
        above = r.ignored("/".join(parts[:i]), True, above)
    return r.ignored(path, is_dir, above)


def test_comments_blanks_and_escapes():
    assert parse("# comment\n\n   \n") == []
    r = rules(("", "\\#hash\n\\!bang\ntrail   \nkeep\\ \n"))
    assert ignored(r, "#hash") and ignored(r, "!bang")
    assert ignored(r, "trail") and not ignored(r, "trail   ")
    assert ignored(r, "keep ") and not ignored(r, "keep")


def test_a_name_without_slash_matches_at_any_depth_and_a_slash_anchors():
    r = rules(("", "build\n/top.txt\ndocs/*.md\n"))
    assert ignored(r, "build", True) and ignored(r, "a/b/build", True) and ignored(r, "a/build")
    assert ignored(r, "top.txt") and not ignored(r, "a/top.txt")
    assert ignored(r, "docs/x.md") and not ignored(r, "a/docs/x.md") and not ignored(r, "docs/sub/x.md")


def test_directory_only_patterns_and_what_lies_below_an_ignored_directory():
    r = rules(("", "out/\n"))
    assert ignored(r, "out", True) and not ignored(r, "out", False)
    assert ignored(r, "out/file.txt") and ignored(r, "a/out/deep/x", False)


def test_negation_re_includes_but_never_below_an_excluded_directory():
    r = rules(("", "*.log\n!keep.log\n"))
    assert ignored(r, "a.log") and not ignored(r, "keep.log") and not ignored(r, "x/keep.log")
    r = rules(("", "logs/\n!logs/keep.log\n"))
    assert ignored(r, "logs/keep.log")  # git: cannot re-include a file if its parent is excluded
    r = rules(("", "logs/*\n!logs/keep.log\n"))
    assert not ignored(r, "logs/keep.log") and ignored(r, "logs/other.log")


def test_double_star_forms():
    r = rules(("", "**/cache\nsrc/**/gen\nlib/**\na**b\n"))
    assert ignored(r, "cache") and ignored(r, "x/y/cache", True)
    assert ignored(r, "src/gen") and ignored(r, "src/a/b/gen") and not ignored(r, "other/src/gen")
    assert ignored(r, "lib/x") and ignored(r, "lib/x/y") and not ignored(r, "lib", True)
    assert ignored(r, "aXXb") and not ignored(r, "a/b")  # "**" not beside a slash is "*"


def test_wildcards_never_cross_a_slash_and_classes():
    r = rules(("", "a?c\n/x*z\n[abc].txt\n[!0-9]n.md\n"))
    assert ignored(r, "abc") and not ignored(r, "a/c")
    assert ignored(r, "xyz") and not ignored(r, "x/z", False)
    assert ignored(r, "b.txt") and not ignored(r, "d.txt")
    assert ignored(r, "an.md") and not ignored(r, "1n.md")
    # as git's wildmatch: a class it cannot close (or an unknown [:name:], a trailing backslash)
    # makes the line match nothing, "[" included
    for line in ("[unclosed", "a[!]b", "[[:bogus:]]x", "x\\"):
        assert parse_line(line) is not None and not ignored(rules(("", line + "\n")), line.replace("\\", ""))
    assert not ignored(rules(("", "[unclosed\n")), "[unclosed")


def test_posix_classes_and_ranges_as_git_reads_them():
    r = rules(("", "[[:digit:]]*.log\n[z-a]\nx[[:upper:][:space:]]y\n[a-c-e]z\n[]-a]m\nq[[:digit]]\n"))
    assert ignored(r, "1.log") and not ignored(r, "a.log")
    assert ignored(r, "z") and not ignored(r, "m")  # a reversed range holds its first character only
    assert ignored(r, "xAy") and ignored(r, "x y") and not ignored(r, "xay")
    assert [n for n in ("az", "bz", "dz", "ez", "-z") if ignored(r, n)] == ["az", "bz", "ez", "-z"]
    assert [n for n in ("]m", "^m", "am", "bm") if ignored(r, n)] == ["]m", "^m", "am"]
    assert ignored(r, "q:]") and ignored(r, "q[]") and not ignored(r, "q1")  # no ":]": "[" is itself


def test_nested_files_apply_below_their_directory_and_override_those_above():
    r = rules(("", "*.tmp\n"), ("sub", "!keep.tmp\n/only-here\n"))
    assert ignored(r, "x.tmp") and ignored(r, "sub/x.tmp")
    assert not ignored(r, "sub/keep.tmp") and ignored(r, "keep.tmp")
    assert ignored(r, "sub/only-here") and not ignored(r, "only-here") and not ignored(r, "sub/d/only-here")


def test_matching_is_case_sensitive():
    r = rules(("", "Build\n"))
    assert ignored(r, "Build") and not ignored(r, "build")


# --------------------------------------------------------------------------- against git itself

GITIGNORE = """\
# generated
*.log
!important.log
build/
/root-only.txt
docs/**/draft.md
**/cache
lib/**
tmp*
!tmp-keep
a?c.txt
[xy]z.txt
weird\\ name
[[:digit:]]*.dat
[z-a]q
x[[:upper:][:space:]]y
[a-c-e]w
open[x
[!]v
"""
NESTED = "!*.log\nlocal.txt\n/anchored.txt\n"
PATHS = [
    ("a.log", False), ("important.log", False), ("sub/a.log", False), ("sub/important.log", False),
    ("build", True), ("build/x.o", False), ("src/build", True), ("src/build/y", False), ("build.txt", False),
    ("root-only.txt", False), ("sub/root-only.txt", False), ("docs/draft.md", False),
    ("docs/a/b/draft.md", False), ("other/docs/draft.md", False), ("cache", True), ("x/y/cache", True),
    ("lib/z.py", False), ("lib/a/b.py", False), ("tmpfile", False), ("tmp-keep", False), ("abc.txt", False),
    ("a/c.txt", False), ("xz.txt", False), ("zz.txt", False), ("weird name", False), ("weird", False),
    ("sub/local.txt", False), ("local.txt", False), ("sub/anchored.txt", False), ("sub/deeper/anchored.txt", False),
    ("sub/deeper/x.log", False), ("plain.txt", False),
    ("1a.dat", False), ("a1.dat", False), ("zq", False), ("mq", False), ("xAy", False), ("x y", False),
    ("xay", False), ("bw", False), ("dw", False), ("-w", False), ("open[x", False), ("]v", False), ("kv", False),
]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_same_answers_as_git_check_ignore(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True)
    (repo / ".gitignore").write_text(GITIGNORE)
    (repo / "sub").mkdir()
    (repo / "sub" / ".gitignore").write_text(NESTED)
    for path, is_dir in PATHS:
        p = repo / path
        if is_dir:
            p.mkdir(parents=True, exist_ok=True)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("x")
    names = [p for p, _ in PATHS]
    # (core.excludesFile unset: a user's global excludes must not change git's answers)
    out = subprocess.run(["git", "-c", "core.excludesFile=", "check-ignore", "--no-index", "--stdin"],
                         cwd=repo, input="\n".join(names) + "\n", capture_output=True, text=True)
    assert out.returncode in (0, 1), out.stderr
    by_git = set(out.stdout.splitlines())
    r = rules(("", GITIGNORE), ("sub", NESTED))
    ours = {p for p, is_dir in PATHS if ignored(r, p, is_dir)}
    assert ours == by_git, {"only ours": sorted(ours - by_git), "only git": sorted(by_git - ours)}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_byte_order_mark_and_lines_split_at_newlines_only_as_git_reads_them(tmp_path: Path):
    # git skips a UTF-8 byte-order mark at the start of an ignore file and splits lines at "\n"
    # alone (dropping one "\r" before it): the mark made the first line match nothing, and a
    # form feed, a lone "\r", U+0085 or U+2028 inside a line split it into two patterns, which
    # hid files the line does not name.
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True)
    text = "\ufeff*.log\none\x0ctwo\nthree\rfour\nfive\x85six\nseven\u2028eight\nnine\r\r\n"
    (repo / ".gitignore").write_bytes(text.encode())
    names = ["a.log", "one", "two", "one\x0ctwo", "three", "four", "five", "six", "five\x85six", "seven", "eight",
             "seven\u2028eight", "nine", "nine\r"]
    for name in names:
        (repo / name).write_text("x")
    out = subprocess.run(["git", "-c", "core.excludesFile=", "-c", "core.quotePath=false", "check-ignore",
                          "--no-index", "-z", "--stdin"], cwd=repo, input=("\0".join(names) + "\0").encode(),
                         capture_output=True)  # (bytes: text mode would turn a "\r" into "\n")
    assert out.returncode in (0, 1), out.stderr
    by_git = set(out.stdout.decode().split("\0")) - {""}
    assert "a.log" in by_git and "one\x0ctwo" in by_git and "one" not in by_git  # (what git does)
    r = rules(("", text))
    ours = {n for n in names if ignored(r, n)}
    assert ours == by_git, {"only ours": sorted(ours - by_git), "only git": sorted(by_git - ours)}


def _one_at_a_time(r: Rules, path: str, is_dir: bool) -> bool:
    """What Rules.ignored answered before it matched patterns a group at a time."""
    for p in reversed(r.patterns):
        if p.dir_only and not is_dir:
            continue
        if p.matches(path):
            return not p.negated
    return False


_PIECES = ["a", "b", "ab", "*", "?", "[ab]", "**", "x.log", "*.log"]
_LINE = st.builds(lambda neg, lead, parts, slash: ("!" if neg else "") + ("/" if lead else "") + "/".join(parts)
                  + ("/" if slash else ""),
                  st.booleans(), st.booleans(), st.lists(st.sampled_from(_PIECES), min_size=1, max_size=3), st.booleans())
_PATH = st.lists(st.sampled_from(["a", "b", "ab", "x.log", "ba", "sub"]), min_size=1, max_size=4).map("/".join)


@settings(max_examples=200, deadline=None)
@given(top=st.lists(_LINE, min_size=17, max_size=60), nested=st.lists(_LINE, max_size=40),  # (groups of 16 and up)
       paths=st.lists(st.tuples(_PATH, st.booleans()), min_size=1, max_size=20))
def test_groups_of_patterns_answer_as_the_patterns_one_at_a_time(top: list[str], nested: list[str],
                                                               paths: list[tuple[str, bool]]) -> None:
    for r in (rules(("", "\n".join(top))), rules(("", "\n".join(top)), ("sub", "\n".join(nested)))):
        for path, is_dir in paths:
            assert r.ignored(path, is_dir) == _one_at_a_time(r, path, is_dir), (path, is_dir)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_names_and_patterns_beyond_ascii_match_byte_for_byte_as_git_matches_them(tmp_path: Path):
    # git's wildmatch compares bytes: "?" is one byte (so not "é", two bytes in UTF-8), a class
    # holds bytes ("[é]x" is no "éx"), and a line of a .gitignore that is not UTF-8 names the file
    # of those very bytes. They were matched as characters: "?" hid "é", "[é]x" hid "éx", and a
    # Latin-1 line ("caf\xe9.txt", its byte read as U+FFFD) never hid the file it names.
    import os

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True)
    text = "?\n[é]x\n???.md\nz[!a]\nw[à-á]\n".encode() + b"caf\xe9.txt\nn\xc3\n"
    (repo / ".gitignore").write_bytes(text)
    names = [n.encode() for n in ("é", "a", "éx", "ex", "abc.md", "été.md", "ét.md", "zé", "zb", "wà", "wá", "wâ")]
    names += [b"caf\xe9.txt", "café.txt".encode(), b"n\xc3", "nÃ".encode()]
    for name in names:
        fd = os.open(os.fsencode(repo) + b"/" + name, os.O_CREAT | os.O_WRONLY)
        os.close(fd)
    out = subprocess.run(["git", "-c", "core.excludesFile=", "check-ignore", "--no-index", "-z", "--stdin"],
                         cwd=repo, input=b"\0".join(names) + b"\0", capture_output=True)
    assert out.returncode in (0, 1), out.stderr
    by_git = set(out.stdout.split(b"\0")) - {b""}
    assert b"a" in by_git and "é".encode() not in by_git and b"caf\xe9.txt" in by_git  # (what git does)
    r = rules(("", text.decode("utf-8", "surrogateescape")))
    ours = {n for n in names if ignored(r, os.fsdecode(n))}  # (a name as os.scandir gives it)
    assert ours == by_git, {"only ours": sorted(ours - by_git), "only git": sorted(by_git - ours)}
    # and as a listing reads the .gitignore and the names (a name not UTF-8 shown with U+FFFD)
    listed = list_tree(Root(repo), ".", include_ignored=True)["entries"]
    shown = {os.fsencode(n).decode("utf-8", "replace"): n for n in names}
    assert {shown[e["name"]] for e in listed if e["ignored"]} == by_git, listed
