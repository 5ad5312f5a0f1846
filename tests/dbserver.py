"""Where the tests' PostgreSQL comes from.

1. ``DATABASE_URL`` when set (CI sets it to the local server);
2. otherwise a testcontainers PostgreSQL when a Docker engine answers;
3. otherwise a throwaway cluster started from local PostgreSQL binaries (initdb/pg_ctl);
4. otherwise a clear error saying how to point the tests at a server.
"""

from __future__ import annotations

import atexit
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
        from testcontainers.postgres import PostgresContainer

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


def _from_local_binaries() -> str | None:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    initdb = shutil.which("initdb") or (candidates[0] if candidates else None)
    if initdb is None:
        return None
    bindir = os.path.dirname(initdb)
    pg_ctl = os.path.join(bindir, "pg_ctl")
    datadir = tempfile.mkdtemp(prefix="lonnymq-pg-")
    port = _free_port()
    prefix: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        shutil.chown(datadir, "postgres", "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [*prefix, initdb, "-D", datadir, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *prefix,
            pg_ctl,
            "-D",
            datadir,
            "-w",
            "-l",
            os.path.join(datadir, "log"),
            "start",
            "-o",
            f"-p {port} -k {datadir} -c listen_addresses=127.0.0.1 -c max_connections=200",
        ],
        check=True,
        capture_output=True,
    )

    def stop() -> None:
        subprocess.run([*prefix, pg_ctl, "-D", datadir, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(datadir, ignore_errors=True)

    atexit.register(stop)
    return f"postgres://postgres@127.0.0.1:{port}/lonnymq"
