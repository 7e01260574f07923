"""docs/ptc.md: its limits, quoted errors, builtins and methods, against the interpreter.

Read as a user reads the page: what it shows is taken from its own text where that is robust,
so that the page and the code drifting apart fail here (see test_docs_examples.py)."""

from __future__ import annotations

import re

from .docs_pages import PTC, one_match, section_of


def _ptc_number(text: str) -> int:
    text = text.replace(",", "")
    return int(text.split()[0]) * 2**20 if text.endswith("MiB") else int(text)


def test_the_ptc_limits_table_and_numbers_are_the_code_s():
    from tools.ptc import tool
    from tools.ptc.interpreter import _MESSAGE_CHARS, MAX_INT_BITS, Limits

    table = section_of(PTC, "## Limits").split("\n\n", 1)[0]
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| ([\d,]+(?: MiB)?) \|", table, re.M))
    assert set(rows) == set(Limits.__dataclass_fields__), rows
    assert {k: _ptc_number(v) for k, v in rows.items()} == vars(Limits())
    default, lo, hi = (int(n.replace(",", "")) for n in
                       one_match(r"`timeout_ms` \(default ([\d,]+), ([\d,]+)–([\d,]+)\)", PTC).groups())
    assert (default, lo, hi) == (tool.DEFAULT_TIMEOUT_MS, 1, tool.MAX_TIMEOUT_MS)
    assert _ptc_number(one_match(r"what the program printed \(at most (1 MiB)\)", PTC).group(1)) == Limits().max_output_bytes
    assert int(one_match(r"the images the calls returned \(at most (\d+)\)", PTC).group(1)) == tool.MAX_IMAGES
    bits = _ptc_number(one_match(r"may not exceed ([\d,]+) bits \(`2 \*\* 9999`", PTC).group(1))
    assert bits == MAX_INT_BITS
    assert _ptc_number(one_match(r"a message longer than ([\d,]+) characters is cut", PTC).group(1)) == _MESSAGE_CHARS


async def _run(code: str):
    from tools.ptc.interpreter import run_program

    async def no_tools(name: str, args: dict) -> object:
        raise AssertionError(name)

    return await run_program(code, no_tools, [])


async def test_the_ptc_limits_hold_at_and_one_past_them_with_the_page_s_codes():
    """The program's size (exactly the limit accepted), the integer bits (``2 ** 9999`` fine,
    ``2 ** 10000`` not), and each code the errors table names for them."""
    from tools.ptc.interpreter import Limits

    codes = dict(re.findall(r"^\| `(PTC_[A-Z_]+)` \| ([^|]*) \|", section_of(PTC, "## Errors"), re.M))
    assert len(codes) == 12, codes
    size = Limits().max_code_bytes
    filler = "x = 1\n"
    program = filler * (size // len(filler)) + "#" * (size % len(filler))
    assert len(program.encode()) == size
    assert (await _run(program)).error is None
    out = await _run(program + "#")
    assert out.error is not None and out.error.code == "PTC_CODE_TOO_LARGE" and "PTC_CODE_TOO_LARGE" in codes
    fine, refused = one_match(r"\(`(2 \*\* \d+)` is\s+fine, `(2 \*\* \d+)` is not\)", PTC).groups()
    assert (await _run(f"x = {fine}")).error is None
    out = await _run(f"x = {refused}")
    assert out.error is not None and out.error.code == "PTC_VALUE_TOO_LARGE", out.error
    assert "an integer over 10,000 bits" in codes["PTC_VALUE_TOO_LARGE"]
    quoted = {code: re.findall(r'"([^"]*\(line \d+\))"', when) for code, when in codes.items()}
    assert quoted["PTC_NAME_ERROR"] == ["name 'x' is not defined (line 2)"]
    out = await _run("y = 1\nprint(x)")
    assert (out.error.code, out.error.message) == ("PTC_NAME_ERROR", quoted["PTC_NAME_ERROR"][0])
    out = await _run("y = 1\n\nimport os")
    assert (out.error.code, out.error.message) == ("PTC_NOT_ALLOWED", quoted["PTC_NOT_ALLOWED"][0]), out.error.message
    out = await _run("d = {}\n\n\nd['x']")
    assert (out.error.code, out.error.message) == ("PTC_RUNTIME", quoted["PTC_RUNTIME"][0]), out.error.message
    out = await _run("\n" * 8 + "raise ValueError('bad input')")
    assert (out.error.code, out.error.message) == ("PTC_UNCAUGHT", quoted["PTC_UNCAUGHT"][0]), out.error.message


def test_the_ptc_builtins_and_methods_are_exactly_the_page_s():
    """The builtins table and the method lists of ptc.md are the interpreter's, both ways."""
    from tools.ptc import interpreter

    table = section_of(PTC, "## Builtins")
    listed = set()
    for first_cell in re.findall(r"^\| ([^|]*) \|", table, re.M):
        listed |= set(re.findall(r"`([A-Za-z_]+)(?:\(|`)", first_cell))
    listed -= {"Builtin"}
    known = set(interpreter._BUILTINS) | set(interpreter._ERROR_CLASSES)
    assert listed == known, (sorted(listed - known), sorted(known - listed))
    methods = section_of(PTC, "## Methods")
    for kind, names in (("str", interpreter._STR_METHODS), ("list", interpreter._LIST_METHODS),
                        ("dict", interpreter._DICT_METHODS), ("set", interpreter._SET_METHODS)):
        said = one_match(rf"^- `{kind}`: `([a-z\s]+)`", methods, re.M).group(1).split()
        assert set(said) == set(names), (kind, sorted(set(said) ^ set(names)))
