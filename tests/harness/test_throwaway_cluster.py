"""The throwaway cluster of a run without DATABASE_URL (tests/dbserver.py) runs with a test
server's settings, and does not outlive its run: a run killed outright cannot stop its own at
exit, so the next run that starts one stops and removes it."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from tests import dbserver

# django_independent: tests/dbserver.py and a PostgreSQL cluster, no Django (CONTRIBUTING.md)
pytestmark = pytest.mark.django_independent

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_a_cluster_whose_run_was_killed_is_stopped_and_removed_by_the_next_run() -> None:
    started = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys, time
                from tests import dbserver
                print(dbserver._from_local_binaries(), dbserver._started_cluster["datadir"], flush=True)
                time.sleep(600)
                """
            ),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = started.stdout.readline().split() if started.stdout else []
        assert len(line) == 2, f"the cluster did not start: {line!r}"
        url, datadir = line
        with psycopg.connect(url.replace("/lonnymq", "/postgres"), connect_timeout=5) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            for name, value in dbserver.TEST_SERVER_SETTINGS.items():
                assert conn.execute(f"SHOW {name}").fetchone() == (value,), name
        assert Path(datadir + dbserver.OWNER_SUFFIX).read_text() == str(started.pid)
    finally:
        started.send_signal(signal.SIGKILL)  # no atexit: the cluster stays behind
        started.wait(timeout=30)
    assert Path(datadir, "postmaster.pid").exists()

    pg_ctl = os.path.join(os.path.dirname(shutil.which("initdb") or _initdb()), "pg_ctl")
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    dbserver._stop_orphaned_clusters(pg_ctl, prefix)

    assert not Path(datadir).exists()
    assert not Path(datadir + dbserver.OWNER_SUFFIX).exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url.replace("/lonnymq", "/postgres"), connect_timeout=3)


def _initdb() -> str:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    assert candidates, "no initdb: the throwaway cluster needs local PostgreSQL binaries"
    return candidates[0]
