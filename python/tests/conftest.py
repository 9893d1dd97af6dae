"""Fixtures of the Python tests.

Run by ctest through run.sh, which sets NUCLEUS_LIBRARY (the built
libnucleus.so) and NUCLEUS_BIN (the built nucleus executable, to compare
against); run by hand, both default to the source tree's build/.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO = PYTHON_DIR.parent
sys.path.insert(0, str(PYTHON_DIR))

os.environ.setdefault("NUCLEUS_LIBRARY", str(REPO / "build" / "libnucleus.so"))

import nucleus  # noqa: E402

DEMO_MODEL = REPO / "models" / "stories260K.gguf"


@pytest.fixture(scope="session")
def nucleus_bin() -> str:
    path = os.environ.get("NUCLEUS_BIN", str(REPO / "build" / "nucleus"))
    assert os.access(path, os.X_OK), f"no nucleus executable at {path} (set NUCLEUS_BIN)"
    return path


@pytest.fixture(scope="session")
def model():
    """The demo model, shared by the tests that do not close it."""
    with nucleus.Model() as m:
        yield m


def run_cli(binary: str, args: List[str], check: bool = True) -> subprocess.CompletedProcess:
    """Runs the nucleus command; stdout and stderr as text."""
    proc = subprocess.run([binary] + args, capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"nucleus {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc
