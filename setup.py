"""Build-time only: the package's long description is README.md with its relative links made absolute.

PyPI shows the long description as the project's page, where a relative link (``docs/ui.md``) or image
(``docs/screenshots/overview.png``) leads nowhere. README.md keeps its relative links - they work in the
repository and in a checkout - and the long description points them at the repository's files at this
release's tag: ``<Source>/blob/v<version>/<path>`` for links, the raw file for images, where ``Source`` is
``[project.urls]`` in pyproject.toml and ``<version>`` is ``airflow_streaming.__version__``. Everything
else about the package is in pyproject.toml (docs/packaging.md).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from urllib.parse import urlparse

from setuptools import setup

HERE = Path(__file__).resolve().parent
#: A Markdown link or image with an inline target: ``[text](target)`` / ``![alt](target)``.
MARKDOWN_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def package_version() -> str:
    """``__version__`` of airflow_streaming/__init__.py, read as text (nothing is imported at build time)."""
    text = (HERE / "airflow_streaming" / "__init__.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    if found is None:
        raise ValueError("airflow_streaming/__init__.py has no line __version__ = \"X.Y.Z\"")
    return found.group(1)


def absolute_links(markdown: str, repository: str, ref: str, document: str = "README.md") -> str:
    """``markdown`` with every relative link and image target made absolute on ``repository`` at ``ref``.

    Targets with a scheme (``https:``, ``mailto:``) stay; ``#anchor`` becomes ``document``'s anchor on the
    repository; links go to ``<repository>/blob/<ref>/<path>`` (``tree`` for a folder ending in ``/``),
    images to the raw file (``raw.githubusercontent.com`` for a github.com repository).
    """
    repository = repository.rstrip("/")
    url = urlparse(repository)
    if url.netloc == "github.com":
        raw = f"https://raw.githubusercontent.com{url.path}/{ref}"
    else:
        raw = f"{repository}/raw/{ref}"

    def absolute(match: re.Match[str]) -> str:
        bang, text, target = match.groups()
        if _SCHEME.match(target):
            return match.group(0)
        if target.startswith("#"):
            target = document + target
        path = target.removeprefix("./")
        if bang:
            return f"![{text}]({raw}/{path})"
        kind = "tree" if path.split("#", 1)[0].endswith("/") else "blob"
        return f"[{text}]({repository}/{kind}/{ref}/{path})"

    return MARKDOWN_LINK.sub(absolute, markdown)


def long_description() -> str:
    project = tomllib.loads((HERE / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    repository = project["urls"]["Source"]
    readme = (HERE / "README.md").read_text(encoding="utf-8")
    return absolute_links(readme, repository, f"v{package_version()}")


if __name__ == "__main__":
    setup(long_description=long_description(), long_description_content_type="text/markdown")
