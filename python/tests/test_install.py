"""`pip install ./python` works offline: with --no-build-isolation it builds
with the setuptools already installed (Debian's python3-setuptools), and
--no-index makes sure nothing is fetched. The installed copy then runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from conftest import PYTHON_DIR


def test_pip_install_offline(tmp_path):
    src = tmp_path / "src"  # a copy: building writes build/ and *.egg-info beside the sources
    shutil.copytree(PYTHON_DIR, src, ignore=shutil.ignore_patterns(
        "tests", "build", "*.egg-info", "__pycache__"))
    target = tmp_path / "site"
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                           "--no-index", "--no-deps", "--target", str(target), str(src)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (target / "nucleus" / "__init__.py").is_file()
    assert (target / "nucleus" / "py.typed").is_file()
    assert not list(target.glob("nucleus/*.so")), "the package holds no compiled extension"

    code = ("import nucleus\n"
            "print(nucleus.__file__)\n"
            "with nucleus.Model() as m:\n"
            "    print(m.generate('Once upon a time', max_tokens=8, temperature=0).text)\n")
    run_env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=run_env, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    first, text = out.stdout.split("\n", 1)
    assert first.startswith(str(target))
    assert text.startswith(", there was a little")
