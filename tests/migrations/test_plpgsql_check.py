"""plpgsql_check over every plpgsql function of the migrated schema: no errors.

PostgreSQL checks a plpgsql body only as it runs it: a misspelt column, a wrong type or a
missing table in a branch no test reaches stays hidden until production takes it.
plpgsql_check (Debian's ``postgresql-15-plpgsql-check``, installed by ``make install`` where
it can) compiles every statement of every function against the live catalog. The extension
is created inside the test's transaction, which is rolled back: it is left nowhere.

Its warnings are left to a reader (``python -m pytest ... -k plpgsql -s`` prints them): at
the time of writing they are an unused variable, a few ``bigint`` row counts stored in
``integer`` variables, an ``integer`` stored in a ``double precision`` one, an empty-array
literal given as text, and hints to mark functions that raise IMMUTABLE (which would let the
planner raise at plan time) or ones that read STABLE; none is a defect.
"""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

INSTALL = (
    "plpgsql_check is not available on the test database's server: install Debian's "
    "postgresql-15-plpgsql-check (postgresql-<major>-plpgsql-check for another major; "
    "`make install` does it as root on Debian) on the server that runs the tests"
)

# Each plpgsql function of the app, once. A trigger function is checked against a trigger that
# runs it, the one with transition tables when there is one: plpgsql_check compiles every
# branch, and lonnymq_workflow_deleted_v1's DELETE branch reads the transition table ``gone``
# that its TRUNCATE trigger (the other branch) has not. Other functions get relid 0.
CHECK = """
SELECT p.oid::regprocedure::text, c.lineno, c.statement, c.sqlstate, c.message, c.detail,
       c.level, c.query
  FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace
  JOIN pg_language l ON l.oid = p.prolang
  LEFT JOIN LATERAL (
       SELECT tgrelid, tgoldtable, tgnewtable FROM pg_trigger
        WHERE tgfoid = p.oid AND NOT tgisinternal
        ORDER BY tgoldtable IS NULL AND tgnewtable IS NULL, tgname
        LIMIT 1) t ON true
 CROSS JOIN LATERAL plpgsql_check_function_tb(
       p.oid, coalesce(t.tgrelid, 0),
       fatal_errors => false, other_warnings => true, extra_warnings => true,
       performance_warnings => true, security_warnings => true,
       oldtable => t.tgoldtable, newtable => t.tgnewtable) c
 WHERE n.nspname = current_schema() AND p.proname LIKE 'lonnymq\\_%' AND l.lanname = 'plpgsql'
 ORDER BY 1, 2
"""

COUNT = """
SELECT count(*)
  FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace
  JOIN pg_language l ON l.oid = p.prolang
 WHERE n.nspname = current_schema() AND p.proname LIKE 'lonnymq\\_%' AND l.lanname = 'plpgsql'
"""


def test_plpgsql_check_finds_no_error_in_any_function():
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_available_extensions WHERE name = 'plpgsql_check'")
        if cursor.fetchone()[0] == 0:
            pytest.fail(INSTALL)
        cursor.execute("CREATE EXTENSION plpgsql_check")  # rolled back with the test
        cursor.execute(COUNT)
        functions = cursor.fetchone()[0]
        cursor.execute(CHECK)
        found = cursor.fetchall()
    assert functions >= 80  # every live and superseded plpgsql function of the schema
    for row in found:
        print(*row, sep=" | ")  # the warnings, for a reader (-s)
    errors = [row for row in found if row[6] == "error"]
    assert not errors, "\n".join(" | ".join(str(part) for part in row) for row in errors)
