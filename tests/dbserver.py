"""Where the tests' PostgreSQL comes from.

1. ``DATABASE_URL`` when set (CI sets it to the local server);
2. otherwise a testcontainers PostgreSQL when a Docker engine answers;
3. otherwise a throwaway cluster started from local PostgreSQL binaries (initdb/pg_ctl), with
   the settings of a server whose data nobody keeps (TEST_SERVER_SETTINGS: no fsync, no
   synchronous commit, no full-page writes);
4. otherwise a clear error saying how to point the tests at a server.

A server named by ``DATABASE_URL`` is used as it is: its settings are never changed.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile

HOW_TO = (
    "The tests need a PostgreSQL server. Set DATABASE_URL, e.g.\n"
    "    DATABASE_URL=postgres://postgres@127.0.0.1:5432/lonnymq make test\n"
    "or start a Docker engine (testcontainers), or install PostgreSQL's server binaries "
    "(initdb, pg_ctl) so a throwaway cluster can be started."
)


class NoDatabase(RuntimeError):
    pass


# The throwaway cluster this process started, if any: the chaos test restarts that one (it is
# nobody else's). A server named by DATABASE_URL is restarted only on explicit opt-in.
_started_cluster: dict[str, object] = {}

RESTART_OPT_IN = "LONNYMQ_TEST_RESTART_SERVER"


def restart_started_cluster() -> bool:
    """Restart the throwaway cluster started by this test run; False when there is none."""
    if not _started_cluster:
        return False
    prefix = list(_started_cluster["prefix"])  # type: ignore[call-overload]
    subprocess.run(
        [
            *prefix,
            str(_started_cluster["pg_ctl"]),
            "-D",
            str(_started_cluster["datadir"]),
            "-w",
            "-m",
            "fast",
            # The server's output goes to its log: it must not hold our pipes open.
            "-l",
            os.path.join(str(_started_cluster["datadir"]), "log"),
            "restart",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=120,
    )
    return True


def database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    url = _from_docker()
    if url is None:
        url = _from_local_binaries()
    if url is None:
        raise NoDatabase(HOW_TO)
    os.environ["DATABASE_URL"] = url  # subprocesses (workers) see the same server
    return url


def _from_docker() -> str | None:
    try:
        import docker  # testcontainers' client

        try:  # testcontainers 4.15 moved the module (the old path warns it is deprecated)
            from testcontainers.community.postgres import PostgresContainer
        except ImportError:
            from testcontainers.postgres import PostgresContainer  # type: ignore[no-redef]

        docker.from_env(timeout=3).ping()
    except Exception:
        return None
    container = PostgresContainer("postgres:15-alpine", driver=None)
    container.start()
    atexit.register(container.stop)
    url = container.get_connection_url()
    return url.replace("postgresql://", "postgres://", 1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


CLUSTER_PREFIX = "lonnymq-pg-"
# Beside a throwaway cluster's directory (initdb wants it empty): the pid of the test process
# that started it.
OWNER_SUFFIX = ".owner"


def _stop_orphaned_clusters(pg_ctl: str, prefix: list[str]) -> None:
    """Stop and remove the throwaway clusters whose test process is gone. A run stops its own
    cluster at exit, but a run killed outright (a timeout, SIGKILL) cannot: the next run that
    starts a cluster cleans up after it, so none outlives its run for long."""
    for datadir in glob.glob(os.path.join(tempfile.gettempdir(), CLUSTER_PREFIX + "*")):
        if not os.path.isdir(datadir):
            continue
        try:
            with open(datadir + OWNER_SUFFIX) as owner:
                pid = int(owner.read().strip())
        except (OSError, ValueError):
            continue  # not one of ours, or still being made: leave it
        try:
            os.kill(pid, 0)
            continue  # its run is alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # a live process of another user
        _remove_cluster(pg_ctl, prefix, datadir)


def _remove_cluster(pg_ctl: str, prefix: list[str], datadir: str) -> None:
    subprocess.run([*prefix, pg_ctl, "-D", datadir, "-m", "immediate", "stop"], capture_output=True)
    shutil.rmtree(datadir, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(datadir + OWNER_SUFFIX)


# The throwaway cluster's data dies with the run, so it need not survive a crash of the machine:
# no fsync (nothing waits for the disk), no synchronous commit (a commit does not wait for its WAL
# to be flushed) and no full-page writes (less WAL). A test that needs a setting of its own sets
# it on its connection (the worker's synchronous_commit is set per connection, for one). A
# crash of the server process alone loses nothing either way: the chaos test's restart is a
# clean one (pg_ctl restart -m fast).
TEST_SERVER_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def _from_local_binaries() -> str | None:
    cluster = start_cluster(TEST_SERVER_SETTINGS)
    if cluster is None:
        return None
    atexit.register(cluster.stop)
    _started_cluster.update(pg_ctl=cluster.pg_ctl, datadir=cluster.datadir, prefix=cluster.prefix)
    return cluster.url("lonnymq")


class Cluster:
    """A throwaway cluster started by :func:`start_cluster`; ``stop()`` stops and removes it."""

    def __init__(self, pg_ctl: str, prefix: list[str], datadir: str, port: int) -> None:
        self.pg_ctl = pg_ctl
        self.prefix = prefix
        self.datadir = datadir
        self.port = port

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    @property
    def log(self) -> str:
        return os.path.join(self.datadir, "log")

    def stop(self) -> None:
        _remove_cluster(self.pg_ctl, self.prefix, self.datadir)


def start_cluster(settings: dict[str, str] | None = None) -> Cluster | None:
    """Start a throwaway cluster from local PostgreSQL binaries (initdb/pg_ctl) on a free port,
    with ``settings`` as server settings (``-c name=value``) besides the tests' own; None when
    there are no binaries. The caller stops it (``stop()``); one whose process is killed
    outright is removed by the next call (see _stop_orphaned_clusters). The benchmarks use it
    too (bench.soak --cluster)."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    initdb = shutil.which("initdb") or (candidates[0] if candidates else None)
    if initdb is None:
        return None
    bindir = os.path.dirname(initdb)
    pg_ctl = os.path.join(bindir, "pg_ctl")
    prefix: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        prefix = ["runuser", "-u", "postgres", "--"]
    _stop_orphaned_clusters(pg_ctl, prefix)
    datadir = tempfile.mkdtemp(prefix=CLUSTER_PREFIX)
    with open(datadir + OWNER_SUFFIX, "w") as owner:
        owner.write(str(os.getpid()))
    port = _free_port()
    if prefix:
        shutil.chown(datadir, "postgres", "postgres")
    subprocess.run(
        [*prefix, initdb, "-D", datadir, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
    )
    # max_connections: the parallel run (pytest-xdist, CONTRIBUTING.md) has several test
    # processes at once, each with its worker processes and their pools.
    options = f"-p {port} -k {datadir} -c listen_addresses=127.0.0.1 -c max_connections=500"
    for name, value in (settings or {}).items():
        options += f" -c {name}={value}"
    subprocess.run(
        [*prefix, pg_ctl, "-D", datadir, "-w", "-l", os.path.join(datadir, "log"), "start", "-o", options],
        check=True,
        capture_output=True,
    )
    return Cluster(pg_ctl, prefix, datadir, port)
