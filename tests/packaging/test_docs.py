"""The documentation site builds strictly (`make docs`): a broken link, a missing anchor, a page
left out of the nav or a reference to a name that does not exist fails the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# django_independent: mkdocs builds the site from the source files without importing them (CONTRIBUTING.md)
pytestmark = pytest.mark.django_independent

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # Every page of docs/ is on the site, with the README, the changelog and the docstrings.
    for page in sorted((ROOT / "docs").glob("*.md")):
        built = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.is_file(), f"{page.name} was not built"
    overview = (site / "overview" / "index.html").read_text()
    assert 'href="docs/' not in overview  # the README's links point at the site's pages
    assert 'href="../api/"' in overview
    assert 'href="../failure-model/#a-handler-fails-hangs-or-takes-long"' in overview
    reference = (site / "reference" / "index.html").read_text()
    for name in ("django_lonnymq.api.enqueue", "django_lonnymq.testing.drain", "django_lonnymq.tasks.LonnyMQBackend",
                 "django_lonnymq.rates.Rate", "django_lonnymq.exceptions.LeaseLost", "django_lonnymq.logs.Formatter",
                 "django_lonnymq.spark.export.export", "django_lonnymq.pytest_plugin.lonnymq_drain"):  # fmt: skip
        assert f'id="{name}"' in reference, f"{name} is missing from the reference"
    assert ":func:" not in reference and ":class:" not in reference
    assert (site / "django_lonnymq" / "sql" / "schema.sql").read_text() == (
        ROOT / "django_lonnymq" / "sql" / "schema.sql"
    ).read_text()
