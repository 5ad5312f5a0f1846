"""What a database holds of the app, read from PostgreSQL's catalogs, for comparing schemas.

Every table (columns in order, types, defaults, NOT NULL, storage options), constraint,
index, sequence and function definition whose name starts with ``lonnymq_``, in the
connection's current schema. Two databases have the same schema when their snapshots are
equal.
"""

from __future__ import annotations

import psycopg

QUERIES = {
    "tables": """
        SELECT c.relname, c.relkind::text, c.relpersistence::text, coalesce(c.reloptions, '{}')::text
          FROM pg_class c
         WHERE c.relnamespace = current_schema()::regnamespace AND c.relname LIKE 'lonnymq%%'
           AND c.relkind IN ('r', 'p', 'v', 'm')
         ORDER BY 1""",
    "columns": """
        SELECT c.relname, array_agg(
                   concat_ws(' ', a.attname, format_type(a.atttypid, a.atttypmod),
                             CASE WHEN a.attnotnull THEN 'NOT NULL' END,
                             'DEFAULT ' || pg_get_expr(d.adbin, d.adrelid),
                             CASE WHEN a.attidentity <> '' THEN 'IDENTITY ' || a.attidentity::text END)
                   ORDER BY a.attnum)::text
          FROM pg_class c
          JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
          LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
         WHERE c.relnamespace = current_schema()::regnamespace AND c.relname LIKE 'lonnymq%%'
           AND c.relkind IN ('r', 'p', 'v', 'm')
         GROUP BY c.relname ORDER BY 1""",
    "constraints": """
        SELECT t.relname, k.conname, k.contype::text, pg_get_constraintdef(k.oid)
          FROM pg_constraint k JOIN pg_class t ON t.oid = k.conrelid
         WHERE t.relnamespace = current_schema()::regnamespace AND t.relname LIKE 'lonnymq%%'
         ORDER BY 1, 2""",
    "indexes": """
        SELECT indexname, indexdef FROM pg_indexes
         WHERE schemaname = current_schema() AND tablename LIKE 'lonnymq%%' ORDER BY 1""",
    "sequences": """
        SELECT sequencename, data_type::text, start_value, increment_by, max_value, cycle
          FROM pg_sequences
         WHERE schemaname = current_schema() AND sequencename LIKE 'lonnymq%%' ORDER BY 1""",
    "functions": """
        SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid)
          FROM pg_proc p
         WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'lonnymq%%'
         ORDER BY 1""",
}


def snapshot(conninfo: str) -> dict[str, list[tuple[object, ...]]]:
    """The app's schema objects in the database ``conninfo`` names."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        return {kind: conn.execute(query.replace("%%", "%")).fetchall() for kind, query in QUERIES.items()}


def differences(left: dict, right: dict, left_name: str, right_name: str) -> list[str]:
    """Readable lines naming every object that differs, empty when the schemas are equal."""
    lines: list[str] = []
    for kind in QUERIES:
        a = {row[: 2 if kind == "constraints" else 1]: row for row in left[kind]}
        b = {row[: 2 if kind == "constraints" else 1]: row for row in right[kind]}
        for key in sorted(set(a) | set(b), key=str):
            if key not in b:
                lines.append(f"{kind} {key}: only in {left_name}")
            elif key not in a:
                lines.append(f"{kind} {key}: only in {right_name}")
            elif a[key] != b[key]:
                lines.append(f"{kind} {key} differs:\n  {left_name}: {a[key]}\n  {right_name}: {b[key]}")
    return lines
