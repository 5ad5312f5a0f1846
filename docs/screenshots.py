"""Regenerate the admin screenshots of docs/admin.md (docs/images/*.png): ``make screenshots``.

The pictures show a real run, not staged rows. On a database of its own (``lonnymq_screenshots``
on the server of ``DATABASE_URL``, default the local PostgreSQL; dropped and created afresh),
the example project is migrated, tenants enqueue transcodes (one capped, one rate-limited, one
weighted, one paused, a scheduled job, jobs that fail), two real ``run_queue_worker`` processes
work on them while the queue is sampled every second, one worker is stopped, and the admin,
served by ``runserver``, is photographed in headless Chromium (Debian's ``/usr/bin/chromium``,
driven by Playwright, launched by docs/browser.py) while the other still works.

    python docs/screenshots.py [--database-url URL] [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
DATABASE = "lonnymq_screenshots"
QUEUE = "transcode"
# (file, admin path, what to wait for on the page); each picture is the whole page, 1440 px wide.
PAGES = [
    ("admin-channels.png", "/admin/django_lonnymq/channel/", "#result_list"),
    ("admin-dashboard.png", "/admin/django_lonnymq/channel/dashboard/", "svg"),
    ("admin-workers.png", "/admin/django_lonnymq/worker/", "#result_list"),
    ("admin-dead-messages.png", "/admin/django_lonnymq/deadmessage/", "#result_list"),
]
USER, PASSWORD = "ops", "screenshots-only"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/lonnymq_demo")
    parser.add_argument(
        "--database-url", default=default_url, help="a server to use (its database name is ignored)"
    )
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="how long the workers run before the pictures"
    )
    return parser.parse_args()


def own_database_url(url: str) -> str:
    """The same server, database ``lonnymq_screenshots``, dropped and created afresh."""
    import environ
    import psycopg
    from psycopg import sql

    config = environ.Env.db_url_config(url)
    params = {k: config.get(k.upper()) for k in ("user", "password", "host", "port")}
    params = {k: v for k, v in params.items() if v}
    with psycopg.connect(dbname="postgres", autocommit=True, connect_timeout=5, **params) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    auth = params.get("user", "") + (f":{params['password']}" if params.get("password") else "")
    return f"postgres://{auth}@{params.get('host', '127.0.0.1')}:{params.get('port', 5432)}/{DATABASE}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def manage(*args: str, env: dict[str, str], **popen: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env, **popen)  # type: ignore[call-overload]


def workload() -> None:
    """Tenants and their jobs: sizes in seconds, limits set through the API."""
    import random

    from django_lonnymq import Item, api

    rng = random.Random(7)
    api.configure_channel(QUEUE, "acme", max_concurrency=1)
    api.configure_channel(QUEUE, "globex", rate="4 / s, burst 5")
    api.configure_channel(QUEUE, "premium", weight=3)
    api.configure_channel(QUEUE, "initech", paused=True)
    jobs = {
        "bigcorp": 600,
        "premium": 120,
        "acme": 25,
        "globex": 40,
        "initech": 12,
        "umbrella": 30,
        "hooli": 20,
    }
    for tenant, count in jobs.items():
        sizes = [round(rng.uniform(0.05, 0.4), 3) for _ in range(count)]
        api.enqueue_many(QUEUE, [Item({"seconds": s}, channel=tenant) for s in sizes])
    api.enqueue(QUEUE, {"seconds": 0.1, "kind": "nightly"}, channel="umbrella", delay=3600)
    for n in range(3):  # the handler cannot read these: dead letters after one attempt
        api.enqueue(
            QUEUE, {"seconds": f"corrupt-{n}"}, channel=("globex", "hooli", "acme")[n], max_attempts=1
        )


def record_history(seconds: float) -> None:
    """One sample of every queue per second while the workers run (the workers' own sampler
    records one a minute: too few for a 20-second run)."""
    from django_lonnymq.models import QueueSample

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QueueSample.record()
        time.sleep(1.0)
    QueueSample.record()


def wait_for(url: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.3)


def photograph(base: str) -> list[Path]:
    from docs.browser import chromium  # the launch the admin's browser tests use too

    IMAGES.mkdir(parents=True, exist_ok=True)
    written = []
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 480})
        # The admin's navigation sidebar folded away: the pictures are about the queue.
        page.add_init_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
        page.goto(f"{base}/admin/login/?next=/admin/")
        page.fill("#id_username", USER)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_url(f"{base}/admin/")
        for name, path, ready in PAGES:
            page.goto(base + path)
            page.wait_for_selector(ready)
            target = IMAGES / name
            page.screenshot(path=str(target), full_page=True)
            written.append(target)
    return written


def main() -> int:
    args = parse_args()
    url = own_database_url(args.database_url)
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "example_project.settings"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    os.environ.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="example_project.settings")
    sys.path.insert(0, str(ROOT))
    # Playwright's sync API runs an event loop in this thread; the ORM calls are plain sync code.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command

    print(f"screenshots: migrating {url}")
    call_command("migrate", verbosity=0)
    User.objects.create_superuser(USER, "ops@example.com", PASSWORD)
    workload()

    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    flags = ["--queue", QUEUE, "--concurrency", "4", "--batch-size", "4"]
    workers = [manage("run_queue_worker", *flags, "--name", f"encoder-{n}", env=env, **quiet) for n in (1, 2)]
    port = free_port()
    server = manage("runserver", f"127.0.0.1:{port}", "--noreload", env=env, **quiet)
    try:
        print(f"screenshots: two workers run for {args.seconds:.0f} s, the queue sampled every second")
        record_history(args.seconds)
        workers[1].send_signal(signal.SIGTERM)  # shown as stopped; encoder-1 still works
        workers[1].wait(timeout=60)
        wait_for(f"http://127.0.0.1:{port}/admin/login/")
        for path in photograph(f"http://127.0.0.1:{port}"):
            print(f"screenshots: wrote {path.relative_to(ROOT)}")
    finally:
        for proc in [*workers, server]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in [*workers, server]:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
