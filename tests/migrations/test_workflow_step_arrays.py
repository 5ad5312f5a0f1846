"""Migration 0034 carries the edges of workflows already started: up, the edge table's rows
become the steps' parents and children; down, the arrays become edge rows again."""

from __future__ import annotations

import psycopg
import pytest

from tests.migrations.test_schema import migrate, scratch_database  # noqa: F401 (a fixture)

START = (
    "SELECT lonnymq_workflow_start_v1('diamond', NULL, ARRAY['top', 'left', 'right', 'bottom'],"
    " ARRAY['q', 'q', 'q', 'q'], ARRAY['c', 'c', 'c', 'c'], ARRAY['{}', '{}', '{}', '{}']::jsonb[],"
    " ARRAY[0, 0, 0, 0]::bigint[], ARRAY[1, 1, 1, 1], ARRAY[1, 1, 2, 3], ARRAY[2, 3, 4, 4],"
    " NULL, NULL, NULL, NULL, 50)"
)


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_edges_of_a_started_workflow_survive_the_migration_up_and_down(scratch_database):  # noqa: F811
    dsn = scratch_database("step_arrays")
    migrate(dsn, "0033_apply_marks_in_steps")
    with psycopg.connect(dsn, autocommit=True) as conn:
        workflow_id = conn.execute(START).fetchone()[0]
        ids = dict(
            conn.execute("SELECT name, id FROM lonnymq_workflow_step WHERE workflow_id = %s", [workflow_id])
        )
        edges = conn.execute("SELECT parent_id, child_id FROM lonnymq_workflow_edge ORDER BY 1, 2").fetchall()
    assert len(edges) == 4
    migrate(dsn, "0034_workflow_step_arrays")
    with psycopg.connect(dsn, autocommit=True) as conn:
        arrays = {
            name: (parents, children)
            for name, parents, children in conn.execute(
                "SELECT name, parents, children FROM lonnymq_workflow_step"
            )
        }
        assert (
            conn.execute("SELECT parent_id, child_id FROM lonnymq_workflow_edge ORDER BY 1, 2").fetchall()
            == edges
        )
        assert conn.execute("SELECT count(*) FROM lonnymq_workflow_check_v1()").fetchone()[0] == 0
    assert arrays == {
        "top": ([], [ids["left"], ids["right"]]),
        "left": ([ids["top"]], [ids["bottom"]]),
        "right": ([ids["top"]], [ids["bottom"]]),
        "bottom": ([ids["left"], ids["right"]], []),
    }
    migrate(dsn, "0033_apply_marks_in_steps")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert (
            conn.execute("SELECT parent_id, child_id FROM lonnymq_workflow_edge ORDER BY 1, 2").fetchall()
            == edges
        )
        kind = conn.execute(
            "SELECT relkind::text FROM pg_class WHERE relname = 'lonnymq_workflow_edge'"
        ).fetchone()
        assert kind == ("r",)
