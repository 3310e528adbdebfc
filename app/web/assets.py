"""Where the pages' templates and static files are: inside the installed package (a wheel
carries them under ``app/web/``, copied there by ``setup.py``'s build step), else in the source
tree they are kept in (``templates/`` and ``static/`` at the repository's top level, as an
editable install and the tests use them)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["STATIC", "TEMPLATES", "assets_dir"]


def assets_dir(name: str) -> Path:
    """The ``templates`` or ``static`` directory the running code should serve."""
    packaged = Path(__file__).resolve().parent / name
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / name


TEMPLATES = assets_dir("templates")
STATIC = assets_dir("static")
