"""The package as users get it: built into an sdist and a wheel, installed from the wheel into a
fresh virtualenv outside the checkout, and run in a throwaway Django project there.

Migrating proves every SQL file ships (each migration reads its own), a real worker proves the
queue runs, and the admin pages prove the templates ship. The venv holds the wheel, its
dependencies and the Django of the running suite, and nothing of the checkout: a file left out of
the wheel fails here even though the editable install finds it.
"""

from __future__ import annotations

import email
import json
import os
import subprocess
import sys
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import django
import psycopg
import pytest
import trove_classifiers
from django.db import connection

import django_lonnymq

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_lonnymq"

# The throwaway project: a handler that leaves a row the test can find.
HANDLERS = """
from django.contrib.auth.models import Group
from django_lonnymq import Message, handler


@handler("greet")
def greet(message: Message) -> None:
    Group.objects.create(name=f"greeted {message.payload['name']} in {message.channel}")
"""

SETTINGS = """
SECRET_KEY = "wheel-test-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "django_lonnymq",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "urls"
TEMPLATES = [
    {{
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {{
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        }},
    }}
]
DATABASES = {{"default": {database!r}}}
USE_TZ = True
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
"""

URLS = """
from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
"""

# Run in the project with `manage.py shell`: an admin user looks at the queue's pages.
ADMIN_PAGES = """
import json
from django.contrib.auth.models import User
from django.test import Client

client = Client()
client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
pages = {}
for name, url in [
    ("messages", "/admin/django_lonnymq/message/"),
    ("channels", "/admin/django_lonnymq/channel/"),
    ("dashboard", "/admin/django_lonnymq/channel/dashboard/"),
    ("dead", "/admin/django_lonnymq/deadmessage/"),
]:
    response = client.get(url)
    pages[name] = [response.status_code, response.content.decode()]
print("PAGES " + json.dumps(pages))
"""


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run a command; fail with its output when it fails."""
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        pytest.fail(f"{' '.join(map(str, args))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def scratch(path: Path) -> bool:
    """Files no one ships: bytecode, editor and patch leftovers, and the suffix-less temporary
    files of an in-place edit (``sed -i``) that may come and go while the suite runs."""
    return (
        path.name.startswith((".", "#"))
        or path.name.endswith("~")
        or path.suffix in {"", ".pyc", ".swp", ".orig", ".rej", ".tmp", ".bak"}
    )


def shipped_files() -> set[str]:
    """Package files that must be in the wheel: every SQL file, template and the typing marker."""
    wanted = {"django_lonnymq/py.typed"}
    for folder in ("sql", "templates"):
        for path in (PACKAGE / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and not scratch(path):
                wanted.add(path.relative_to(ROOT).as_posix())
    return wanted


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel, built from the checkout as `make dist` builds them."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, ROOT, cwd=out, timeout=600)
    (sdist,) = out.glob("django_lonnymq-*.tar.gz")
    (wheel,) = out.glob("django_lonnymq-*-py3-none-any.whl")
    return {"sdist": sdist, "wheel": wheel}


@pytest.fixture
def scratch_database(dsn: str) -> Iterator[dict[str, str]]:
    """A database of its own on the tests' server, dropped afterwards."""
    name = f"lq_wheel_{uuid.uuid4().hex[:12]}"
    settings = connection.settings_dict
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": settings["USER"],
            "PASSWORD": settings["PASSWORD"],
            "HOST": settings["HOST"],
            "PORT": str(settings["PORT"] or ""),
        }
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.django_independent  # what the archives hold; installing and running them is the next test
def test_the_wheel_holds_the_sql_templates_typing_marker_and_license(built: dict[str, Path]) -> None:
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
        dist_info = f"django_lonnymq-{django_lonnymq.__version__}.dist-info"
        metadata = email.message_from_bytes(wheel.read(f"{dist_info}/METADATA"))
        entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()
    missing = shipped_files() - names
    assert not missing, f"not in the wheel: {sorted(missing)}"
    assert f"{dist_info}/licenses/LICENSE" in names
    assert "django_lonnymq/pytest_plugin.py" in names
    assert metadata["Version"] == django_lonnymq.__version__ == "0.1.0"
    assert metadata["License-Expression"] == "MIT"
    classifiers = set(metadata.get_all("Classifier"))
    assert not classifiers - trove_classifiers.classifiers, "PyPI refuses unknown classifiers"
    assert "Typing :: Typed" in classifiers
    assert f"Framework :: Django :: {django.VERSION[0]}.{django.VERSION[1]}" in classifiers
    assert "lonnymq = django_lonnymq.pytest_plugin" in entry_points
    # Nothing of the checkout's tooling rides along.
    assert not [n for n in names if n.startswith(("tests/", "example_project/", "bench/", "docs/"))]

    with tarfile.open(built["sdist"]) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {"LICENSE", "README.md", "pyproject.toml"} <= members
    assert {name for name in shipped_files()} <= members


# About a minute on a quiet 2-core machine (the build, then pip installing Django and psycopg from
# its cache), two under load.
@pytest.mark.slow
def test_installed_from_the_wheel_it_migrates_runs_a_job_and_serves_the_admin(
    built: dict[str, Path], scratch_database: dict[str, str], tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    project = tmp_path / "project"
    assert not tmp_path.is_relative_to(ROOT)
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    # The running suite's pip installs into the new venv (--python); the pip cache is reused.
    run(
        sys.executable, "-m", "pip", "--python", python, "install", "--quiet",
        "--disable-pip-version-check", "--no-compile", built["wheel"], f"Django=={django.get_version()}",
        cwd=tmp_path, timeout=600,
    )  # fmt: skip

    (project / "shop").mkdir(parents=True)
    (project / "shop" / "__init__.py").write_text("")
    (project / "shop" / "handlers.py").write_text(HANDLERS)
    (project / "settings.py").write_text(SETTINGS.format(database=scratch_database))
    (project / "urls.py").write_text(URLS)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV", "PYTHONHOME"}
    }
    env.update(DJANGO_SETTINGS_MODULE="settings", PYTHONPATH=str(project), PYTHONDONTWRITEBYTECODE="1")

    def manage(*args: str) -> str:
        return run(python, "-m", "django", *args, cwd=project, env=env)

    where = run(python, "-c", "import django, django_lonnymq; print(django_lonnymq.__file__, django.get_version())",
                cwd=project, env=env).split()  # fmt: skip
    assert Path(where[0]).is_relative_to(venv), f"django_lonnymq came from {where[0]}, not the venv"
    assert where[1] == django.get_version()

    manage("migrate", "--noinput", "-v", "0")
    out = manage(
        "shell", "-v", "0", "-c",
        "from django_lonnymq import enqueue\n"
        "print('ID', enqueue('greet', {'name': 'wheel'}, channel='tenant-1'))\n"
        "enqueue('later', {'report': 7}, channel='tenant-2')",
    )  # fmt: skip
    assert out.split("ID ", 1)[1].strip().isdigit(), out
    worker = run(python, "-m", "django", "run_queue_worker", "--queue", "greet", "--burst",
                 cwd=project, env=env, timeout=120)  # fmt: skip

    dsn = {"dbname": scratch_database["NAME"], **{k.lower(): v for k, v in scratch_database.items()
                                                   if k in ("USER", "PASSWORD", "HOST", "PORT") and v}}  # fmt: skip
    with psycopg.connect(**dsn) as conn:
        groups = [row[0] for row in conn.execute("SELECT name FROM auth_group")]
        left = conn.execute(
            "SELECT c.queue, m.payload FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id"
        ).fetchall()
    assert groups == ["greeted wheel in tenant-1"], worker
    assert left == [("later", {"report": 7})]

    out = manage("shell", "-v", "0", "-c", ADMIN_PAGES)
    pages = json.loads(out.split("PAGES ", 1)[1])
    assert {name: status for name, (status, _) in pages.items()} == {
        "messages": 200, "channels": 200, "dashboard": 200, "dead": 200,
    }  # fmt: skip
    assert "tenant-2" in pages["messages"][1]  # the waiting message, by its channel
    assert "tenant-1" in pages["channels"][1] and "tenant-2" in pages["channels"][1]
    assert "later" in pages["dashboard"][1]


@pytest.mark.django_independent
def test_twine_accepts_the_wheel_and_the_sdist(built: dict[str, Path]) -> None:
    # What PyPI will show and accept (docs/releasing.md, step 5): twine is in the dev group.
    import importlib.util
    import shutil

    if importlib.util.find_spec("twine") is not None:
        twine = [sys.executable, "-m", "twine"]
    elif shutil.which("twine"):
        twine = [str(shutil.which("twine"))]
    else:
        pytest.fail("twine is not installed: it is in pyproject.toml's dev group (make install)")
    done = subprocess.run(
        [*twine, "check", "--strict", str(built["wheel"]), str(built["sdist"])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout
