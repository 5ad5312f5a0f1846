"""The README's quickstart runs as written: its blocks are the files of example_project/videos/,
and its test (a plain ``TestCase`` posting to a view that enqueues inside ``atomic()``,
under ``eager()``) passes here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from example_project.videos.tests import UploadTests  # noqa: F401 - collected and run here
from tests import conftest as suite

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```python\n# videos/(\w+\.py)\n(.*?)```", re.DOTALL)


def readme_blocks() -> dict[str, str]:
    return {name: body for name, body in BLOCK.findall((ROOT / "README.md").read_text())}


def test_the_readme_shows_every_file_of_the_quickstart_app():
    assert set(readme_blocks()) == {"models.py", "views.py", "handlers.py", "tests.py"}


@pytest.mark.parametrize("name", ["models.py", "views.py", "handlers.py", "tests.py"])
def test_each_readme_block_is_the_file_the_suite_runs(name: str):
    app_file = (ROOT / "example_project" / "videos" / name).read_text()
    assert readme_blocks()[name].strip() == app_file.strip()


@pytest.mark.django_db(transaction=True)
def test_the_quickstart_runs_with_a_real_worker(client, start_worker):
    """Production's path: the view commits the video and its message; a real worker process
    (``run_queue_worker --queue videos --burst``) runs the README's handler."""
    from django.contrib.auth.models import User

    from example_project.videos.models import Video

    client.force_login(User.objects.create_user("grace"))
    response = client.post("/upload/", {"title": "Lecture"})
    assert response.status_code == 200, response.content
    video = Video.objects.get(id=response.json()["id"])
    assert not video.transcoded  # nothing ran in this process
    worker = start_worker("--queue", "videos", "--burst")
    output, _ = worker.communicate(timeout=120)
    assert worker.returncode == 0, output
    video.refresh_from_db()
    assert video.transcoded, output


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_the_quickstart_app_passes_manage_py_test(tmp_path):
    """The README's test as a Django project runs it: ``manage.py test`` on a database of its own."""
    base = suite.test_database_url()
    url = f"{base}_quickstart"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "test",
            "example_project.videos.tests",
            "--noinput",
            "-v",
            "1",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Ran 1 test" in done.stderr and "OK" in done.stderr, done.stderr
