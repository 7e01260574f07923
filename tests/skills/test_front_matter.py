"""SKILL.md front matter (F-TOOL-6): the small stdlib parser and how a skill is made of it."""

from __future__ import annotations

import hashlib

import pytest

from tools.skills import MAX_NAME_CHARS, FrontMatterError, _skill_of, parse_front_matter


def test_no_front_matter_is_all_body() -> None:
    assert parse_front_matter("# Title\nbody\n") == ({}, "# Title\nbody\n")
    assert parse_front_matter("") == ({}, "")
    assert parse_front_matter("text\n---\nname: x\n---\n") == ({}, "text\n---\nname: x\n---\n")


def test_plain_quoted_and_commented_values() -> None:
    text = ("---\n"
            "# a comment\n"
            "name: review\n"
            "description: Review a change # not part of it\n"
            "quoted: \"a: b \\\"c\\\" \\u00e9\"\n"
            "single: 'it''s # kept'\n"
            "\n"
            "empty_quoted: \"\"\n"
            "---\n"
            "Body line\n")
    fields, body = parse_front_matter(text)
    assert fields == {"name": "review", "description": "Review a change", "quoted": 'a: b "c" é',
                      "single": "it's # kept", "empty_quoted": ""}
    assert body == "Body line\n"


def test_crlf_bom_continuations_blocks_and_nested_maps() -> None:
    text = ("\ufeff---\r\n"
            "name: deploy\r\n"
            "description: first part\r\n"
            "  second part\r\n"
            "literal: |\r\n"
            "  line one\r\n"
            "    indented\r\n"
            "folded: >\r\n"
            "  a\r\n"
            "  b\r\n"
            "metadata:\r\n"
            "  version: 1\r\n"
            "  tags: [x, y]\r\n"
            "...\r\n"
            "Do it.\r\n")
    fields, body = parse_front_matter(text)
    assert fields["name"] == "deploy"
    assert fields["description"] == "first part second part"
    assert fields["literal"] == "line one\n  indented"
    assert fields["folded"] == "a b"
    assert fields["metadata"] == "version: 1\ntags: [x, y]"
    assert body == "Do it.\r\n"


@pytest.mark.parametrize("text, says", [
    ("---\nname: x\n", "never closed"),
    ("---\nname x\n---\nbody", "line 2: expected 'key: value'"),
    ("---\n  indented: 1\n---\nbody", "line 2: an indented line before any key"),
    ("---\nname: a\nname: b\n---\nbody", "line 3: the key 'name' appears twice"),
    ("---\ndescription: \"open\n---\nbody", "line 2: the double-quoted value of 'description'"),
    ("---\ndescription: \"bad \\q escape\"\n---\nbody", "line 2: the double-quoted value"),
    ("---\ndescription: 'open\n---\nbody", "line 2: the single-quoted value of 'description' is not closed"),
    ("---\ndescription: 'a'b'\n---\nbody", "not closed"),
    ("---\nname: \"x\"\n  more\n---\nbody", "line 3: an indented line after a quoted value"),
])
def test_malformed_front_matter_names_the_line(text: str, says: str) -> None:
    with pytest.raises(FrontMatterError) as info:
        parse_front_matter(text)
    assert says in str(info.value)


def test_a_skill_is_named_by_front_matter_or_by_its_directory() -> None:
    text = "---\nname: reviewer\ndescription: Reviews\n  code\n---\n\nSteps.\n"
    s = _skill_of("skills/review", "review", text)
    assert (s.name, s.description, s.problem, s.body) == ("reviewer", "Reviews code", None, "Steps.")
    assert s.digest == hashlib.sha256(text.encode()).hexdigest()
    bare = _skill_of("skills/lint", "lint", "Just do lint.\n")
    assert (bare.name, bare.description, bare.problem, bare.body) == ("lint", "", None, "Just do lint.")


def test_bad_skills_carry_a_problem_never_raise() -> None:
    bad = _skill_of("skills/x", "x", "---\nname: x\n")
    assert bad.name == "x" and "front matter" in (bad.problem or "") and "never closed" in (bad.problem or "")
    assert "not valid" in (_skill_of("skills/x", "x", "---\nname: two words\n---\nbody").problem or "")
    assert "not valid" in (_skill_of("skills/x", "x", "---\nname: -dash\n---\nbody").problem or "")
    assert "no instructions" in (_skill_of("skills/x", "x", "---\nname: x\n---\n\n  \n").problem or "")
    ok = "a" * MAX_NAME_CHARS
    assert _skill_of("skills/x", "x", f"---\nname: {ok}\n---\nbody").problem is None
    long = _skill_of("skills/x", "x", f"---\nname: {ok}b\n---\nbody")
    assert "not valid" in (long.problem or "") and len(long.name) == MAX_NAME_CHARS
    assert _skill_of("skills/x", "x", "---\nname: My_skill.v2\n---\nbody").problem is None


def test_yaml_shapes_once_refused_or_misread() -> None:
    # "--- " opens as "---" does; a block sequence at the key's indentation; a key with a blank.
    assert parse_front_matter("--- \nname: x\n---\nB\n") == ({"name": "x"}, "B\n")
    fields, body = parse_front_matter("---\ntools:\n- Read\n-\n- Grep\n  # kept\nname: x\n---\nB\n")
    assert fields == {"tools": "- Read\n-\n- Grep\n  # kept", "name": "x"} and body == "B\n"
    assert parse_front_matter("---\nallowed tools: Read\n---\nB")[0] == {"allowed tools": "Read"}
    with pytest.raises(FrontMatterError, match="line 3: expected 'key: value'"):
        parse_front_matter("---\nname: x\n- stray\n---\nB")  # (a sequence item after a value)
    # CRLF: the body keeps its own line ends but not a trailing carriage return
    assert _skill_of("skills/x", "x", "---\r\nname: x\r\n---\r\nA\r\nB\r\n").body == "A\r\nB"


def test_lone_carriage_returns_end_lines_as_in_yaml() -> None:
    # (classic Mac line ends: the front matter was taken for instructions)
    fields, body = parse_front_matter("---\rname: mac\rdescription: |\r  kept\r---\rA\rB\r")
    assert fields == {"name": "mac", "description": "kept"} and body == "A\rB\r"
    assert parse_front_matter("---\r\nname: x\r\n---\r\nA\r\n") == ({"name": "x"}, "A\r\n")  # (CRLF as before)
    assert parse_front_matter("---\nname: x\n---") == ({"name": "x"}, "")
