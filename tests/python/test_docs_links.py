"""Every relative link in the docs (README.md, CONTRIBUTING.md, docs/**/*.md)
names a file or folder that exists, so a moved or renamed file cannot leave a
page pointing nowhere. Links to the web and to anchors in the same page are
not checked."""

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]
# [text](target) and [text](target "title"); not images' data or code spans.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def broken_links(page: pathlib.Path):
    """The relative links of `page` whose target does not exist."""
    text = CODE.sub("", page.read_text(encoding="utf-8"))
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http:, https:, mailto: ...; an anchor in this page
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            out.append(target)
    return out


def test_every_relative_link_exists():
    missing = {str(p.relative_to(REPO)): broken_links(p) for p in PAGES if p.exists()}
    assert {k: v for k, v in missing.items() if v} == {}


def test_the_pages_are_there():
    assert (REPO / "README.md").exists() and (REPO / "CONTRIBUTING.md").exists()
    assert (REPO / "docs" / "design" / "README.md").exists()
    assert (REPO / "docs" / "decisions" / "README.md").exists()
