"""Tokens: tokenize equals `nucleus tokenize --ids`; detokenize(tokenize(t)) == t."""

from __future__ import annotations

import pytest

from conftest import DEMO_MODEL, run_cli

TEXTS = ["Hello world", "Once upon a time, there was a little girl named Lily.",
         "  two leading spaces", "line\nbreak\ttab", "émoji 🙂 and 中文", "a", "", " "]


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(model, text):
    for add_bos in (True, False):
        tokens = model.tokenize(text, add_bos=add_bos)
        assert model.detokenize(tokens) == text


@pytest.mark.parametrize("text", [t for t in TEXTS if t.strip()])
def test_tokenize_equals_cli(model, nucleus_bin, text):
    out = run_cli(nucleus_bin, ["tokenize", "-m", str(DEMO_MODEL), "-p", text, "--ids"]).stdout
    assert model.tokenize(text) == [int(x) for x in out.split()]
    out = run_cli(nucleus_bin, ["tokenize", "-m", str(DEMO_MODEL), "-p", text, "--ids",
                                "--no-bos"]).stdout
    assert model.tokenize(text, add_bos=False) == [int(x) for x in out.split()]


def test_bos_and_special(model):
    assert model.bos == 1 and model.eos == 2
    assert model.tokenize("Hi")[0] == model.bos
    assert model.tokenize("Hi", add_bos=False)[0] != model.bos
    assert model.tokenize("<s>", add_bos=False, special=True) == [model.bos]
    assert model.bos not in model.tokenize("<s>", add_bos=False)
    assert model.detokenize([model.bos]) == ""
    assert model.detokenize([model.bos], special=True) == "<s>"


def test_generated_tokens_detokenize_to_the_text(model):
    c = model.generate("Once upon a time", max_tokens=40, seed=11)
    assert model.detokenize(c.tokens, strip_leading_space=False) == c.text


def test_long_text(model):
    text = "The cat sat on the mat. " * 400
    tokens = model.tokenize(text)
    assert len(tokens) > len(text) // 8
    assert model.detokenize(tokens) == text
