"""The documentation's index: every page of docs/ is linked from docs/index.md with a title a
reader understands (not its file name), and is in the site's navigation (mkdocs.yml)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# django_independent: reads the docs' files, imports nothing of the app (CONTRIBUTING.md)
pytestmark = pytest.mark.django_independent

DOCS = Path(__file__).resolve().parents[2] / "docs"
LINK = re.compile(r"\[([^\]]+)\]\(([^)#]+\.md)(?:#[^)]*)?\)")


def pages() -> set[str]:
    return {path.name for path in DOCS.glob("*.md")} - {"index.md"}


def index_links() -> dict[str, str]:
    return {target: text for text, target in LINK.findall((DOCS / "index.md").read_text())}


def test_every_page_is_linked_from_the_index():
    assert sorted(pages() - set(index_links())) == []


def test_the_index_links_pages_by_title_not_by_file_name():
    by_file_name = {target: text for target, text in index_links().items() if text.strip("`") == target}
    assert by_file_name == {}


def test_every_page_is_in_the_site_navigation():
    nav = (DOCS.parent / "mkdocs.yml").read_text()
    assert sorted(page for page in pages() if not re.search(rf":\s+{re.escape(page)}\s*$", nav, re.M)) == []


def test_the_check_sees_a_page_left_out(tmp_path):
    # The control: a page the index does not name is found.
    links = {target for _, target in LINK.findall("[Workflows](workflows.md) and [x](api.md#y)")}
    assert links == {"workflows.md", "api.md"}
    assert {"workflows.md", "api.md", "spark.md"} - links == {"spark.md"}


# Code a reader copies (Python, shell, YAML, ...) fits a page: 100 characters. Program output
# (plain and text blocks) is shown as printed, and diagrams (mermaid) are drawn, not scrolled.
WIDTH = 100
SHOWN_AS_IS = {"", "text", "mermaid"}


def wide_code_lines(text: str) -> list[int]:
    wide, language = [], None
    for number, line in enumerate(text.splitlines(), 1):
        fence = re.match(r"^\s*```(\w*)", line)
        if fence:
            language = None if language is not None else fence.group(1)
        elif language is not None and language not in SHOWN_AS_IS and len(line) > WIDTH:
            wide.append(number)
    return wide


def test_no_line_of_code_is_wider_than_the_page():
    pages = [*DOCS.glob("*.md"), DOCS.parent / "README.md"]
    wide = {path.name: lines for path in pages if (lines := wide_code_lines(path.read_text()))}
    assert wide == {}


def test_the_width_check_sees_a_wide_line_and_leaves_output_alone():
    # The control.
    long = "x" * 101
    assert wide_code_lines(f"```python\n{long}\n```\n```text\n{long}\n```\n") == [2]
