"""The README's quickstart runs as written: its blocks are the files of example_project/videos/,
and its test (a plain ``TestCase`` posting to a view that enqueues inside ``atomic()``,
under ``eager()``) passes here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from example_project.videos.tests import UploadTests  # noqa: F401 - collected and run here

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
