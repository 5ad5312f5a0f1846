"""The package version and CHANGELOG.md agree (docs/releasing.md, "Cutting a release")."""

import re
from pathlib import Path

import django_lonnymq

ROOT = Path(__file__).resolve().parents[2]
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", re.M)


def as_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_the_version_is_semantic() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", django_lonnymq.__version__), django_lonnymq.__version__


def test_the_newest_release_in_the_changelog_is_the_package_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\]", changelog, re.M)
    assert headings and headings[0] == "Unreleased", headings
    released = RELEASE.findall(changelog)
    assert len(released) == len(headings) - 1, (
        f"a release heading is not '## [X.Y.Z] - YYYY-MM-DD': {headings}"
    )
    assert released == sorted(released, key=as_tuple, reverse=True), released
    if released:
        # A cut release: its section is the newest one and says how to upgrade to it.
        assert released[0] == django_lonnymq.__version__, (released[0], django_lonnymq.__version__)
        for version in released:
            assert f"Upgrading to {version}" in changelog, version
    else:
        # Nothing cut yet: the package still carries its first version.
        assert django_lonnymq.__version__ == "0.1.0", django_lonnymq.__version__


def test_superseded_functions_name_a_later_release() -> None:
    # A function stays installed in the release that stopped calling it; the one named in
    # superseded.sql's comments, which may drop it, comes after the package's version.
    text = (ROOT / "django_lonnymq" / "sql" / "superseded.sql").read_text()
    named = set(re.findall(r"may be dropped in (\d+\.\d+\.\d+)", text))
    assert named, "superseded.sql names no release"
    for version in named:
        assert as_tuple(version) > as_tuple(django_lonnymq.__version__), version
