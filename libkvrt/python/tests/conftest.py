# SPDX-License-Identifier: MIT
"""pytest only: from a checkout, ``python3 -m pytest libkvrt/python/tests``
finds the kvrt package in ../src when none is installed (check.sh runs
these tests against the installed copy, which then wins)."""
import importlib.util
import os
import sys

if importlib.util.find_spec("kvrt") is None:
    SRC = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    sys.path.insert(0, SRC)
    # the tests' child interpreters import kvrt too
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH"))
                                               if p)
