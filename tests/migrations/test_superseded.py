"""The live schema and the superseded functions stay apart (docs/sql.md).

- Every function of ``sql/schema.sql`` is called by a named statement of ``queries.sql`` or
  ``stats.sql``, or by a function so called (helpers), or by the file's other statements.
- No named statement and no function of ``schema.sql`` calls a function of
  ``sql/superseded.sql``.
- Each superseded function names the live function that replaced it, the migration that
  added that one, and when it may be dropped: one release after the release that stopped
  calling it ("kept for rolling deploys from 0.1.x; may be dropped in 0.3.0").

A name counts as a call wherever it appears in SQL outside ``--`` comments, so a function a
body builds a statement around is live too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pytest

from django_lonnymq import sql

# django_independent: reads the SQL files only (CONTRIBUTING.md)
pytestmark = pytest.mark.django_independent

LIVE = sql.functions(sql.read(sql.SCHEMA_FILE))
SUPERSEDED = sql.functions(sql.read(sql.SUPERSEDED_FILE))
EXAMPLE = (
    "Superseded by lonnymq_fail_v2 (migration 0014_running_control). "
    "Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0."
)
LABEL = re.compile(
    r"Superseded by (?P<replacement>lonnymq_\w+) \(migration (?P<migration>\d{4}_\w+)[^)]*\)\. "
    r"Kept for rolling deploys from (?P<major>\d+)\.(?P<minor>\d+)\.x; "
    r"may be dropped in (?P<drop_major>\d+)\.(?P<drop_minor>\d+)\.0\."
)


def code(text: str) -> str:
    """``text`` without its ``--`` comments."""
    return "\n".join(line.split("--")[0] for line in text.splitlines())


def body(definition: str) -> str:
    """A definition from ``sql.functions()`` without the comment above it."""
    return code(definition[definition.index("CREATE FUNCTION ") :])


def calls(text: str, names: Iterable[str]) -> set[str]:
    """Which of ``names`` the SQL ``text`` refers to."""
    return set(re.findall(r"\b(lonnymq_\w+)\b", code(text))) & set(names)


def statements() -> str:
    """The named statements, and what schema.sql runs besides its functions (defaults, ...)."""
    rest = sql.read(sql.SCHEMA_FILE)
    for name, definition in LIVE.items():
        text = definition[definition.index("CREATE FUNCTION ") :]
        assert text in rest, f"{name}: its definition was not found as parsed"
        rest = rest.replace(text, "")
    return "\n".join([*sql.queries().values(), rest])


def reachable() -> set[str]:
    seen: set[str] = set()
    todo = calls(statements(), LIVE)
    while todo:
        name = todo.pop()
        seen.add(name)
        todo |= calls(body(LIVE[name]), LIVE) - seen
    return seen


def comment(definition: str) -> str:
    above = definition[: definition.index("CREATE FUNCTION ")]
    return " ".join(line.removeprefix("--").strip() for line in above.splitlines())


def test_the_parse_finds_both_files():
    assert len(LIVE) >= 30 and {"lonnymq_dequeue_v1", "lonnymq_ack_v1", "lonnymq_now_ms_v1"} <= set(LIVE)
    assert {"lonnymq_fail_v1", "lonnymq_extend_v1", "lonnymq_cancel_v1"} <= set(SUPERSEDED)


def test_no_function_is_in_both_files():
    assert not set(LIVE) & set(SUPERSEDED)
    sql.functions(sql.schema())  # raises ValueError on a name defined twice


def test_every_live_function_is_called_from_a_named_statement():
    unused = sorted(set(LIVE) - reachable())
    assert not unused, (
        f"{', '.join(unused)}: in schema.sql, but no named statement of {', '.join(sql.QUERY_FILES)} "
        "calls it, directly or through another function there. Move it to superseded.sql with "
        "its label (docs/sql.md), or drop it in a migration if no released code calls it."
    )


@pytest.mark.parametrize("name", sorted(SUPERSEDED))
def test_no_named_statement_or_live_function_calls_a_superseded_one(name):
    callers = [f"named statement {q}" for q, text in sql.queries().items() if calls(text, [name])]
    callers += [f"live function {f}" for f, definition in LIVE.items() if calls(body(definition), [name])]
    assert not callers, (
        f"{name} is in superseded.sql but called by {', '.join(callers)}: move it back to schema.sql"
    )


@pytest.mark.parametrize("name", sorted(SUPERSEDED))
def test_each_superseded_function_names_its_replacement_and_when_it_goes(name):
    definition = SUPERSEDED[name]
    label = LABEL.search(comment(definition))
    assert label, f"{name}: no label above it; write one like {EXAMPLE!r} (docs/sql.md)"
    assert label["replacement"] in LIVE, (
        f"{name}: its replacement {label['replacement']} is not in schema.sql"
    )
    assert label["replacement"] in sql.functions(sql.migration(label["migration"])), (
        f"{name}: migration {label['migration']} does not create {label['replacement']}"
    )
    # Called by release X.Y, no longer by X.(Y+1), which still installs it; X.(Y+2) may drop it.
    stops = (int(label["major"]), int(label["minor"]) + 1)
    assert (int(label["drop_major"]), int(label["drop_minor"])) == (stops[0], stops[1] + 1), (
        f"{name}: a function the code of {stops[0]}.{stops[1]} stopped calling may be dropped in "
        f"{stops[0]}.{stops[1] + 1}.0 (docs/sql.md), not {label['drop_major']}.{label['drop_minor']}.0"
    )


def dropped_in(name: str) -> tuple[int, int]:
    label = LABEL.search(comment(SUPERSEDED[name]))
    return (int(label["drop_major"]), int(label["drop_minor"])) if label else (0, 0)


@pytest.mark.parametrize("name", sorted(SUPERSEDED))
def test_a_superseded_function_goes_no_earlier_than_those_that_call_it(name):
    for caller, definition in SUPERSEDED.items():
        if caller != name and calls(body(definition), [name]):
            assert dropped_in(name) >= dropped_in(caller), (
                f"{caller} calls {name}, which may be dropped first"
            )
