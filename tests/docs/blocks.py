"""The code blocks of README.md and docs/*.md, with the markers that say how each is checked.

A fenced ``python`` block is a complete example unless an HTML comment just before it (blank
lines between are allowed) says otherwise; CONTRIBUTING.md ("Examples in the docs") describes
them for writers of pages:

``<!-- example: name NAME -->``
    names the block, so that a later block can continue it.
``<!-- example: continues NAME -->``
    a later part of block NAME of the same page: it runs after NAME, in NAME's namespace.
``<!-- example: needs a, b -->``
    names the block uses that the reader's project supplies (their own functions, a client
    library); the test gives each a stand-in (also as a module, when the block imports it and
    it is not installed). Every other name must be defined or imported by the block.
``<!-- example: settings -->``
    lines of a ``settings.py``: run on top of the sample project's settings.
``<!-- example: compile-only: REASON -->``
    compiled and its names checked, not run (it needs Spark, a cluster, a file of its own).

Several keys go in one marker, separated by ``;``. A block whose first line is only a file comment
naming a file of the example project (``# videos/views.py``) must be that file as it is:
tests/quickstart runs those files (as ``manage.py test`` and with a real worker).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*$")
MARKER = re.compile(r"^\s*<!--\s*example:(?P<body>.*?)-->\s*$")
KEYS = {"name", "continues", "needs", "settings", "compile-only"}
EXAMPLE_FILE = re.compile(r"# (?P<path>\w+/[\w/]+\.py)\n")  # the whole first line
SHELL_LANGS = {"sh", "bash", "shell", "console"}


def pages() -> list[Path]:
    """README.md and every page of docs/ (a new page is covered by being there)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass
class Block:
    path: Path  # the page
    line: int  # 1-based line of the opening fence
    lang: str
    source: str  # dedented body
    marker: dict[str, str] = field(default_factory=dict)
    marker_error: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def padded(self) -> str:
        """The body with blank lines before it, so that compiled code's line numbers are the
        page's: a traceback or SyntaxError points at the line of the .md file."""
        return "\n" * self.line + self.source

    @property
    def needs(self) -> list[str]:
        return [n.strip() for n in self.marker.get("needs", "").split(",") if n.strip()]

    @property
    def example_file(self) -> str | None:
        match = EXAMPLE_FILE.match(self.source)
        if match and (ROOT / "example_project" / match["path"]).is_file():
            return match["path"]
        return None


def parse_marker(body: str) -> tuple[dict[str, str], str | None]:
    found: dict[str, str] = {}
    for part in body.split(";"):
        part = part.strip()
        if not part:
            continue
        key, _, value = part.partition(":") if part.startswith("compile-only") else part.partition(" ")
        key, value = key.strip(), value.strip()
        if key not in KEYS:
            return found, f"unknown key {key!r} in the example marker (known: {', '.join(sorted(KEYS))})"
        if key in ("name", "continues", "needs") and not value:
            return found, f"the example marker's {key!r} needs a value"
        if key == "compile-only" and not value:
            return found, "the example marker's 'compile-only' needs a reason ('compile-only: why')"
        found[key] = value
    return found, None


def blocks(path: Path) -> list[Block]:
    lines = path.read_text().split("\n")
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, lang = opening["indent"], opening["lang"].lower()
        end = index + 1
        while end < len(lines) and not re.match(rf"^{re.escape(indent)}```\s*$", lines[end]):
            end += 1
        body = textwrap.dedent("\n".join(lines[index + 1 : end])) + "\n"
        block = Block(path=path, line=index + 1, lang=lang, source=body)
        before = index - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        if before >= 0 and (marker := MARKER.match(lines[before])):
            block.marker, block.marker_error = parse_marker(marker["body"])
        found.append(block)
        index = end + 1
    return found


def python_blocks() -> list[Block]:
    return [b for page in pages() for b in blocks(page) if b.lang in ("python", "py")]


def shell_blocks() -> list[Block]:
    return [b for page in pages() for b in blocks(page) if b.lang in SHELL_LANGS]


INLINE_COMMAND = re.compile(
    r"`(?P<text>(?:python )?(?:\S*manage\.py \w+|run_queue_worker|lonnymq_\w+ -)[^`]*)`"
)


def inline_commands() -> list[tuple[Path, int, str]]:
    """(page, line, text) of each inline code span outside code blocks that is a command line:
    ``manage.py something ...``, ``run_queue_worker ...``, ``lonnymq_health --json``."""
    found: list[tuple[Path, int, str]] = []
    for page in pages():
        fenced: str | None = None
        for number, text in enumerate(page.read_text().split("\n"), 1):
            fence = FENCE.match(text)
            if fence:
                fenced = None if fenced is not None else fence["indent"]
                continue
            if fenced is None:
                found.extend((page, number, m["text"]) for m in INLINE_COMMAND.finditer(text))
    return found


def orphan_markers(among: list[Path] | None = None) -> list[str]:
    """Markers not directly above a fence (a typo'd fence, a marker left behind)."""
    problems = []
    for page in pages() if among is None else among:
        lines = page.read_text().split("\n")
        for number, text in enumerate(lines, 1):
            if not MARKER.match(text):
                continue
            after = number
            while after < len(lines) and not lines[after].strip():
                after += 1
            if after >= len(lines) or not FENCE.match(lines[after]):
                problems.append(f"{page.name}:{number}: example marker not followed by a code block")
    return problems
