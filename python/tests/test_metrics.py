"""nucleus.bleu / sentence_bleu / rouge / rouge_bootstrap against the
reference tools' own test suites (the expected values are theirs, with the
precision they assert; tests/test_bleu.c and tests/test_rouge.c hold the
full sets):

  [SB]  mjpost/sacrebleu test/test_bleu.py @ 785d26bb42ff5cc738c8aa06efb288cf407fc4fd
  [SBS] mjpost/sacrebleu test/test_sentence_bleu.py @ ad62c9b5a4c1381598c0774c8ea1dc3597638ac0
  [ND]  nltk/nltk nltk/translate/bleu_score.py doctests (NLTK 3.8)
  [RS]  google-research/google-research rouge/rouge_scorer_test.py
        @ da0c44e0b13f46c6483b01608c3e7ba014655858 (testdata: tests/eval/rouge/)
  [SC]  google-research/google-research rouge/scoring_test.py
        @ 6503f2cfc3f520f25803c51d798ba54f9bd833c8
"""

from __future__ import annotations

import pytest

from conftest import REPO
import nucleus

def near(got, p, r, f, places=7):
    """assertAlmostEqual(want, got, places) on each measure."""
    for g, w in ((got.precision, p), (got.recall, r), (got.fmeasure, f)):
        assert round(abs(g - w), places) == 0, (got, p, r, f)


HYPS = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
REFS = [
    ["The dog bit the man.", "It was not unexpected.", "The man bit him first."],
    ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."],
]


@pytest.mark.parametrize(
    "options, want, eps",
    [  # [SB] test_corpus_bleu_cases
        ({}, 48.530827, 1e-6),
        ({"tokenize": "none"}, 49.1919566, 1e-7),
        ({"tokenize": "intl"}, 43.91623493, 1e-8),
        ({"smooth": "none"}, 48.530827, 1e-6),
    ],
)
def test_corpus_bleu(options, want, eps):
    assert abs(nucleus.bleu(HYPS, REFS, **options).score - want) < eps


def test_bleu_max_order():  # [SB] test_bleu_max_order
    want = ["77.65", "60.50", "53.93", "48.53", "46.14", "43.28"]
    got = [f"{nucleus.bleu(HYPS, REFS, max_order=n).score:.2f}" for n in range(1, 7)]
    assert got == want


def test_signature():
    s = nucleus.bleu(HYPS, REFS)
    assert s.signature.startswith("nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert len(s.precisions) == 4 and s.hyp_len == 17


SYS = "Producția de zahăr primă va fi exprimată în ceea ce privește zahărul alb;"
REF = "producţia de zahăr brut se exprimă în zahăr alb;"


@pytest.mark.parametrize(
    "options, want",
    [  # [SBS] test_api_sentence_bleu (EPSILON 1e-3)
        ({}, 8.493),
        ({"smooth": "none"}, 0.0),
        ({"smooth": "floor", "smooth_value": 0.5}, 10.10),
        ({"smooth": "add-k", "smooth_value": 2}, 21.389),
        ({"tokenize": "char"}, 40.8759),
        ({"tokenize": "char", "lowercase": True}, 42.0267),
    ],
)
def test_sentence_bleu(options, want):
    got = nucleus.sentence_bleu(SYS, [REF], effective_order=True, **options).score
    assert abs(got - want) < 1e-3


NLTK_HYP = ("It is a guide to action which ensures that the military always obeys the "
            "commands of the party")
NLTK_REFS = [
    "It is a guide to action that ensures that the military will forever heed Party commands",
    "It is the guiding principle which guarantees the military forces always being under the "
    "command of the Party",
    "It is the practical guide for the army always to heed the directions of the party",
]


def test_nltk_flavor():  # [ND] sentence_bleu's doctests: 0.5045..., with weights 1/5: 0.3920...
    assert str(nucleus.sentence_bleu(NLTK_HYP, NLTK_REFS, flavor="nltk").score).startswith("0.5045")
    five = nucleus.sentence_bleu(NLTK_HYP, NLTK_REFS, flavor="nltk", weights=[0.2] * 5)
    assert str(five.score).startswith("0.3920")


def test_bleu_bad_arguments():
    with pytest.raises(nucleus.NucleusError) as e:
        nucleus.bleu(HYPS, REFS, tokenize="13b")
    assert e.value.status == nucleus.Status.ERR_INVALID_ARG and "13b" in e.value.message
    with pytest.raises(nucleus.NucleusError):
        nucleus.bleu(HYPS, [REFS[0][:2]])
    with pytest.raises(nucleus.NucleusError):  # every reference empty (sacreBLEU refuses)
        nucleus.sentence_bleu("a b", [""])


def test_rouge_small_cases():  # [RS] testRouge1, testRouge2, testRougeLNonConsecutive
    near(nucleus.rouge("testing", "testing one two", ["rouge1"])["rouge1"], 1, 1 / 3, 1 / 2)
    near(nucleus.rouge("testing one", "testing one two", ["rouge2"])["rouge2"], 1, 1 / 2, 2 / 3)
    near(nucleus.rouge("testing two", "testing one two", ["rougeL"])["rougeL"], 1, 2 / 3, 4 / 5)
    two = nucleus.rouge("testing one", ["testing one two"], ["rouge1", "rougeL"])
    near(two["rouge1"], 1, 2 / 3, 4 / 5)  # [RS] testMultipleRougeTypes
    near(two["rougeL"], 1, 2 / 3, 4 / 5)
    with pytest.raises(nucleus.NucleusError):  # [RS] testInvalidRougeTypes
        nucleus.rouge("testing", "testing one two", ["rouge0"])


def test_rouge_against_rouge155():  # [RS] testRouge1AgainstRouge155WithStemming, ...Lsum
    data = REPO / "tests" / "eval" / "rouge"
    target = (data / "target.txt").read_text().splitlines(keepends=True)
    prediction = (data / "prediction.txt").read_text().splitlines(keepends=True)
    r = nucleus.rouge(prediction[1], target[1], ["rouge1"], stemmer=True)["rouge1"]
    near(r, 0.69231, 0.42857, 0.52941, 5)
    r = nucleus.rouge(prediction[0], target[0], ["rouge2"])["rouge2"]  # testRouge2AgainstRouge155
    near(r, 0.53333, 0.30769, 0.39024, 5)
    lsum = nucleus.rouge((data / "prediction_multi.0.txt").read_text(),
                         (data / "target_multi.0.txt").read_text(), ["rougeLsum"],
                         stemmer=True)["rougeLsum"]
    near(lsum, 0.66667, 0.36538, 0.47205, 5)


def test_rouge_bootstrap():  # [SC] testConsistentPercentiles (delta 1e-8)
    scores = [nucleus.RougeScore(1, 1 / 3, 1 / 2), nucleus.RougeScore(0, 0, 0),
              nucleus.RougeScore(1, 1, 1)]
    low, mid, high = nucleus.rouge_bootstrap(scores, confidence=0.9, seed=123)
    near(low, 1 / 3, 1 / 9, 1 / 6, 8)
    near(mid, 2 / 3, 4 / 9, 3 / 6, 8)
    near(high, 3 / 3, 7 / 9, 5 / 6, 8)
