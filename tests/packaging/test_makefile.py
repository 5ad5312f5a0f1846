"""The Makefile keeps the test-only system packages (chromium, plpgsql_check) out of the demo.

`make -n` prints every recipe a target would run on a fresh checkout (a venv directory that does
not exist, so the install step is due) without running any of it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEST_ONLY = ("apt-get", "chromium", "plpgsql", "plpgsql-check")


def dry_run(target: str, tmp_path: Path) -> str:
    """The commands `make TARGET` would run on a fresh checkout, printed and not run."""
    assert shutil.which("make"), "make is not on PATH"
    result = subprocess.run(
        [
            "make",
            "-n",
            "--no-print-directory",
            target,
            f"VENV={tmp_path}/venv",
            f"VENV6={tmp_path}/venv6",
            "PYTHON_DJANGO6=python3",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("target", ["demo", "install", "bench", "dist", "docs", "lint"])
def test_demo_and_install_never_touch_test_only_packages(target: str, tmp_path: Path) -> None:
    commands = dry_run(target, tmp_path)
    assert "pip install" in commands  # the fresh venv is due, so the install step is in the plan
    assert not [word for word in TEST_ONLY if word in commands], commands


@pytest.mark.parametrize("target", ["test-django52", "test-django6", "screenshots"])
def test_test_targets_install_or_name_chromium_and_plpgsql_check(target: str, tmp_path: Path) -> None:
    commands = dry_run(target, tmp_path)
    assert "apt-get install" in commands and "chromium" in commands, commands
    assert "plpgsql-check" in commands, commands
    assert "brew install --cask chromium" in commands  # where it cannot install, it says how
