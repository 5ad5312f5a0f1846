"""docs/testing.md's examples run as written: its blocks are files of example_project/videos/,
and their tests (unittest style, and pytest style on the plugin's fixtures) pass here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from example_project.videos.test_uploads_pytest import (  # noqa: F401 - collected and run here
    ada,
    test_a_worker_transcodes_every_upload,
    test_upload_enqueues_a_transcode_for_the_user,
    test_upload_transcodes,
)
from example_project.videos.test_uploads_unittest import (  # noqa: F401 - collected and run here
    TranscodeWorkerTests,
    UploadTests,
)

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```python\n# videos/(\w+\.py)\n(.*?)```", re.DOTALL)
EXAMPLES = ["test_uploads_unittest.py", "test_uploads_pytest.py"]


def doc_blocks() -> dict[str, str]:
    return dict(BLOCK.findall((ROOT / "docs" / "testing.md").read_text()))


def test_the_page_shows_both_example_files() -> None:
    assert set(doc_blocks()) == set(EXAMPLES)


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_block_is_the_file_the_suite_runs(name: str) -> None:
    app_file = (ROOT / "example_project" / "videos" / name).read_text()
    assert doc_blocks()[name].strip() == app_file.strip()
