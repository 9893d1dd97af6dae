"""Chat through the model's template, and perplexity against the command."""

from __future__ import annotations

import json

import pytest

import nucleus
from conftest import DEMO_MODEL, run_cli

MESSAGES = [
    {"role": "system", "content": "You tell short stories."},
    {"role": "user", "content": "Tell me about a cat."},
]


def test_render_equals_cli_template(model, nucleus_bin, tmp_path):
    (tmp_path / "m.json").write_text(json.dumps(MESSAGES))
    assert model.chat_template_name == "plain"  # stories260K has none of its own
    cli = run_cli(nucleus_bin, ["template", "-m", str(DEMO_MODEL), "--chat-template", "plain",
                                "--messages", str(tmp_path / "m.json"),
                                "--add-generation-prompt"]).stdout
    assert model.render_chat(MESSAGES) == cli


@pytest.mark.parametrize("name", ["chatml", "llama3", "zephyr"])
def test_builtin_template_equals_cli(nucleus_bin, tmp_path, name):
    (tmp_path / "m.json").write_text(json.dumps(MESSAGES))
    cli = run_cli(nucleus_bin, ["template", "-m", str(DEMO_MODEL), "--chat-template", name,
                                "--messages", str(tmp_path / "m.json"),
                                "--add-generation-prompt"]).stdout
    with nucleus.Model(chat_template=name) as m:
        assert m.chat_template_name == name
        got = m.render_chat(MESSAGES)
    assert got == cli


def test_chat_generates_the_reply(model):
    prompt = model.render_chat(MESSAGES)
    assert prompt.endswith("Assistant:")
    reply = model.chat(MESSAGES, max_tokens=48, temperature=0)
    plain = model.generate(prompt, max_tokens=48, temperature=0, special=True, stop="\nUser:")
    assert reply.text == plain.text
    assert "\nUser:" not in reply.text
    streamed = model.chat(MESSAGES, max_tokens=48, temperature=0, stream=True)
    assert "".join(streamed) == reply.text


def test_chat_template_errors():
    with pytest.raises(nucleus.NucleusError, match="neither a built-in"):
        with nucleus.Model(chat_template="no-such-template") as m:
            m.render_chat(MESSAGES)


TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the "
        "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high. "
        "Lily's mom said, \"Be careful, Lily!\" Lily smiled and ran to the swings.\n")


@pytest.mark.parametrize("window,score_from", [(None, None), (32, None), (24, 4), (16, 1)])
def test_perplexity_equals_cli(model, nucleus_bin, tmp_path, window, score_from):
    (tmp_path / "t.txt").write_text(TEXT)
    args = ["perplexity", "-m", str(DEMO_MODEL), "-f", str(tmp_path / "t.txt"), "--json"]
    kwargs = {}
    if window is not None:
        args += ["--window", str(window)]
        kwargs["window"] = window
    if score_from is not None:
        args += ["--score-from", str(score_from)]
        kwargs["score_from"] = score_from
    if window is None:  # chunks of the whole context: the text must hold one
        text = TEXT * 40
        (tmp_path / "t.txt").write_text(text)
    else:
        text = TEXT
    cli = json.loads(run_cli(nucleus_bin, args).stdout)
    got = model.perplexity(text, **kwargs)
    assert got.n_tokens == cli["tokens"]
    assert got.n_scored == cli["scored"] and got.n_windows == cli["windows"]
    assert got.n_scored > 0
    assert got.perplexity == pytest.approx(cli["perplexity"], rel=1e-6)
    assert got.stderr == pytest.approx(cli["stderr"], rel=1e-5, abs=1e-6)
    assert got.nll == pytest.approx(cli["nll"], rel=1e-6)


def test_perplexity_of_generated_text_is_low(model):
    text = "Once upon a time" + model.generate("Once upon a time", max_tokens=100,
                                               temperature=0).text
    greedy = model.perplexity(text, window=64)
    shuffled = " ".join(reversed(text.split()))
    assert greedy.perplexity < model.perplexity(shuffled, window=64).perplexity
