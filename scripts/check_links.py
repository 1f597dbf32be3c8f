#!/usr/bin/env python3
"""Checks the relative links of the built book and of Markdown files.

    python3 scripts/check_links.py docs/book README.md ARCHITECTURE.md

A folder is a built HTML book: every href/src in its pages must lead to a
file (or folder) that exists, and a `#fragment` to an id the target page
has. A Markdown file is checked the same way from where it lies, with
GitHub's heading anchors. Links with a scheme (https:, mailto:, ...) are
not fetched: tests have no network. Prints one line per broken link on
stderr and exits 1 when there is any, 2 on a usage error.
`--self-test` checks the checker on pages it makes.
"""

import html.parser
import os
import re
import sys
import urllib.parse

# Scheme-qualified (https:, mailto:, data:, javascript:) and
# protocol-relative links point elsewhere.
EXTERNAL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*:|//)")


class Page(html.parser.HTMLParser):
    """The ids, the links and the <base> of one HTML page."""

    LINKING = {"a": "href", "link": "href", "img": "src", "script": "src", "iframe": "src", "source": "src"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []
        self.base = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        if tag == "base" and attrs.get("href"):
            self.base = attrs["href"]
        attr = self.LINKING.get(tag)
        if attr and attrs.get(attr) is not None:
            self.links.append((attrs[attr], self.getpos()[0]))

    handle_startendtag = handle_starttag


def parse_html(path):
    page = Page()
    with open(path, encoding="utf-8") as f:
        page.feed(f.read())
    page.close()
    return page


def github_slug(heading):
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def markdown_lines(text):
    """The lines of `text` outside fenced code blocks, with their numbers."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)[0] * len(m.group(1))
                continue
            if m.group(1).startswith(fence):
                fence = None
                continue
        if fence is None:
            yield number, line


def markdown_anchors(path):
    anchors, seen = set(), {}
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for _, line in markdown_lines(text):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = github_slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
        for m in re.finditer(r"""<a\s[^>]*(?:id|name)=["']([^"']+)["']""", line):
            anchors.add(m.group(1))
    return anchors


def markdown_links(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for number, line in markdown_lines(text):
        # Code spans hold examples, not links.
        line = re.sub(r"(`+).*?\1", "", line)
        for m in re.finditer(r"\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)", line):
            yield m.group(1), number
        m = re.match(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(\s|$)", line)
        if m:
            yield m.group(1), number
        for m in re.finditer(r"""<(?:a|img)\s[^>]*(?:href|src)=["']([^"']*)["']""", line):
            yield m.group(1), number


class Checker:
    def __init__(self):
        self.broken = []
        self.pages = {}
        self.checked = 0

    def anchors_of(self, path):
        path = os.path.realpath(path)
        if path not in self.pages:
            if path.endswith((".html", ".htm")):
                self.pages[path] = parse_html(path).ids
            elif path.endswith(".md"):
                self.pages[path] = markdown_anchors(path)
            else:
                self.pages[path] = None
        return self.pages[path]

    def check(self, source, line, link, base_dir, own_anchors):
        if not link or EXTERNAL.match(link):
            return
        self.checked += 1
        target, _, fragment = link.partition("#")
        target = urllib.parse.unquote(target.partition("?")[0])
        fragment = urllib.parse.unquote(fragment)
        where = f"{source}:{line}: {link}"
        if not target:
            if fragment and fragment not in own_anchors:
                self.broken.append(f"{where}: no #{fragment} in this page")
            return
        path = os.path.normpath(os.path.join(base_dir, target))
        if not os.path.exists(path):
            self.broken.append(f"{where}: {path} does not exist")
            return
        if os.path.isdir(path):
            if fragment:
                self.broken.append(f"{where}: #{fragment} on a folder")
            return
        if fragment:
            anchors = self.anchors_of(path)
            if anchors is not None and fragment not in anchors:
                self.broken.append(f"{where}: no #{fragment} in {path}")

    def html_tree(self, root):
        for folder, _, files in os.walk(root):
            for name in sorted(files):
                if not name.endswith((".html", ".htm")):
                    continue
                path = os.path.join(folder, name)
                page = parse_html(path)
                self.pages[os.path.realpath(path)] = page.ids
                base_dir = folder
                if page.base is not None and not EXTERNAL.match(page.base):
                    # mdBook's 404 page sets <base href="/">: the site's
                    # root, which is the book's folder.
                    if page.base.startswith("/"):
                        base_dir = os.path.join(root, page.base.lstrip("/"))
                    else:
                        base_dir = os.path.join(folder, page.base)
                elif page.base is not None:
                    continue  # resolved against another site
                for link, line in page.links:
                    self.check(path, line, link, base_dir, page.ids)

    def markdown(self, path):
        own = self.anchors_of(path)
        for link, line in markdown_links(path):
            self.check(path, line, link, os.path.dirname(path) or ".", own)


def self_test():
    """The checker finds what it must and nothing else, on pages made here
    (a checker that finds nothing would pass every book)."""
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        book = os.path.join(root, "book")
        os.makedirs(os.path.join(book, "sub"))
        pages = {
            "index.html": '<h1 id="top">x</h1><a href="sub/a.html#here">ok</a> <a href="sub/a.html#gone">bad anchor</a>'
            ' <a href="missing.html">bad file</a> <a href="#top">ok</a> <a href="#nope">bad own anchor</a>'
            ' <a href="https://example.invalid/x">external</a> <img src="sub/pic%20one.png">',
            "sub/a.html": '<p id="here"></p><a href="../index.html#top">ok</a> <script src="../gone.js"></script>',
            "sub/pic one.png": "",
            "404.html": '<base href="/"><a href="index.html#top">ok</a> <a href="sub/nothing.html">bad</a>',
        }
        for name, text in pages.items():
            with open(os.path.join(book, name), "w", encoding="utf-8") as f:
                f.write(text)
        md = os.path.join(root, "README.md")
        with open(md, "w", encoding="utf-8") as f:
            f.write(
                "# Set-up (two commands)\n\n## Set-up (two commands)\n\n"
                "[a](#set-up-two-commands) [b](#set-up-two-commands-1) [c](#set-up) `[d](nope.md)`\n"
                "```\n[e](nope.md)\n```\n[f](book/index.html#top) [g](book/sub/) [h](book/none.html)\n"
                "[ref]: book/sub/a.html#nothere\n"
            )
        checker = Checker()
        checker.html_tree(book)
        checker.markdown(md)
        found = sorted(line.split(": ", 1)[1].split(":", 1)[0].strip() for line in checker.broken)
        expected = sorted(
            [
                "sub/a.html#gone",
                "missing.html",
                "#nope",
                "../gone.js",
                "sub/nothing.html",
                "#set-up",
                "book/none.html",
                "book/sub/a.html#nothere",
            ]
        )
        if found != expected:
            print(f"check_links self-test: found {found}, expected {expected}", file=sys.stderr)
            return 1
    print("==> links: the checker's self-test passed", file=sys.stderr)
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) < 2 or any(a in ("-h", "--help") for a in argv[1:]):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    checker = Checker()
    for arg in argv[1:]:
        if os.path.isdir(arg):
            if not any(f.endswith(".html") for f in os.listdir(arg)):
                print(f"check_links: {arg} holds no HTML pages (was the book built?)", file=sys.stderr)
                return 2
            checker.html_tree(arg)
        elif arg.endswith(".md") and os.path.isfile(arg):
            checker.markdown(arg)
        else:
            print(f"check_links: {arg} is neither a built book nor a Markdown file", file=sys.stderr)
            return 2
    for line in checker.broken:
        print(f"broken link: {line}", file=sys.stderr)
    print(
        f"==> links: {checker.checked} relative links checked, {len(checker.broken)} broken",
        file=sys.stderr,
    )
    return 1 if checker.broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
