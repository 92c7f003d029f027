"""HTML: the page's main content as Markdown, without its navigation, footers and banners.

Readability-style, on the parser we already use (selectolax; docs/decisions/0212): drop what is
never content (scripts, forms, nav, footers, cookie and consent banners, ARIA landmarks that are
not the main one, link farms), keep `<main>` / `[role=main]` / a lone `<article>` when the page
marks one, then walk what is left into headings, paragraphs, lists and Markdown tables. The
page's `<title>` and canonical URL are kept on the result.
"""

from __future__ import annotations

import codecs
import re

from selectolax.lexbor import LexborHTMLParser, LexborNode

from worker.pipeline.formats import common

_DROP_TAGS = ["script", "style", "noscript", "template", "svg", "nav", "iframe", "object", "head",
              "form", "button", "select", "input", "textarea", "dialog", "canvas", "audio",
              "video", "footer", "aside"]
_ROLES = ", ".join([
    "[role=navigation]", "[role=banner]", "[role=contentinfo]", "[role=search]",
    "[role=complementary]", "[role=dialog]", "[role=alertdialog]", "[aria-hidden=true]",
    "[hidden]", "[aria-modal=true]",
])
_DROP_CSS = ", ".join([*_DROP_TAGS, _ROLES])
# class/id words that name page furniture; matched against whole words of the attribute, so
# "page-header" or "headline" never match, and "cookie-banner" or "navfooter" do.
_FURNITURE_WORDS = """
cookie cookies consent gdpr cmp nav navbar navheader navfooter navigation menu menubar breadcrumb
breadcrumbs footer sidebar share sharing social newsletter subscribe subscription advert
advertisement adsbygoogle promo skip skiplink skipnav toc masthead
"""
_FURNITURE = frozenset(_FURNITURE_WORDS.split())
_WORDS = re.compile(r"[a-z]+")
# Never removed for their class or id: the page's own skeleton, and inline text.
_NEVER_FURNITURE_NAMES = """
body html main article a span em strong b i u code small abbr cite label time sup sub mark img
h1 h2 h3 h4 h5 h6 p
"""
_NEVER_FURNITURE = frozenset(_NEVER_FURNITURE_NAMES.split())
_ID_WORDS = 3
_LINK_FARMS = "ul, ol, dl, menu, table, div, p"
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_BLOCK_TAG_NAMES = """
address article blockquote body caption dd details div dl dt fieldset figcaption figure header
hgroup hr li main menu ol p section summary tbody tfoot thead ul
"""
_BLOCKS = frozenset(_BLOCK_TAG_NAMES.split())
_META_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?\s*([A-Za-z0-9_:.\-]+)", re.IGNORECASE)
# WHATWG: browsers read a declared Latin-1 or ASCII as windows-1252 (pages are written for
# browsers), and a UTF-16 declaration in ASCII-compatible bytes as UTF-8.
_DECLARED_OVERRIDES = {"iso8859-1": "cp1252", "ascii": "cp1252", "utf-16": "utf-8"}


def read(data: bytes, limits: common.Limits) -> common.Doc:
    return read_text(decode(data), main_content=True)


def read_text(markup: str, *, main_content: bool) -> common.Doc:
    """Markdown blocks of ``markup``; ``main_content`` also narrows to the page's main part."""
    tree = LexborHTMLParser(markup)
    doc = common.Doc(title=_title(tree) or None, url=_canonical(tree))
    body = tree.body
    if body is None:
        return doc
    root = _strip_furniture(tree, body) if main_content else body
    if not main_content:
        tree.strip_tags(["script", "style", "noscript", "template", "svg", "head"])
    doc.add(*_Walker().walk(root).blocks)
    if doc.title and main_content and root.css_first("h1") is None:
        doc.blocks.insert(0, common.heading(1, doc.title))
    return doc


def decode(data: bytes) -> str:
    encoding = common.bom_encoding(data) or _meta_charset(data[:1024]) or "utf-8"
    return data.decode(encoding, errors="replace")


def _meta_charset(head: bytes) -> str | None:
    match = _META_CHARSET.search(head)
    if not match:
        return None
    try:
        name = codecs.lookup(match.group(1).decode("ascii")).name
    except LookupError:
        return None
    return _DECLARED_OVERRIDES.get(name.removesuffix("-le").removesuffix("-be"), name)


def _title(tree: LexborHTMLParser) -> str:
    title = tree.head.css_first("title") if tree.head is not None else None
    return common.collapse(title.text()) if title is not None else ""


def _canonical(tree: LexborHTMLParser) -> str | None:
    link = tree.css_first("link[rel=canonical]")
    href = link.attributes.get("href") if link is not None else None
    if not href:
        meta = tree.css_first('meta[property="og:url"]')
        href = meta.attributes.get("content") if meta is not None else None
    return href.strip() if href and href.strip().startswith(("http://", "https://")) else None


def _strip_furniture(tree: LexborHTMLParser, body: LexborNode) -> LexborNode:
    """Choose the main part first, then remove what is never content, never an ancestor of it.

    The order matters (issue 33): a news page wrapped its `<main>` in a `div` whose class holds
    "nav" (`i-nav_drawer_slide…`), and removing furniture first removed the article with it.
    """
    main = body.css_first("main, [role=main]")
    articles = body.css("article") if main is None else []
    root = main if main is not None else articles[0] if len(articles) == 1 else body
    keep = _lineage(root)
    total = len(body.text(deep=True)) if root is body else 0
    doomed = [node for node in body.css(_DROP_CSS) if node.mem_id not in keep]
    doomed += [node for node in body.css("[class], [id]")
               if node.mem_id not in keep and _is_furniture(node)
               # without a marked main part, a "menu" holding most of the page is its content
               and not (total and len(node.text(deep=True)) * 2 > total)]
    _decompose_outermost(doomed)
    # A link farm: a list, table or block that is mostly links (menus, tag clouds, prev/next).
    # Innermost first (reverse document order), so no node is visited after an ancestor went.
    for node in reversed(root.css(_LINK_FARMS)):
        if node.mem_id not in keep and _is_link_farm(node):
            node.decompose()
    return root


def _lineage(node: LexborNode) -> set[int]:
    """``node`` and its ancestors: what no furniture rule may remove."""
    kept: set[int] = set()
    current: LexborNode | None = node
    while current is not None:
        kept.add(current.mem_id)
        current = current.parent
    return kept


def _decompose_outermost(nodes: list[LexborNode]) -> None:
    """Decompose each node unless an ancestor goes too (a destroyed node must not be touched)."""
    doomed = {node.mem_id for node in nodes}
    for node in nodes:
        parent = node.parent
        while parent is not None and parent.mem_id not in doomed:
            parent = parent.parent
        if parent is None:
            node.decompose()


def _is_furniture(node: LexborNode) -> bool:
    """A block whose class, or whose short id, names page furniture.

    Inline elements are never furniture by name (a heading's `a.toc-backref` is its text), and
    a long id is a heading's slug, not a role: `id="sharing-with-a-single-developer"` is a
    section of a manual, not a share bar (readability's mercurial page lost half its text).
    """
    if node.tag in _NEVER_FURNITURE:
        return False
    attributes = node.attributes
    words = _WORDS.findall((attributes.get("class") or "").lower())
    id_words = _WORDS.findall((attributes.get("id") or "").lower())
    if len(id_words) <= _ID_WORDS:
        words += id_words
    return not _FURNITURE.isdisjoint(words)


def _is_link_farm(node: LexborNode) -> bool:
    links = node.css("a")
    if len(links) < 3:
        return False
    text = len("".join(node.text().split()))
    linked = sum(len("".join(a.text().split())) for a in links)
    return text == 0 or linked / text > 0.7


class _Walker:
    """Flattens a DOM subtree into Markdown blocks.

    Iterative rather than recursive so that absurdly nested markup cannot hit the recursion
    limit. Inline text accumulates until a block boundary flushes it; a heading or list item
    sets the prefix that the next non-empty flush carries.
    """

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self._inline: list[str] = []
        self._prefix = ""
        self._lists = 0  # how deep in nested lists we are

    def walk(self, root: LexborNode) -> _Walker:
        stack: list[tuple[LexborNode, bool]] = [(root, False)]
        while stack:
            node, leaving = stack.pop()
            if leaving:
                self._flush()
                if node.tag in _HEADINGS or node.tag == "li":
                    self._prefix = ""  # an empty heading or item must not label the next block
                if node.tag in ("ul", "ol", "menu"):
                    self._lists -= 1
            elif self._visit(node):
                if node.tag in _HEADINGS or node.tag in _BLOCKS:
                    stack.append((node, True))
                if node.tag in ("ul", "ol", "menu"):
                    self._lists += 1
                children = list(node.iter(include_text=True))
                stack.extend((child, False) for child in reversed(children))
        self._flush()
        return self

    def _visit(self, node: LexborNode) -> bool:
        """Handle ``node``; True when its children still need walking."""
        tag = node.tag or ""
        if tag == "-text":
            # A newline in the source is a space on the page; <br> is the explicit break.
            self._inline.append((node.text_content or "").replace("\n", " "))
        elif tag == "br":
            self._inline.append("\n")
        elif tag == "table":
            self._flush()
            self._table(node)
        elif tag == "pre":
            self._flush()
            self.blocks.append(node.text().strip("\n"))
        elif tag in _HEADINGS or tag in _BLOCKS:
            self._flush()
            if tag in _HEADINGS:
                self._prefix = "#" * _HEADINGS[tag] + " "
            elif tag == "li":
                self._prefix = "  " * max(0, self._lists - 1) + "- "
            return True
        else:
            return not tag.startswith("-")  # comments, doctype and the like carry no text
        return False

    def _flush(self) -> None:
        text = common.collapse("".join(self._inline))
        self._inline.clear()
        if text:
            if self._prefix.startswith("#"):
                text = common.one_line(text)
            self.blocks.append(self._prefix + text)
            self._prefix = ""

    def _table(self, node: LexborNode) -> None:
        rows = [[_cell_text(cell) for cell in _cells(row)] for row in _rows(node)]
        if max((len(row) for row in rows), default=0) > 1:
            self.blocks.append(common.table(rows))
            return
        # A one-column table is layout, not data: its cells are ordinary blocks.
        for row in _rows(node):
            for cell in _cells(row):
                self.blocks.extend(_Walker().walk(cell).blocks)


def _rows(table: LexborNode) -> list[LexborNode]:
    """The table's own rows, not those of tables nested in its cells."""
    rows: list[LexborNode] = []
    stack = list(table.iter())
    while stack:
        node = stack.pop(0)
        if node.tag == "tr":
            rows.append(node)
        elif node.tag in ("thead", "tbody", "tfoot"):
            stack[:0] = list(node.iter())
    return rows


def _cells(row: LexborNode) -> list[LexborNode]:
    return [cell for cell in row.iter() if cell.tag in ("td", "th")]


def _cell_text(cell: LexborNode) -> str:
    return " ".join(block.lstrip("#- ") for block in _Walker().walk(cell).blocks)
