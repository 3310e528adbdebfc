"""Build step beyond pyproject.toml's metadata: the wheel carries the pages' templates and static
files inside the ``app.web`` package (they are kept at the repository's top level), so an
installed service serves every page and chart from anywhere (``app/web/assets.py``)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithAssets(build_py):  # type: ignore[misc]
    def run(self) -> None:
        super().run()
        for name in ("templates", "static"):
            source = ROOT / name
            if source.is_dir():  # an sdist carries them too (MANIFEST.in)
                target = Path(self.build_lib) / "app" / "web" / name
                shutil.copytree(source, target, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildWithAssets})
