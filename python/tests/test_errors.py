"""Failures raise nucleus.NucleusError carrying the library's status and
message: the same message the nucleus command prints after "nucleus: "."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

import nucleus
from conftest import DEMO_MODEL, PYTHON_DIR, run_cli


def cli_error(nucleus_bin, args):
    proc = run_cli(nucleus_bin, args, check=False)
    assert proc.returncode != 0
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("nucleus: ")
    return line[len("nucleus: "):]


def test_missing_file(nucleus_bin, tmp_path):
    path = str(tmp_path / "missing.gguf")
    with pytest.raises(nucleus.NucleusError) as e:
        nucleus.Model(path)
    assert e.value.status == nucleus.Status.ERR_IO
    assert e.value.status_name == "i/o error"
    assert str(e.value) == cli_error(nucleus_bin, ["generate", "-m", path, "-p", "x"])
    assert path in str(e.value)


def test_not_a_gguf_file(nucleus_bin, tmp_path):
    path = tmp_path / "junk.gguf"
    path.write_bytes(b"this is not a model" * 10)
    with pytest.raises(nucleus.NucleusError) as e:
        nucleus.Model(str(path))
    assert e.value.status == nucleus.Status.ERR_FORMAT
    assert str(e.value) == cli_error(nucleus_bin, ["generate", "-m", str(path), "-p", "x"])


@pytest.mark.parametrize("kind,flag,text", [
    ("grammar", "--grammar", 'root ::= "a" missing_rule'),
    ("grammar", "--grammar", 'root ::= "a" ('),
    ("json_schema", "--json-schema", '{"type": "object", "properties": {"a": {"type": "bogus"}}}'),
    ("regex", "--regex", "(ab"),
])
def test_bad_constraint(model, nucleus_bin, tmp_path, kind, flag, text):
    with pytest.raises(nucleus.NucleusError) as e:
        model.generate("x", max_tokens=4, **{kind: text})
    if flag == "--regex":
        cli_arg = text
    else:
        (tmp_path / "c.txt").write_text(text)
        cli_arg = str(tmp_path / "c.txt")
    assert str(e.value) == cli_error(nucleus_bin, ["generate", "-m", str(DEMO_MODEL), "-p", "x",
                                                   "-n", "4", flag, cli_arg])
    assert e.value.status in (nucleus.Status.ERR_FORMAT, nucleus.Status.ERR_INVALID_ARG,
                              nucleus.Status.ERR_UNSUPPORTED)


@pytest.mark.parametrize("options,word", [
    ({"temperature": 500}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"min_p": 2}, "min_p"),
    ({"n": 100}, "n"),
    ({"logit_bias": {100000: 1.0}}, "100000"),
    ({"sampler_order": "top_k,bogus"}, "bogus"),
    ({"watermark": {"key": "k", "gamma": 1.5}}, "gamma"),
])
def test_bad_parameters(model, options, word):
    with pytest.raises(nucleus.NucleusError) as e:
        model.generate("Once", max_tokens=4, **options)
    assert e.value.status == nucleus.Status.ERR_INVALID_ARG
    assert word in str(e.value)


def test_python_argument_errors(model):
    with pytest.raises(TypeError, match="unknown option"):
        model.generate("x", max_token=3)
    with pytest.raises(ValueError, match="max_tokens"):
        model.generate("x", max_tokens=2**40)  # never wrapped into 32 bits
    with pytest.raises(TypeError, match="top_k"):
        model.generate("x", top_k="5")
    with pytest.raises(ValueError, match="at most one"):
        model.generate("x", regex="a", json=True)
    with pytest.raises(TypeError, match="prompt"):
        model.generate(["x", 3])
    with pytest.raises(ValueError, match="token"):
        model.detokenize([512])
    with pytest.raises(ValueError, match="kv_type"):
        nucleus.Model(kv_type="f8")


def test_context_full(model):
    with nucleus.Model(n_ctx=16) as small:
        c = small.generate("Once upon a time", max_tokens=64, temperature=0)
        assert c.finish_reason == "context"
        assert len(c.tokens) < 16


def test_unreachable_download(monkeypatch, tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    monkeypatch.setenv("NUCLEUS_HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("NUCLEUS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(nucleus.NucleusError) as e:
        nucleus.Model("hf:ggml-org/models/tinyllamas/stories260K.gguf")
    assert e.value.status == nucleus.Status.ERR_NETWORK
    assert "NUCLEUS_HF_ENDPOINT" in str(e.value) and str(tmp_path / "cache") in str(e.value)
    assert not any((tmp_path / "cache").rglob("*"))


def test_library_not_found(tmp_path):
    code = ("import nucleus\n"
            "try:\n    nucleus.Model()\n"
            "except nucleus.LibraryNotFound as e:\n    print('not found:', e)\n")
    env = dict(os.environ, NUCLEUS_LIBRARY=str(tmp_path / "libnucleus.so"),
               PYTHONPATH=str(PYTHON_DIR))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "not found:" in out.stdout and "NUCLEUS_LIBRARY" in out.stdout
    assert str(tmp_path / "libnucleus.so") in out.stdout
