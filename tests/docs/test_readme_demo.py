"""The README's sample of `make demo` is the demo's output: every summary line it shows
("fairness: ...", "durable handlers: ...") is one the demo still prints, and every summary line
the demo prints is in the sample, so neither a removed nor a new step goes unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# django_independent: reads files, imports nothing of the app (CONTRIBUTING.md)
pytestmark = pytest.mark.django_independent

ROOT = Path(__file__).resolve().parents[2]
DEMO_SOURCES = sorted((ROOT / "example_project").glob("*demo*.py"))
# A summary line: a label of lowercase words (perhaps a quoted name: "topic 'x'"), then ": ".
SUMMARY = re.compile(r"^([a-z][a-z .]*[a-z](?: '[^']*')?): ")


def label(text: str) -> str:
    """A label without its quoted name ("topic 'video.uploaded'" and "topic '{TOPIC}'": "topic")."""
    return re.sub(r" '[^']*'$", "", text)


def readme_sample() -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index("shortened here:")
    block = text[text.index("```\n", start) + 4 :]
    return block[: block.index("\n```")].splitlines()


def printed_labels() -> set[str]:
    """The labels of the summary lines the demo's code prints (f-strings or plain)."""
    labels = set()
    for path in DEMO_SOURCES:
        # A quoted name is a literal ('x') or a value the line formats ({TOPIC!r}).
        found = re.findall(r"""f?["']([a-z][a-z .]*[a-z](?: '[^']*'| \{[^}]*\})?): """, path.read_text())
        for literal in found:
            literal = re.sub(r" \{[^}]*\}$", "", literal)
            labels.add(label(literal))
    return labels


def test_every_summary_line_of_the_sample_is_one_the_demo_prints():
    labels = printed_labels()
    shown = {label(m.group(1)) for line in readme_sample() if (m := SUMMARY.match(line))}
    assert shown and sorted(shown - labels) == []


def test_every_step_of_the_demo_is_in_the_sample():
    shown = {label(m.group(1)) for line in readme_sample() if (m := SUMMARY.match(line))}
    for step in ("fairness", "durable handlers", "workflows", "debounce", "weights", "throughput"):
        assert step in printed_labels(), step
        assert step in shown, f"the README's demo sample has no {step!r} line: paste a new run"
