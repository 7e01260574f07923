"""Workspace browsing, executor side (tools.files.browse through the Workspace facade): listing
with gitignore, .git and credential marks, the 50,000-entry cap, and text pages."""

from __future__ import annotations

import os
from pathlib import Path

from tools.files import Workspace
from tools.files.browse import MAX_ENTRIES
from tools.files.sensitive import sensitive_name

from .helpers import fails


def names(listing: dict) -> list[str]:
    return [e["path"] for e in listing["entries"]]


def test_a_listing_shows_kinds_sizes_and_hides_git_and_ignored_entries(ws: Workspace, root: Path, outside: Path):
    (root / ".git" / "info").mkdir(parents=True)
    (root / ".git" / "config").write_text("[remote]\n")
    (root / ".git" / "info" / "exclude").write_text("excluded.txt\n")
    (root / ".gitignore").write_text("*.log\nnode_modules/\n")
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print(1)\n")
    (root / "app.log").write_text("x")
    (root / "excluded.txt").write_text("x")
    (root / "node_modules" / "pkg").mkdir(parents=True)
    os.symlink(str(outside), root / "outlink")
    os.mkfifo(root / "pipe")
    listing = ws.browse_list(".")
    assert listing["path"] == "." and listing["truncated"] is False and listing["ignored"] is False
    assert {e["name"]: (e["kind"], e["size"], e["ignored"], e["sensitive"]) for e in listing["entries"]} == {
        ".gitignore": ("file", 20, False, False), "outlink": ("symlink", None, False, False),
        "pipe": ("other", None, False, False), "src": ("directory", None, False, False)}
    assert listing["ignored_hidden"] == 3  # app.log, excluded.txt, node_modules
    everything = ws.browse_list(".", depth=3, include_ignored=True)
    assert names(everything) == [".gitignore", "app.log", "excluded.txt", "node_modules", "outlink", "pipe", "src",
                                 "node_modules/pkg", "src/main.py"]
    assert [e["path"] for e in everything["entries"] if e["ignored"]] == ["app.log", "excluded.txt", "node_modules",
                                                                         "node_modules/pkg"]
    # a symlink is listed, never entered (even one to a directory inside)
    os.symlink("src", root / "srclink")
    assert "srclink/main.py" not in names(ws.browse_list(".", depth=5))
    fails("PATH_HIDDEN", ws.browse_list, ".git")
    fails("PATH_HIDDEN", ws.browse_list, ".git/info")
    fails("NOT_A_DIRECTORY", ws.browse_list, "src/main.py")
    fails("NOT_FOUND", ws.browse_list, "nope")
    fails("PATH_OUTSIDE_WORKSPACE", ws.browse_list, "outlink")
    fails("PATH_OUTSIDE_WORKSPACE", ws.browse_list, "../ws-evil")


def test_listing_an_ignored_directory_says_so_and_nested_rules_apply(ws: Workspace, root: Path):
    (root / ".gitignore").write_text("build/\n")
    (root / "build" / "out").mkdir(parents=True)
    (root / "build" / "out" / "a.o").write_text("x")
    (root / "pkg").mkdir()
    (root / "pkg" / ".gitignore").write_text("*.tmp\n!keep.tmp\n")
    for n in ("x.tmp", "keep.tmp"):
        (root / "pkg" / n).write_text("x")
    inside = ws.browse_list("build")
    assert inside["ignored"] is True and inside["entries"] == [] and inside["ignored_hidden"] == 1
    assert names(ws.browse_list("build", depth=2, include_ignored=True)) == ["build/out", "build/out/a.o"]
    assert names(ws.browse_list("pkg")) == ["pkg/.gitignore", "pkg/keep.tmp"]
    assert names(ws.browse_list(".", depth=2)) == [".gitignore", "pkg", "pkg/.gitignore", "pkg/keep.tmp"]


def test_depth_goes_level_by_level(ws: Workspace, root: Path):
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "z.txt").write_text("")
    (root / "a" / "b" / "c" / "deep.txt").write_text("")
    assert names(ws.browse_list(".")) == ["a", "z.txt"]
    assert names(ws.browse_list(".", depth=2)) == ["a", "z.txt", "a/b"]
    assert names(ws.browse_list(".", depth=4)) == ["a", "z.txt", "a/b", "a/b/c", "a/b/c/deep.txt"]
    assert names(ws.browse_list("a/b/")) == ["a/b/c"]
    fails("INVALID_ARGUMENT", ws.browse_list, ".", depth=0)
    fails("INVALID_ARGUMENT", ws.browse_list, ".", depth=65)
    fails("INVALID_ARGUMENT", ws.browse_list, ".", max_entries=MAX_ENTRIES + 1)
    fails("INVALID_ARGUMENT", ws.browse_list, ".", include_ignored="yes")


def _many(directory: Path, count: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        os.close(os.open(directory / f"f{i:06d}", os.O_CREAT | os.O_WRONLY, 0o644))


def test_the_cap_is_exactly_50000_entries(ws: Workspace, root: Path):
    assert MAX_ENTRIES == 50_000
    _many(root / "d", MAX_ENTRIES - 1)  # with "d" itself: exactly 50,000 entries at depth 2
    full = ws.browse_list(".", depth=2)
    assert len(full["entries"]) == 50_000 and full["truncated"] is False
    _many(root / "d2", 0)  # one more: 50,001
    over = ws.browse_list(".", depth=2)
    assert len(over["entries"]) == 50_000 and over["truncated"] is True
    assert [e["path"] for e in over["entries"][:2]] == ["d", "d2"]  # the top level first
    assert over["entries"][-1]["path"] == "d/f049997"
    small = ws.browse_list("d", max_entries=3)
    assert names(small) == ["d/f000000", "d/f000001", "d/f000002"] and small["truncated"] is True


def test_credential_files_are_marked_and_never_read(ws: Workspace, root: Path):
    for n in (".env", ".env.local", ".ENV", ".envrc", "server.pem", "TLS.KEY", "id_rsa", "id_ed25519",
              "store.p12", ".netrc", ".npmrc"):
        (root / n).write_text("SECRET=1\n")
    (root / "id_rsa.pub").write_text("ssh-rsa AAAA\n")
    (root / "keys").mkdir()
    os.symlink("../.env", root / "keys" / "innocent.txt")
    (root / ".env.d").mkdir()
    (root / ".env.d" / "plain.txt").write_text("SECRET=2\n")
    listing = ws.browse_list(".")
    marks = {e["name"]: e["sensitive"] for e in listing["entries"]}
    assert marks.pop("id_rsa.pub") is False and marks.pop("keys") is False
    assert all(marks.values()), marks
    for n in (".env", ".env.local", ".ENV", "server.pem", "TLS.KEY", "id_rsa", ".netrc", "./.env", "keys/../.env",
              "keys/innocent.txt", ".env.d/plain.txt"):
        err = fails("SENSITIVE_FILE", ws.browse_read, n)
        assert "SECRET" not in err.message
    assert ws.browse_read("id_rsa.pub")["text"] == "ssh-rsa AAAA\n"
    assert not sensitive_name("environment.txt") and not sensitive_name("keys") and sensitive_name("A.Pem")


def test_credential_stores_of_common_tools_and_their_directories_are_never_read(ws: Workspace, root: Path):
    # A home directory's credential directories copied or linked into a workspace, and the files
    # cloud and infrastructure tools keep their secrets in: listed, marked, never read.
    for d in (".ssh", ".aws", ".gnupg", ".docker", ".kube", ".AWS"):
        (root / d).mkdir()
    files = {".ssh/config": "Host x\n", ".aws/config": "[default]\n", ".AWS/other": "x\n", ".gnupg/trustdb.txt": "x\n",
             ".docker/config.json": "{}\n", ".kube/config": "apiVersion: v1\n", "credentials": "[default]\n",
             "credentials.json": "{}\n", "Credentials.JSON": "{}\n", "prod.tfvars": "x = 1\n",
             "terraform.tfstate": "{}\n", "terraform.tfstate.backup": "{}\n"}
    for n, text in files.items():
        (root / n).write_text("SECRET " + text)
    marks = {e["path"]: e["sensitive"] for e in ws.browse_list(".", depth=2)["entries"]}
    for n in [".ssh", ".aws", ".gnupg", ".docker", ".kube", *files]:
        if n != "terraform.tfstate.backup":
            assert marks[n] is True, n
    for n in files:
        if n != "terraform.tfstate.backup":
            assert "SECRET" not in fails("SENSITIVE_FILE", ws.browse_read, n).message
    # (the rule is by name: a backup's name ends otherwise, and near names are not credentials)
    assert ws.browse_read("terraform.tfstate.backup")["text"].startswith("SECRET")
    assert not any(sensitive_name(n) for n in ("credentials.py", "my_credentials", "aws", "ssh", "kube.yaml", "docs.tf"))


def test_text_pages_by_bytes_never_split_a_character(ws: Workspace, root: Path):
    (root / "t.txt").write_bytes("a€b\n".encode())  # € is 3 bytes: offsets 1..3
    assert ws.browse_read("t.txt") == {"path": "t.txt", "size": 6, "offset": 0, "next_offset": 6, "eof": True,
                                       "text": "a€b\n"}
    page = ws.browse_read("t.txt", offset=0, limit=2)
    assert (page["text"], page["next_offset"], page["eof"]) == ("a", 1, False)
    page = ws.browse_read("t.txt", offset=1, limit=1)  # one character longer than the limit: whole
    assert (page["text"], page["next_offset"]) == ("€", 4)
    assert ws.browse_read("t.txt", offset=6)["text"] == "" and ws.browse_read("t.txt", offset=6)["eof"] is True
    fails("INVALID_ARGUMENT", ws.browse_read, "t.txt", offset=2)
    fails("INVALID_ARGUMENT", ws.browse_read, "t.txt", offset=7)
    fails("INVALID_ARGUMENT", ws.browse_read, "t.txt", limit=0)
    fails("INVALID_ARGUMENT", ws.browse_read, "t.txt", limit=1024 * 1024 + 1)
    (root / "bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (root / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    fails("BINARY_FILE", ws.browse_read, "bin")
    fails("BINARY_FILE", ws.browse_read, "latin1.txt")
    (root / "quote.txt").write_bytes("\u201chi\u201d\n".encode("cp1252"))  # opens with 0x93, a continuation byte
    assert "byte 0" in fails("BINARY_FILE", ws.browse_read, "quote.txt").message
    fails("NOT_A_FILE", ws.browse_read, ".")
    fails("NOT_FOUND", ws.browse_read, "missing.txt")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("url = https://user:token@example.com\n")
    fails("PATH_HIDDEN", ws.browse_read, ".git/config")
    os.symlink(".git/config", root / "gitlink")
    fails("PATH_HIDDEN", ws.browse_read, "gitlink")


def test_a_walk_stops_when_its_caller_went_away(ws: Workspace, root: Path):
    for i in range(300):
        (root / f"d{i:03d}").mkdir()
    assert len(ws.browse_list(".", depth=2)["entries"]) == 300
    ws.still_wanted = lambda: False
    fails("CANCELLED", ws.browse_list, ".", depth=2)
    assert len(ws.browse_list(".")["entries"]) == 300  # one directory: nothing to stop


def test_one_huge_directory_is_stopped_as_it_is_read(ws: Workspace, root: Path):
    # The caller was asked only between directories: a listing inside one directory of millions
    # of entries read all of them for a caller long gone. Now it is asked every ASK_EVERY units
    # of work (the directory itself counts ASK_DIRECTORY_WEIGHT, each entry 1).
    from tools.files.browse import ASK_DIRECTORY_WEIGHT, ASK_EVERY

    asked: list[bool] = []
    ws.still_wanted = lambda: asked.append(True) or False
    just_under = ASK_EVERY - ASK_DIRECTORY_WEIGHT - 1
    for i in range(just_under):
        (root / f"f{i:05d}").touch()
    assert len(ws.browse_list(".", max_entries=10)["entries"]) == 10 and asked == []
    (root / "one-more").touch()  # exactly ASK_EVERY: asked, and the caller is gone
    fails("CANCELLED", ws.browse_list, ".", max_entries=10)
    assert asked == [True]
    ws.still_wanted = lambda: True
    assert ws.browse_list(".", max_entries=10)["truncated"] is True


def test_a_cut_listing_of_a_large_directory_keeps_the_first_names_in_bounded_memory(ws: Workspace, root: Path):
    import random
    import tracemalloc

    (root / ".gitignore").write_text("*.log\n")
    small, big = root / "small", root / "big"
    small.mkdir()
    big.mkdir()
    for i in range(11):
        (small / f"f{i:05d}.txt").touch()
    names_made = [f"f{i:05d}.txt" for i in range(6000)] + [f"g{i:03d}.log" for i in range(300)]
    random.Random(7).shuffle(names_made)
    for name in names_made:
        (big / name).touch()

    def peak_of(path: str) -> tuple[dict, int]:
        tracemalloc.start()
        try:
            listing = ws.browse_list(path, max_entries=10)
            return listing, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    _, small_peak = peak_of("small")
    listing, big_peak = peak_of("big")
    assert names(listing) == [f"big/f{i:05d}.txt" for i in range(10)]
    assert listing["truncated"] is True
    assert listing["ignored_hidden"] == 300  # (every ignored entry of the directory, also past the cut)
    # holding one DirEntry per name would add ~1 MB here; the cut keeps eleven whatever the size
    assert big_peak - small_peak < 100_000, (small_peak, big_peak)
    whole = ws.browse_list("big", max_entries=6000)
    assert whole["truncated"] is False and len(whole["entries"]) == 6000
    assert names(whole) == sorted(names(whole))
    cut = ws.browse_list("big", max_entries=5999)
    assert cut["truncated"] is True and names(cut) == names(whole)[:5999]
