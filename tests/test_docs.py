"""The documentation's links hold: every relative link in README.md, CHANGELOG.md and docs/*.md
names a file of the repository, and every #anchor in such a link names a heading of its target
(GitHub's slugs). The README stays a newcomer's page: at most 400 lines."""

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 400


def doc_files():
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


FENCE = re.compile(r"^ {0,3}(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target); the text may hold one level of brackets.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text):
    """(line number, line) for every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence:
                fence = None
            continue
        if fence is None:
            yield number, line


def slug(heading):
    """GitHub's anchor for a heading's text: markup dropped, lowercase, every character but
    letters, digits, marks, '_', '-' and spaces dropped, spaces to hyphens."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("*", "")
    text = re.sub(r"(?<![\w])_+|_+(?![\w])", "", text)  # _emphasis_, not snake_case
    kept = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch in " -" or cat[0] in "LMN" or cat == "Pc":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors(path):
    """Every heading's anchor in a Markdown file, duplicates numbered as GitHub numbers them."""
    seen = {}
    out = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path):
    """(line number, target) of every link in a file's prose, code spans left out."""
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        line = CODE_SPAN.sub("", line)
        for m in LINK.finditer(line):
            yield number, m.group(1).strip("<>")


def test_slugs_follow_github():
    first_run = "The first GPU run: one H200, 2026-11-30"
    assert slug(first_run) == "the-first-gpu-run-one-h200-2026-11-30"
    assert slug("How accurate is it?") == "how-accurate-is-it"
    assert (
        slug("Timings the model never saw: the FlashAttention-3 paper's other panels")
        == "timings-the-model-never-saw-the-flashattention-3-papers-other-panels"
    )
    assert slug("`hbmsim explore`: design-space studies") == "hbmsim-explore-design-space-studies"
    assert slug("Cohorts: CTAs in lockstep") == "cohorts-ctas-in-lockstep"
    assert slug("warp_mma and *emphasis*") == "warp_mma-and-emphasis"


def test_duplicate_headings_are_numbered(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Notes\n\n## Engine\n\n```\n# not a heading\n```\n\n## Engine\n\n## Engine\n")
    assert anchors(page) == {"notes", "engine", "engine-1", "engine-2"}


def test_links_skip_code_and_urls(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "See [a](a.md#x), ![pic](p.png) and `[not](code.md)`.\n"
        "```\n[not](fenced.md)\n```\n"
        "[web](https://example.com/x.md) [here](#top)\n"
    )
    assert [t for _, t in links(page)] == ["a.md#x", "p.png", "https://example.com/x.md", "#top"]


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    assert path.exists(), f"{path.relative_to(ROOT)} is missing"
    broken = []
    for number, target in links(path):
        if SCHEME.match(target):
            continue  # a URL: not checked here
        file_part, _, anchor = target.partition("#")
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{where}: no such file")
            continue
        if ROOT not in dest.parents and dest != ROOT:
            broken.append(f"{where}: outside the repository")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where}: no heading '{anchor}' in {dest.relative_to(ROOT)}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_docs_have_links():
    # The link check above must be looking at something: the README links every docs page.
    targets = {t.partition("#")[0] for _, t in links(ROOT / "README.md")}
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in targets, f"README.md does not link docs/{page.name}"
    assert "CHANGELOG.md" in targets


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, at most {README_MAX_LINES}"
