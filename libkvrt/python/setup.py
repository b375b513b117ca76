# SPDX-License-Identifier: MIT
"""Bundle libkvrt.so.0 into the package when it is built from the kvpool tree.

``make lib && pip install ./libkvrt/python`` then gives an engine's venv a
``kvrt`` that loads its own copy of the library (``kvrt/_bundled/``) with
nothing else set, and a wheel tagged for this platform.  Built from a copy
of the package alone (no ``../build``), it stays pure Python and finds the
library as ``kvrt._lib`` says.  Everything else is in pyproject.toml.
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
BUILT = os.path.normpath(os.path.join(HERE, "..", "build", "libkvrt.so.0"))
IN_TREE = os.path.exists(os.path.join(HERE, "..", "include", "kvrt.h"))


def _bundle() -> bool:
    """Whether this build bundles the library; refuse a tree not yet built."""
    if os.environ.get("KVRT_BUNDLE_LIBRARY", "1") == "0" or not IN_TREE:
        return False
    if not os.path.exists(BUILT):
        raise SystemExit(f"kvrt: {BUILT} is not built: run `make lib` at the top of the "
                         "kvpool tree first (or set KVRT_BUNDLE_LIBRARY=0 to install "
                         "without it; then the loader must find libkvrt.so.0, e.g. after "
                         "`make install`)")
    return True


class BuildPyWithLibrary(build_py):
    def run(self) -> None:
        super().run()
        if _bundle():
            dest = os.path.join(self.build_lib, "kvrt", "_bundled")
            os.makedirs(dest, exist_ok=True)
            shutil.copy2(os.path.realpath(BUILT), os.path.join(dest, "libkvrt.so.0"))


class PlatformDistribution(Distribution):
    # A bundled shared library makes the wheel this platform's, not "any".
    def has_ext_modules(self) -> bool:
        return _bundle()


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=PlatformDistribution)
