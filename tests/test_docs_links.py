"""Every relative link in README.md and docs/*.md leads somewhere: the file or folder exists, and a `#anchor` names a
heading of the page it points to (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The page without fenced code blocks and code spans, where brackets are code, not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def github_anchor(heading: str) -> str:
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        slug = github_anchor(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(page: Path) -> list[str]:
    return LINK.findall(_prose(page.read_text(encoding="utf-8")))


def test_the_pages_exist() -> None:
    assert (ROOT / "README.md").is_file()
    assert len(PAGES) > 1, "docs/ has no page"


def test_every_docs_page_is_in_the_readme_table() -> None:
    readme_targets = {target.split("#")[0] for target in links(ROOT / "README.md")}
    missing = [
        page.relative_to(ROOT).as_posix()
        for page in PAGES[1:]
        if page.relative_to(ROOT).as_posix() not in readme_targets
    ]
    assert not missing, f"docs pages the README's Documentation table does not link: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file or folder")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: {dest.name} has no heading with the anchor #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}: broken links:\n  " + "\n  ".join(broken)


def test_the_readme_and_commands_page_list_every_command() -> None:
    from builder.cli import main

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands_page = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    missing = [name for name in main.commands if f"`klein-web {name}" not in readme]
    assert not missing, f"commands the README's table does not list: {missing}"
    missing = [name for name in main.commands if f"\n## {name}\n" not in commands_page]
    assert not missing, f"commands docs/commands.md has no section for: {missing}"
