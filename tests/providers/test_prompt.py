"""System prompt assembly (F-CTX-4): five sections, two AGENTS.md files, no upward walk."""

from __future__ import annotations

import dataclasses

from runtime.prompt import (
    DEFAULT_PREAMBLE,
    Cut,
    MAX_PROJECT_FILE_CHARS,
    ProjectFile,
    PromptInputs,
    SkillMeta,
    assemble,
    build_system_prompts,
    load_project_files,
    sections,
)


class FakeFs:
    """The injected reader: a dict of path -> text; records every path asked for."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.asked: list[str] = []

    async def __call__(self, path: str) -> str | Cut | None:
        self.asked.append(path)
        return self.files.get(path)


def test_sections_in_order_and_empty_ones_left_out():
    full = PromptInputs(project_files=[ProjectFile("~/.agents/AGENTS.md", "user rule"), ProjectFile("<workspace>/AGENTS.md", "repo rule")],
                        skills=[SkillMeta("review", "Review a change", "skills/review")], cwd="/w")
    assert [name for name, _ in sections(full)] == ["preamble", "rules", "project_context", "skills", "cwd"]
    text = assemble(full)
    assert text.startswith(DEFAULT_PREAMBLE)
    assert text.index("user rule") < text.index("repo rule") < text.index("- review: Review a change (skills/review)")
    assert text.endswith("Current working directory: /w")
    bare = PromptInputs(rules=(), project_files=(), skills=(), cwd=None)
    assert [name for name, _ in sections(bare)] == ["preamble"]
    assert assemble(full) == assemble(full)  # pure: a stable cache prefix


async def test_project_context_reads_exactly_the_two_files():
    fs = FakeFs({"/home/u/.agents/AGENTS.md": "Prefer tabs.", "/repo/AGENTS.md": "Run make test.",
                 "/AGENTS.md": "never read (no upward walk)", "/repo/sub/AGENTS.md": "never read either"})
    files = await load_project_files(fs, workspace="/repo", home="/home/u")
    assert fs.asked == ["/home/u/.agents/AGENTS.md", "/repo/AGENTS.md"]
    assert files == [ProjectFile("~/.agents/AGENTS.md", "Prefer tabs."), ProjectFile("<workspace>/AGENTS.md", "Run make test.")]
    system = (await build_system_prompts(fs, workspace="/repo", home="/home/u")).for_agent(True)
    assert len(system) == 1
    assert "Prefer tabs." in system[0] and "Run make test." in system[0] and "never read" not in system[0]
    assert "Current working directory: /repo" in system[0]
    assert "/home/u" not in system[0]  # the home path is shown as ~


async def test_missing_files_and_oversized_ones():
    fs = FakeFs({"/repo/AGENTS.md": "x" * (MAX_PROJECT_FILE_CHARS + 10)})
    system = (await build_system_prompts(fs, workspace="/repo/", home="/home/u", cwd="/repo/src")).for_agent(True)[0]
    assert "~/.agents/AGENTS.md" not in system
    assert "truncated" in system and f"the file has {MAX_PROJECT_FILE_CHARS + 10} characters" in system
    # A text as long as a reader's limit may be the beginning of a longer file: not its size.
    from runtime.prompt import READ_LIMIT_BYTES

    capped = FakeFs({"/repo/AGENTS.md": Cut("y" * READ_LIMIT_BYTES)})
    note = (await build_system_prompts(capped, workspace="/repo/", home=None, cwd="/repo")).for_agent(True)[0]
    assert f"the file has at least {READ_LIMIT_BYTES} characters" in note
    # (and a file of exactly the limit, read whole, is its size: cut is the reader's word, not a guess)
    whole = FakeFs({"/repo/AGENTS.md": "y" * READ_LIMIT_BYTES})
    note = (await build_system_prompts(whole, workspace="/repo/", home=None, cwd="/repo")).for_agent(True)[0]
    assert f"the file has {READ_LIMIT_BYTES} characters; read it for the rest]" in note, note[-200:]
    # A cut file of 4-byte characters fits the 65,536 characters: shown whole, and said to go on
    # (it was shown as if it were the whole file).
    emoji = FakeFs({"/repo/AGENTS.md": Cut("😀" * MAX_PROJECT_FILE_CHARS)})
    note = (await build_system_prompts(emoji, workspace="/repo/", home=None, cwd="/repo")).for_agent(True)[0]
    assert "😀" * MAX_PROJECT_FILE_CHARS + f"\n[… truncated: the file has at least {MAX_PROJECT_FILE_CHARS} " \
           "characters; read it for the rest]\n\n# Environment" in note, note[-200:]
    assert fs.asked == ["/home/u/.agents/AGENTS.md", "/repo/AGENTS.md"]
    assert "Current working directory: /repo/src" in system
    none = FakeFs({})
    assert await load_project_files(none, workspace=None, home=None) == [] and none.asked == []


async def test_whether_a_file_was_cut_is_judged_on_its_text_as_read_not_as_scrubbed():
    # The note says "at least N" when the read stopped at READ_LIMIT_BYTES. It was judged on the
    # text after the daemon's keys were replaced: a read cut in the middle of a key (whose start is
    # then left out) or a key longer than its marker made a cut file's count an exact size, and
    # markers longer than their keys made a file read whole "at least" its size.
    from events.secrets import Secrets
    from runtime.prompt import READ_LIMIT_BYTES

    key = "sk-live-" + "k" * 56  # (64 characters; its marker, "[redacted LENS_K]", is 17)
    secrets = Secrets({key: "LENS_K"})
    for name, text in (("a key's start at the end", "y" * (READ_LIMIT_BYTES - 20) + key[:20]),
                       ("a key inside", key + "y" * (READ_LIMIT_BYTES - len(key)))):
        fs = FakeFs({"/repo/AGENTS.md": Cut(text)})
        note = (await build_system_prompts(fs, workspace="/repo", home=None, secrets=secrets)).for_agent(True)[0]
        assert f"[… truncated: the file has at least {READ_LIMIT_BYTES} characters;" in note, (name, note[-200:])
        assert key[:8] not in note, (name, note[-200:])
    short = Secrets({"sk-12345": "A_VERY_LONG_VARIABLE_NAME_FOR_ITS_MARKER"})
    whole = "sk-12345 " * ((READ_LIMIT_BYTES - 100) // 9)  # (read whole: shorter than the limit)
    fs = FakeFs({"/repo/AGENTS.md": whole})
    note = (await build_system_prompts(fs, workspace="/repo", home=None, secrets=short)).for_agent(True)[0]
    # (counted on the text as read, 262,043 characters once stripped: the markers made it 1,514,031)
    assert "[redacted A_VERY_LONG_VARIABLE_NAME_FOR_ITS_MARKER] \n[… truncated: the file has 262043 characters; read it " \
           "for the rest]\n\n# Environment" in note, note[-300:]


async def test_both_forms_of_the_prompt_come_from_one_reading_and_differ_by_the_skills_section_alone():
    # An agent that cannot load a skill is sent the prompt less its skills listing; the full form
    # is the prompt as before (an agent that can load one keeps its cache prefix).
    fs = FakeFs({"/repo/AGENTS.md": "Run make test."})
    skills = [SkillMeta("review", "Review a change", "skills/review/SKILL.md")]
    both = await build_system_prompts(fs, workspace="/repo", home=None, skills=skills)
    assert fs.asked == ["/repo/AGENTS.md"]  # (read once for both)
    full = PromptInputs(project_files=[ProjectFile("<workspace>/AGENTS.md", "Run make test.")], skills=skills, cwd="/repo")
    without = dataclasses.replace(full, skills=())
    assert both.for_agent(True) == [assemble(full)] and both.for_agent(False) == [assemble(without)]
    assert [n for n, _ in sections(without)] == [n for n, _ in sections(full) if n != "skills"]
    mine = both.for_agent(False)
    mine.append("tampered")
    assert both.for_agent(False) == [assemble(without)]  # (each caller its own list)
    none = await build_system_prompts(fs, workspace="/repo", home=None)
    assert none.for_agent(True) == none.for_agent(False)  # no skills: one text for every agent
