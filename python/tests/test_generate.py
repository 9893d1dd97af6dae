"""Generation from Python against the nucleus command on the demo model:
greedy text identical to `nucleus generate --temp 0`, samples and log-probs
identical to its JSON output, streams equal to the whole, seeds, batches."""

from __future__ import annotations

import json
import threading

import pytest

import nucleus
from conftest import DEMO_MODEL, run_cli

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park. They"]


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("n", [1, 16, 64])
def test_greedy_equals_cli(model, nucleus_bin, prompt, n):
    cli = run_cli(nucleus_bin, ["generate", "-m", str(DEMO_MODEL), "-p", prompt, "-n", str(n),
                                "--temp", "0", "--no-summary"]).stdout
    got = model.generate(prompt, max_tokens=n, temperature=0)
    assert cli.endswith("\n")  # the command ends the text's line
    assert got.text == cli[:-1]
    assert got.finish_reason == "length"
    assert len(got.tokens) == n


def test_demo_model_is_the_default(model):
    assert model.path == str(DEMO_MODEL)
    assert model.arch == "llama" and model.n_vocab == 512 and model.n_layer == 5


def _cli_samples(nucleus_bin, args):
    out = run_cli(nucleus_bin, ["generate", "-m", str(DEMO_MODEL), "--json-output",
                                "--no-summary"] + args).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_samples_and_logprobs_equal_cli(model, nucleus_bin):
    cli = _cli_samples(nucleus_bin, ["-p", "Once upon a time", "-n", "24", "--samples", "3", "--seed", "42", "--logprobs", "3"])
    got = model.generate("Once upon a time", max_tokens=24, n=3, seed=42, logprobs=3)
    assert len(got) == len(cli) == 3
    for g, c in zip(got, cli):
        assert g.text == c["text"]
        assert g.tokens == c["tokens"]
        assert g.finish_reason == c["finish_reason"]
        assert len(g.logprobs) == len(c["logprobs"]) == len(g.tokens)
        for lp, clp in zip(g.logprobs, c["logprobs"]):
            assert lp.token == clp["token"] and lp.text == clp["text"]
            assert lp.logprob == pytest.approx(clp["logprob"], rel=1e-6, abs=1e-7)
            assert [t for t, _ in lp.top] == [t["token"] for t in clp["top"]]
            assert lp.top[0][1] >= lp.top[-1][1]
        assert g.sum_logprob == pytest.approx(sum(lp.logprob for lp in g.logprobs), rel=1e-5)
    assert len({g.text for g in got}) > 1, "three seeded samples should not all agree"


def test_logprob_offsets_point_at_token_text(model):
    c = model.generate("Once upon a time", max_tokens=20, temperature=0, logprobs=0)
    for lp in c.logprobs:
        assert c.text[lp.offset:].startswith(lp.text)
        assert lp.top == []


def test_stream_joins_to_the_whole(model):
    for options in ({"temperature": 0}, {"seed": 7}, {"seed": 7, "stop": ["park"]},
                    {"temperature": 0.9, "top_k": 0, "top_p": 1, "min_p": 0, "seed": 3}):
        whole = model.generate("Once upon a time", max_tokens=48, **options)
        stream = model.stream("Once upon a time", max_tokens=48, **options)
        pieces = list(stream)
        assert len(pieces) > 1
        assert "".join(pieces) == whole.text
        assert stream.result is not None and stream.result.tokens == whole.tokens
        assert stream.result.finish_reason == whole.finish_reason


def test_stop_string_ends_the_text(model):
    whole = model.generate("Once upon a time", max_tokens=64, temperature=0)
    assert "park" in whole.text
    cut = model.generate("Once upon a time", max_tokens=64, temperature=0, stop="park")
    assert cut.finish_reason == "stop"
    assert cut.text == whole.text[: whole.text.index("park")]
    kept = model.generate("Once upon a time", max_tokens=64, temperature=0, stop=["park"],
                          include_stop=True)
    assert kept.text == whole.text[: whole.text.index("park") + 4]


def test_seeds_reproduce(model):
    a = model.generate("Once upon a time", max_tokens=40, seed=1234)
    b = model.generate("Once upon a time", max_tokens=40, seed=1234)
    c = model.generate("Once upon a time", max_tokens=40, seed=1235)
    assert a.tokens == b.tokens and a.text == b.text
    assert c.tokens != a.tokens


def test_seed_equals_cli(model, nucleus_bin):
    cli = run_cli(nucleus_bin, ["generate", "-m", str(DEMO_MODEL), "-p", "The little dog",
                                "-n", "40", "--seed", "99", "--temp", "1.1", "--no-summary"]).stdout
    assert model.generate("The little dog", max_tokens=40, seed=99, temperature=1.1).text + "\n" == cli


def test_batch_equals_one_by_one(model):
    together = model.generate(PROMPTS, max_tokens=24, seed=5)
    alone = [model.generate(p, max_tokens=24, seed=5) for p in PROMPTS]
    assert [c.text for c in together] == [c.text for c in alone]
    assert [c.tokens for c in together] == [c.tokens for c in alone]
    samples = model.generate(PROMPTS[:2], max_tokens=8, n=2, seed=5)
    assert [len(s) for s in samples] == [2, 2]
    assert samples[0][0].text == model.generate(PROMPTS[0], max_tokens=8, n=2, seed=5)[0].text


def test_batch_equals_cli_prompts_file(model, nucleus_bin, tmp_path):
    (tmp_path / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    cli = _cli_samples(nucleus_bin, ["--prompts", str(tmp_path / "prompts.txt"), "-n", "16",
                                     "--temp", "0"])
    got = model.generate(PROMPTS, max_tokens=16, temperature=0)
    assert [c.text for c in got] == [c["text"] for c in cli]


def test_threads_take_turns(model):
    want = model.generate("Once upon a time", max_tokens=32, temperature=0).text
    got = []

    def worker():
        got.append(model.generate("Once upon a time", max_tokens=32, temperature=0).text)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [want] * 4


def test_early_close_frees_the_model(model):
    stream = model.stream("Once upon a time", max_tokens=64, temperature=0)
    first = next(stream)
    assert first
    with pytest.raises(RuntimeError, match="unfinished stream"):
        model.generate("x", max_tokens=2)
    stream.close()
    assert model.generate("Once upon a time", max_tokens=8, temperature=0).text.startswith(first)
    with model.stream("Once upon a time", max_tokens=64) as s:
        for _ in s:
            break
    assert model.generate("Once", max_tokens=2, temperature=0).text


def test_echo_and_prompt_logprobs(model):
    c = model.generate("Once upon a time", max_tokens=4, temperature=0, echo=True, logprobs=1)
    assert c.text.startswith("Once upon a time")
    assert c.prompt_logprobs is not None and len(c.prompt_logprobs) >= 1
    assert len(c.logprobs) == 4


def test_max_tokens_minus_one_runs_to_the_end(model):
    c = model.generate("Once upon a time", max_tokens=-1, temperature=0)
    assert c.finish_reason in ("eos", "context")
    assert len(c.tokens) > 64


def test_close_and_context_manager():
    with nucleus.Model(n_ctx=256, n_threads=1) as m:
        assert m.n_ctx == 256
        assert m.generate("Once", max_tokens=3, temperature=0).tokens
    assert m.closed
    with pytest.raises(ValueError, match="closed"):
        m.generate("Once", max_tokens=3)
    with pytest.raises(ValueError, match="closed"):
        m.tokenize("Once")
    m.close()  # again: nothing happens


# llama.cpp's samplers and the bans, by their keyword names: the same text as
# the command line with the same settings; banned strings never appear.
SAMPLER_CASES = [
    ({"dry_multiplier": 2.0, "dry_allowed_length": 2, "dry_penalty_last_n": -1},
     ["--dry-multiplier", "2", "--dry-allowed-length", "2", "--dry-penalty-last-n", "-1"]),
    ({"dry_multiplier": 1.0, "dry_sequence_breakers": ["."]},
     ["--dry-multiplier", "1", "--dry-sequence-breaker", "."]),
    ({"xtc_probability": 0.5, "xtc_threshold": 0.1}, ["--xtc-probability", "0.5", "--xtc-threshold", "0.1"]),
    ({"top_n_sigma": 1.0}, ["--top-n-sigma", "1"]),
    ({"dynatemp_range": 0.5, "dynatemp_exponent": 2.0}, ["--dynatemp-range", "0.5", "--dynatemp-exp", "2"]),
    ({"mirostat": 1, "mirostat_tau": 3.0, "mirostat_eta": 0.2},
     ["--mirostat", "1", "--mirostat-tau", "3", "--mirostat-eta", "0.2"]),
    ({"mirostat": 2, "mirostat_tau": 3.0}, ["--mirostat", "2", "--mirostat-tau", "3"]),
    ({"banned_strings": ["Lily", " park"], "banned_tokens": [[13, 14], 29]},
     ["--ban", "Lily", "--ban", " park", "--ban-tokens", "13,14", "--ban-tokens", "29"]),
]


@pytest.mark.parametrize("kwargs,flags", SAMPLER_CASES)
def test_samplers_equal_cli(model, nucleus_bin, kwargs, flags):
    cli = _cli_samples(nucleus_bin, ["-p", "Once upon a time", "-n", "40", "--seed", "7"] + flags)
    got = model.generate("Once upon a time", max_tokens=40, seed=7, **kwargs)
    assert got.text == cli[0]["text"]
    assert got.tokens == cli[0]["tokens"]


def test_banned_strings_never_appear(model):
    plain = model.generate("Once upon a time", max_tokens=60, temperature=0)
    assert "Lily" in plain.text
    for seed in range(4):
        got = model.generate("Once upon a time", max_tokens=60, seed=seed,
                             banned_strings=["Lily"])
        assert "Lily" not in got.text


def test_bad_sampler_values_raise(model):
    for kwargs in ({"mirostat": 3}, {"dry_base": 0.5}, {"xtc_threshold": 2.0},
                   {"banned_strings": [""]}, {"dry_sequence_breakers": ["x" * 41]}):
        with pytest.raises(nucleus.NucleusError):
            model.generate("Once upon a time", max_tokens=2, **kwargs)
