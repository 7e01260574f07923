"""HTML to Markdown and to plain text, for ``web_fetch`` (stdlib ``html.parser`` only).

The page is parsed into a small tree (forgiving, as browsers are: unclosed ``<p>``/``<li>``/
``<td>`` end where the next one starts, stray end tags are ignored, nesting is held to
:data:`MAX_DEPTH`), then rendered:

- ``markdown``: headings (``#``), paragraphs, links ``[text](url)`` and images ``![alt](url)``
  with their URLs resolved against the page's final URL (or its ``<base href>``), ``-`` and
  ``1.`` lists (nested by indentation), fenced ``pre`` blocks, inline ``code``, ``**strong**``,
  ``*em*``, ``>`` block quotes, ``|`` tables, ``---`` rules.
- ``text``: the same blocks with no markup at all.

Both drop what a reader never sees: ``script``, ``style``, ``noscript``, ``template``, ``head``
(its ``<title>`` is returned apart), ``svg``, ``iframe`` and the like. Whitespace is collapsed
outside ``pre``.

A page is anyone's input, and the stdlib parser has slow paths: it scans from a ``<`` to the end of
the page whenever no ``>`` closes the construct, so a page of ``<!<!<!…`` costs one scan per
``<`` (1 MiB took minutes, 5 MiB hours). (A start tag with no ``>`` after it anywhere is known
incomplete without the regex's scan, 0.6 s for 5 MiB of ``<a x``: what is left of such a step is
the parser's ``find`` of the next ``>``, under a millisecond.) The work therefore takes a ``check``, a
function called wherever the parser starts a construct and wherever the renderer starts a node,
which raises to end the work: ``web_fetch`` passes ``trio.from_thread.check_cancelled``, so the
thread the conversion runs in ends at its next check once the call's scope is cancelled (its
deadline, or the call itself cancelled), and the call waits for it. Between two checks is one
step of the parser: at most a scan of the page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Callable
from urllib.parse import urlsplit

from .address import join

MAX_DEPTH = 200  # deeper elements are flattened into their ancestor at this depth

VOID = frozenset("area base br col embed hr img input keygen link meta param source track wbr".split())
HIDDEN = frozenset("script style noscript template head svg math iframe object embed canvas audio video "
                   "select datalist dialog".split())
BLOCK = frozenset("address article aside blockquote details dialog dd div dl dt fieldset figcaption figure "
                  "footer form h1 h2 h3 h4 h5 h6 header hgroup hr li main nav ol p pre section summary table "
                  "tbody thead tfoot tr td th caption ul body html center".split())
HEADINGS = {f"h{i}": i for i in range(1, 7)}
_WS = re.compile(r"[ \t\n\r\f\v]+")
_SPACES = re.compile(r" {2,}")
_NEWLINES = re.compile(r"\n{3,}")
_SLOT = re.compile("\x00(\\d+)\x00")
_BAD_SCHEMES = ("javascript:", "vbscript:", "data:")


Check = Callable[[], None]  # raises to stop the conversion; returns to let it go on


def _go_on() -> None:
    """The check of a conversion nothing stops."""


@dataclass
class Node:
    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list["Node | str"] = field(default_factory=list)


class _TreeBuilder(HTMLParser):
    def __init__(self, check: Check = _go_on) -> None:
        super().__init__(convert_charrefs=True)
        self.check = check
        self._last_gt = -1  # where the last ">" of what is still to parse is
        self.root = Node("#root")
        self.stack: list[Node] = [self.root]
        self.title: list[str] = []
        self.base: str | None = None
        self._in_title = False

    def _close(self, tag: str, stop: frozenset[str]) -> None:
        """Close an open ``tag`` unless an element of ``stop`` is nearer (the implied end tags)."""
        for i in range(len(self.stack) - 1, 0, -1):
            name = self.stack[i].tag
            if name == tag:
                del self.stack[i:]
                return
            if name in stop:
                return

    def goahead(self, end: bool) -> None:  # (feed and close: the text still to parse is rawdata)
        self._last_gt = self.rawdata.rfind(">")
        super().goahead(end)  # type: ignore[misc]

    # Every construct the parser reads starts in one of these; each may scan to the end of the
    # page (see the module's docstring), so the check is made before each.
    def parse_starttag(self, i: int) -> int:
        self.check()
        return super().parse_starttag(i)

    def check_for_whole_start_tag(self, i: int) -> int:
        # With no ">" after it, a start tag is incomplete (-1) whatever its regex finds, or it
        # ends at a character that ends no attribute and is read as text: the page's end reads
        # it as text up to the next "<" either way. The regex's scan to the page's end is skipped.
        if self._last_gt < i:
            return -1
        return super().check_for_whole_start_tag(i)

    def parse_endtag(self, i: int) -> int:
        self.check()
        return super().parse_endtag(i)

    def parse_html_declaration(self, i: int) -> int:
        self.check()
        return super().parse_html_declaration(i)

    def parse_pi(self, i: int) -> int:
        self.check()
        return super().parse_pi(i)

    def parse_comment(self, i: int, report: int = 1) -> int:
        self.check()
        return super().parse_comment(i, report)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag == "base" and self.base is None:
            self.base = (dict(attrs).get("href") or "").replace("\x00", "") or None
        if tag == "li":
            self._close("li", frozenset({"ul", "ol", "menu"}))
        elif tag in ("dt", "dd"):
            self._close("dt", frozenset({"dl"}))
            self._close("dd", frozenset({"dl"}))
        elif tag == "tr":
            self._close("tr", frozenset({"table"}))
        elif tag in ("td", "th"):
            self._close("td", frozenset({"tr", "table"}))
            self._close("th", frozenset({"tr", "table"}))
        elif tag in ("thead", "tbody", "tfoot"):
            for section in ("thead", "tbody", "tfoot"):
                self._close(section, frozenset({"table"}))
        if tag == "body" or tag in BLOCK:
            self._close("head", frozenset())  # (a <head> never closed would hide the whole page)
        if tag in BLOCK and self.stack[-1].tag == "p":
            self.stack.pop()  # a block ends an open paragraph
        node = Node(tag, {k: (v or "").replace("\x00", "\ufffd") for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID and len(self.stack) < MAX_DEPTH:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID and self.stack[-1].tag == tag and len(self.stack) > 1:
            self.stack.pop()  # <div/>: (XHTML) an empty element

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.check()
        data = data.replace("\x00", "\ufffd")  # (NUL marks the renderer's slots)
        if self._in_title:
            self.title.append(data)
        self.stack[-1].children.append(data)


@dataclass
class Page:
    root: Node
    title: str
    base: str | None


def parse(html: str, check: Check = _go_on) -> Page:
    """The page's tree. Raises what ``check`` raises."""
    builder = _TreeBuilder(check)
    builder.feed(html)
    builder.close()
    return Page(builder.root, _WS.sub(" ", "".join(builder.title)).strip(), builder.base)


def to_markdown(html: str, url: str, check: Check = _go_on) -> tuple[str, str]:
    """(markdown, title) of ``html`` fetched from ``url`` (the final URL, after redirects).
    Raises what ``check`` raises."""
    page = parse(html, check)
    return _Renderer(True, _base_url(page, url), check).document(page.root), page.title


def to_text(html: str, check: Check = _go_on) -> tuple[str, str]:
    """(plain text, title) of ``html``. Raises what ``check`` raises."""
    page = parse(html, check)
    return _Renderer(False, "", check).document(page.root), page.title


def _base_url(page: Page, url: str) -> str:
    if page.base:
        try:
            base = join(url, page.base.strip())
            if urlsplit(base).scheme in ("http", "https"):
                return base
        except ValueError:  # (an unusable <base href> is ignored, as a browser does)
            pass
    return url


class _Renderer:
    """Renders a tree; finished blocks (lists, quotes, pre, tables) are kept in ``slots`` and
    stand in the text as ``\\0<n>\\0`` until the end, so whitespace clean-up never touches them."""

    def __init__(self, markdown: bool, base: str, check: Check = _go_on) -> None:
        self.md = markdown
        self.base = base
        self.check = check
        self.slots: list[str] = []

    def document(self, root: Node) -> str:
        return self.finish(self.children(root))

    # -- whitespace and slots

    def slot(self, text: str) -> str:
        self.slots.append(text)
        return f"\n\n\x00{len(self.slots) - 1}\x00\n\n"

    def finish(self, text: str) -> str:
        """Lines trimmed, spaces collapsed, at most one blank line in a row, slots filled in."""
        lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
        out = _NEWLINES.sub("\n\n", "\n".join(lines)).strip("\n")
        # (one pass: a slot's text was finished when it was made, so it holds no slot; NUL from
        # the page was replaced when parsed, so every marker is one of ours)
        return _SLOT.sub(lambda m: self.slots[int(m.group(1))], out)

    @staticmethod
    def oneline(text: str) -> str:
        return _SPACES.sub(" ", text.replace("\n", " ")).strip()

    # -- nodes

    def children(self, node: Node) -> str:
        return "".join(self.render(c) for c in node.children)

    def render(self, node: Node | str) -> str:
        self.check()
        if isinstance(node, str):
            return _WS.sub(" ", node)
        tag = node.tag
        if tag in HIDDEN or tag == "title":
            return ""
        if tag in HEADINGS:
            inner = self.oneline(self.finish(self.children(node)))
            if not inner:
                return ""
            return f"\n\n{'#' * HEADINGS[tag]} {inner}\n\n" if self.md else f"\n\n{inner}\n\n"
        if tag == "br":
            return "\n"
        if tag == "hr":
            return "\n\n---\n\n" if self.md else "\n\n"
        if tag == "pre":
            return self.pre(node)
        if tag in ("ul", "ol", "menu"):
            return self.list(node)
        if tag == "blockquote":
            body = self.finish(self.children(node))
            if not body:
                return ""
            return self.slot("\n".join(f"> {line}".rstrip() for line in body.split("\n")) if self.md else body)
        if tag == "table":
            return self.table(node)
        if tag in BLOCK:
            return f"\n\n{self.children(node)}\n\n"
        if tag == "img":
            return self.image(node)
        inner = self.children(node)
        if not self.md:
            return inner
        if tag == "a":
            return self.link(node, inner)
        if tag == "code":
            return self.code(node)
        if tag in ("strong", "b"):
            return self.wrap(inner, "**")
        if tag in ("em", "i"):
            return self.wrap(inner, "*")
        return inner

    def wrap(self, inner: str, mark: str) -> str:
        text = self.oneline(inner)
        if not text:
            return inner
        lead = " " if inner[:1].isspace() else ""
        trail = " " if inner[-1:].isspace() else ""
        return f"{lead}{mark}{text}{mark}{trail}"

    def url(self, ref: str) -> str | None:
        ref = ref.strip()
        if not ref or ref.lower().startswith(_BAD_SCHEMES):
            return None
        try:
            return join(self.base, ref).replace(" ", "%20").replace(")", "%29").replace("(", "%28")
        except ValueError:
            return None

    def link(self, node: Node, inner: str) -> str:
        href = self.url(node.attrs.get("href", ""))
        text = self.oneline(self.finish(inner)) if "\n" in inner else self.oneline(inner)
        if href is None or not text:
            return inner
        text = text.replace("[", "\\[").replace("]", "\\]")
        lead = " " if inner[:1].isspace() else ""
        trail = " " if inner[-1:].isspace() else ""
        return f"{lead}[{text}]({href}){trail}"

    def image(self, node: Node) -> str:
        alt = self.oneline(_WS.sub(" ", node.attrs.get("alt", "")))
        if not self.md:
            return ""
        src = self.url(node.attrs.get("src", ""))
        if src is None:
            return alt
        return f"![{alt.replace('[', '(').replace(']', ')')}]({src})"

    def code(self, node: Node) -> str:
        text = self.oneline(_text_of(node))
        if not text:
            return ""
        fence = "`"
        while fence in text:
            fence += "`"
        pad = " " if text.startswith("`") or text.endswith("`") else ""
        return f"{fence}{pad}{text}{pad}{fence}"

    def pre(self, node: Node) -> str:
        text = _text_of(node).strip("\n")
        if not text.strip():
            return ""
        if not self.md:
            return self.slot(text)
        fence = "```"
        while fence in text:
            fence += "`"
        lang = ""
        for child in node.children:
            if isinstance(child, Node) and child.tag == "code":
                m = re.search(r"(?:language|lang)-([\w+#.-]+)", child.attrs.get("class", ""))
                lang = m.group(1) if m else ""
                break
        return self.slot(f"{fence}{lang}\n{text}\n{fence}")

    def list(self, node: Node) -> str:
        ordered = node.tag == "ol"
        try:
            number = int(node.attrs.get("start", "1"))
        except ValueError:
            number = 1
        items: list[str] = []
        loose: list[Node | str] = []  # content outside any <li> (stray text, a nested list)

        def flush_loose() -> None:
            body = self.finish("".join(self.render(c) for c in loose))
            loose.clear()
            if body:
                items.append(body)

        for child in node.children:
            if isinstance(child, Node) and child.tag == "li":
                flush_loose()
                body = self.finish(self.children(child))
                marker = (f"{number}. " if ordered else "- ") if self.md else ""
                number += 1
                pad = " " * len(marker)
                lines = body.split("\n") if body else [""]
                items.append("\n".join([marker + lines[0]] + [(pad + ln) if ln else ln for ln in lines[1:]]).rstrip())
            else:
                loose.append(child)
        flush_loose()
        items = [i for i in items if i.strip()]
        return self.slot("\n".join(items)) if items else ""

    def table(self, node: Node) -> str:
        rows: list[list[str]] = []
        for tr in _rows(node):
            cells = [self.oneline(self.finish(self.children(cell))) for cell in tr.children
                     if isinstance(cell, Node) and cell.tag in ("td", "th")]
            if cells:
                rows.append(cells)
        if not rows:
            return ""
        if not self.md:
            return self.slot("\n".join("\t".join(cells) for cells in rows))
        width = max(len(cells) for cells in rows)
        lines = []  # (the first row is the header row: a Markdown table needs one)
        for i, cells in enumerate(rows):
            cells = [c.replace("|", "\\|") for c in cells] + [""] * (width - len(cells))
            lines.append("| " + " | ".join(cells) + " |")
            if i == 0:
                lines.append("|" + " --- |" * width)
        caption = next((c for c in node.children if isinstance(c, Node) and c.tag == "caption"), None)
        head = self.oneline(self.finish(self.children(caption))) + "\n\n" if caption is not None else ""
        return self.slot(head + "\n".join(lines))


def _rows(table: Node) -> list[Node]:
    out: list[Node] = []
    for child in table.children:
        if isinstance(child, Node):
            if child.tag == "tr":
                out.append(child)
            elif child.tag in ("thead", "tbody", "tfoot"):
                out.extend(c for c in child.children if isinstance(c, Node) and c.tag == "tr")
    return out


def _text_of(node: Node) -> str:
    """The text of ``node`` exactly as written (``pre``, ``code``); ``<br>`` is a newline."""
    out: list[str] = []
    stack: list[Node | str] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif item.tag == "br":
            out.append("\n")
        elif item.tag not in HIDDEN:
            stack.extend(reversed(item.children))
    return "".join(out)
