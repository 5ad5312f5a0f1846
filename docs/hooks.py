"""MkDocs hooks (mkdocs.yml): the repository files the pages link to outside docs/ join the site.

README.md and CHANGELOG.md become the pages ``overview.md`` and ``changelog.md``; the SQL files
the pages cite are copied as they are, under the same path. Links that leave docs/ (``../README.md``
in a page, ``docs/api.md`` in the README) are pointed at those copies, so the Markdown reads the
same on a forge and on the site. Any other link out of docs/ is left alone, and the strict build
fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent

# Repository file -> its page on the site.
PAGES = {"README.md": "overview.md", "CHANGELOG.md": "changelog.md"}
# Repository files copied as they are.
COPIED = (
    "django_lonnymq/sql/schema.sql",
    "django_lonnymq/sql/queries.sql",
    "django_lonnymq/sql/stats.sql",
)

# An inline link's target: ](target) or ](target "title").
LINK = re.compile(r"(\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
# A Sphinx role left in a docstring, as Markdown renders it: :func:<code>~pkg.mod.name</code>.
ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):<code>(~?)([^<]*)</code>")


def on_files(files: Files, config: Any) -> Files:
    for source, uri in PAGES.items():
        files.append(File.generated(config, uri, abs_src_path=str(ROOT / source)))
    for source in COPIED:
        files.append(File.generated(config, source, abs_src_path=str(ROOT / source)))
    return files


def site_path(repo_path: str) -> str | None:
    """Where a repository file is on the site, or None when it is not there."""
    if repo_path.startswith("docs/"):
        return repo_path.removeprefix("docs/")
    if repo_path in PAGES:
        return PAGES[repo_path]
    if repo_path in COPIED:
        return repo_path
    return None


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    inverse = {uri: source for source, uri in PAGES.items()}
    # The page's own place in the repository: docs/<page>, or the file a generated page came from.
    repo_dir = (
        "" if page.file.src_uri in inverse else posixpath.join("docs", posixpath.dirname(page.file.src_uri))
    )
    page_dir = posixpath.dirname(page.file.src_uri)

    def rewrite(match: re.Match[str]) -> str:
        target = match.group(2)
        if "://" in target or target.startswith(("#", "mailto:")):
            return match.group(0)
        path, hash_, anchor = target.partition("#")
        repo_path = posixpath.normpath(posixpath.join(repo_dir, path))
        moved = site_path(repo_path)
        if moved is None:
            return match.group(0)
        relative = posixpath.relpath(moved, page_dir or ".")
        return f"{match.group(1)}{relative}{hash_}{anchor}{match.group(3)}"

    return LINK.sub(rewrite, markdown)


def on_page_content(html: str, page: Any, config: Any, files: Files) -> str:
    """Docstrings use Sphinx roles (``:func:`drain```); the reference shows them as code."""

    def plain(match: re.Match[str]) -> str:
        name = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
        return f"<code>{name}</code>"

    return ROLE.sub(plain, html)
