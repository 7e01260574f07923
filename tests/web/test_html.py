"""HTML to Markdown and to text (tools/web/html.py)."""

from __future__ import annotations

from html.parser import HTMLParser

from hypothesis import given, settings
from hypothesis import strategies as st

from tools.web import html as html_module
from tools.web.html import MAX_DEPTH, to_markdown, to_text

PAGE = """<!doctype html><html><head><title>The  Title</title><style>p { color: red }</style>
<script>document.write("<p>never</p>")</script><meta charset="utf-8"></head>
<body><h1>Hello <em>world</em></h1><h3>Third</h3>
<p>Some   text with a <a href="../rel/page?a=1">relative link</a>, an <a href="https://other.example/x">absolute
one</a> and <a href="#frag">a fragment</a>.<p>Second para<br>line two
<ul><li>one<li>two <b>bold</b><ul><li>nested a</li><li>nested b</li></ul></li><li>three</ul>
<ol start=3><li>c</li><li>d</li></ol>
<pre><code class="language-python">def f():
    return 1  # keep   spaces</code></pre>
<p>Inline <code>x = `y`</code> here. <img src="img.png" alt="pic"></p>
<blockquote><p>quoted</p></blockquote>
<table><tr><th>A</th><th>B</th></tr><tr><td>1</td><td>2|3</td></tr></table>
<noscript>hidden</noscript><template><p>template</p></template><a href="javascript:alert(1)">js</a>
</body></html>"""


def test_markdown() -> None:
    md, title = to_markdown(PAGE, "https://site.example/dir/sub/index.html")
    assert title == "The Title"
    assert md == """# Hello *world*

### Third

Some text with a [relative link](https://site.example/dir/rel/page?a=1), an [absolute one](https://other.example/x) and [a fragment](https://site.example/dir/sub/index.html#frag).

Second para
line two

- one
- two **bold**

  - nested a
  - nested b
- three

3. c
4. d

```python
def f():
    return 1  # keep   spaces
```

Inline `` x = `y` `` here. ![pic](https://site.example/dir/sub/img.png)

> quoted

| A | B |
| --- | --- |
| 1 | 2\\|3 |

js"""


def test_text() -> None:
    text, title = to_text(PAGE)
    assert title == "The Title"
    assert "never" not in text and "color" not in text and "hidden" not in text and "template" not in text
    assert "<" not in text.replace("<p>", "")  # no tags
    assert text.startswith("Hello world\n\nThird\n\nSome text with a relative link, an absolute one and a fragment.")
    assert "    return 1  # keep   spaces" in text  # pre keeps its whitespace
    assert "A\tB\n1\t2|3" in text


def test_base_href_is_honoured_and_unsafe_links_dropped() -> None:
    md, _ = to_markdown('<base href="/docs/"><a href="x.html">x</a> <a href="data:text/html,hi">d</a> '
                        '<a href="vbscript:x">v</a>', "https://h.example/a/b")
    assert md == "[x](https://h.example/docs/x.html) d v"


def test_an_unusable_base_href_is_ignored() -> None:
    md, _ = to_markdown('<base href="http://[::1"><a href="x">x</a> <a href="http://[bad">b</a>', "https://h.example/a/")
    assert md == "[x](https://h.example/a/x) b"


def test_backslashes_in_links_name_the_host_a_browser_would_open() -> None:
    md, _ = to_markdown('<a href="\\\\other.example\\x">o</a> <a href="/\\other.example/y">p</a> <a href="a\\b">q</a>',
                        "https://h.example/d/")
    assert md == "[o](https://other.example/x) [p](https://other.example/y) [q](https://h.example/d/a/b)"
    md, _ = to_markdown('<base href="\\\\cdn.example\\base\\"><a href="x">x</a>', "https://h.example/")
    assert md == "[x](https://cdn.example/base/x)"


def test_a_head_never_closed_hides_nothing_of_the_body() -> None:
    md, title = to_markdown("<html><head><title>t</title><body><p>body text</p>", "https://h.example/")
    assert (md, title) == ("body text", "t")


def test_entities_and_nul() -> None:
    md, _ = to_markdown("<p>a &amp; b &lt;c&gt; &#233; \x00 z</p>", "https://h.example/")
    assert md == "a & b <c> é \ufffd z"


def test_deep_nesting_is_flattened_not_a_crash() -> None:
    depth = MAX_DEPTH * 50
    md, _ = to_markdown("<div>" * depth + "deep" + "</div>" * depth, "https://h.example/")
    assert md == "deep"
    md, _ = to_markdown("<ul><li>" * depth + "x", "https://h.example/")
    assert md.strip().endswith("x")


def test_unclosed_cells_and_items() -> None:
    md, _ = to_markdown("<table><tr><td>a<td>b<tr><td>c</table><dl><dt>t<dd>d</dl>", "https://h.example/")
    assert md == "| a | b |\n| --- | --- |\n| c |  |\n\nt\n\nd"


def test_nul_in_attributes_cannot_forge_a_slot() -> None:
    md, _ = to_markdown('<ul><li>a</li></ul><a href="x\x000\x00">t</a><img alt="\x005\x00" src="i">', "https://h.example/")
    assert md == "- a\n\n[t](https://h.example/x\ufffd0\ufffd)![\ufffd5\ufffd](https://h.example/i)"


HTML_TOKENS = ["<p>", "</p>", "<ul>", "<li>", "</li>", "</ul>", "<ol start=x>", "<pre>", "</pre>", "<code>",
               "</code>", "<table>", "<tr>", "<td>", "<th>", "</table>", "<blockquote>", "</blockquote>", "<a href='",
               "'>", "</a>", "<img src=", " alt='", "<h2>", "</h2>", "<br>", "<hr/>", "<script>", "</script>",
               "<head>", "<title>", "<base href='", "<b>", "</i>", "&amp;", "&#0;", "&#x110000;", "\x00", "\n", " ",
               "`", "```", "|", "[", "]", "x", "é", "<!--", "-->", "<!doctype html>", "<", ">", "\"", "'"]


@given(st.lists(st.sampled_from(HTML_TOKENS), max_size=80))
@settings(max_examples=300)
def test_any_markup_converts_without_failing(tokens: list[str]) -> None:
    page = "".join(tokens)
    md, _ = to_markdown(page, "https://h.example/a/")
    text, _ = to_text(page)
    assert "\x00" not in md and "\x00" not in text


# The tree builder overrides two methods of the stdlib's HTMLParser that are not its documented
# interface (``goahead``, ``check_for_whole_start_tag``) to skip a scan a start tag with no ">"
# after it costs. Its trees must be those of the parser left as it is: this pins that on the
# Python the suite runs, so a change of those internals fails here, not in a page read wrong.
START_TAG_TOKENS = ["<", "<a", "<a ", "<p x=", "<b", "</", ">", "/", "/>", " ", "x", "=", '"', "'", "!", "-",
                    "\n", "title", "<title>", "&amp;", "é", "<!--", "<script>", "</script>", "text"]


class _Stock(html_module._TreeBuilder):
    """The same builder with the stdlib parser's own methods where ours override them."""

    def goahead(self, end: bool) -> None:
        HTMLParser.goahead(self, end)  # type: ignore[attr-defined]

    def check_for_whole_start_tag(self, i: int) -> int:
        return HTMLParser.check_for_whole_start_tag(self, i)  # type: ignore[attr-defined]


def _tree(builder: HTMLParser) -> object:
    def dump(n: object) -> object:
        if isinstance(n, str):
            return n
        assert isinstance(n, html_module.Node)
        return n.tag, sorted(n.attrs.items()), [dump(c) for c in n.children]

    return dump(builder.root), builder.title  # type: ignore[attr-defined]


def _built(cls: type, page: str) -> object:
    builder = cls()
    builder.feed(page)
    builder.close()
    return _tree(builder)


@given(st.lists(st.sampled_from(START_TAG_TOKENS), max_size=30))
@settings(max_examples=2000)
def test_the_start_tag_shortcut_builds_the_stdlib_parsers_tree(tokens: list[str]) -> None:
    page = "".join(tokens)
    assert _built(html_module._TreeBuilder, page) == _built(_Stock, page), page


def test_the_start_tag_shortcut_on_pages_that_end_inside_a_tag() -> None:
    for page in ["<a x", "<a x y=\"1\" <b>c", "text <p x='1' z", "<a<a<a x", "<title>t</title><a b=c d", "<a/", "<a /x"]:
        assert _built(html_module._TreeBuilder, page) == _built(_Stock, page), page
