"""Text metrics over the library's nu_bleu_* and nu_rouge_* (no model needed).

``bleu`` and ``sentence_bleu`` score as sacreBLEU does (or NLTK, with
``flavor="nltk"``); ``rouge`` as Google's rouge-score does; ``rouge_bootstrap``
gives rouge-score's BootstrapAggregator intervals of a list of scores. The
command line's ``nucleus score bleu|rouge`` runs the same code.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

from . import _ffi
from ._model import NucleusError, _check

__all__ = ["BleuScore", "RougeScore", "bleu", "sentence_bleu", "rouge", "rouge_bootstrap"]


@dataclass(frozen=True)
class BleuScore:
    """A BLEU score: ``score`` (sacreBLEU: 0-100; NLTK: 0-1), the n-gram
    ``precisions`` (sacreBLEU: percent), the brevity penalty ``bp``, the length
    ``ratio``, ``hyp_len``, ``ref_len`` and sacreBLEU's ``signature`` ("" for
    NLTK's flavor)."""

    score: float
    precisions: Tuple[float, ...]
    bp: float
    ratio: float
    hyp_len: int
    ref_len: int
    signature: str


@dataclass(frozen=True)
class RougeScore:
    """Precision, recall and F-measure of one ROUGE type."""

    precision: float
    recall: float
    fmeasure: float


def _choice(table: Dict[str, Tuple[int, str]], name: str, what: str) -> int:
    if name not in table:
        raise NucleusError(
            _ffi.Status.ERR_INVALID_ARG, f"unknown {what} '{name}' (one of {', '.join(table)})"
        )
    return table[name][0]


def _params(
    flavor: str,
    tokenize: Optional[str],
    lowercase: bool,
    smooth: Optional[str],
    smooth_value: Optional[float],
    max_order: int,
    effective_order: bool,
    weights: Optional[Sequence[float]],
    auto_reweigh: bool,
) -> _ffi.nu_bleu_params:
    p = _ffi.lib().nu_bleu_default_params(_choice(_ffi.BLEU_FLAVORS, flavor, "BLEU flavor"))
    if tokenize is not None:
        p.tokenizer = _choice(_ffi.BLEU_TOKENIZERS, tokenize, "tokenizer")
    if smooth is not None:
        p.smooth = _choice(_ffi.BLEU_SMOOTHS, smooth, "smoothing method")
    p.lowercase = lowercase
    p.smooth_value = -1.0 if smooth_value is None else float(smooth_value)
    p.max_order = max_order
    p.effective_order = effective_order
    if weights is not None:
        if not 0 < len(weights) <= _ffi.BLEU_MAX_ORDER:
            raise NucleusError(
                _ffi.Status.ERR_INVALID_ARG,
                f"weights: 1 to {_ffi.BLEU_MAX_ORDER} values, not {len(weights)}",
            )
        p.n_weights = len(weights)
        for i, w in enumerate(weights):
            p.weights[i] = float(w)
    p.auto_reweigh = auto_reweigh
    return p


def _strings(texts: Sequence[Optional[str]]):
    arr = (ctypes.c_char_p * max(len(texts), 1))()
    for i, t in enumerate(texts):
        arr[i] = None if t is None else t.encode("utf-8")
    return arr


def _segment(p: _ffi.nu_bleu_params, hyp: str, refs: Sequence[Optional[str]]) -> _ffi.nu_bleu_stats:
    s, err = _ffi.nu_bleu_stats(), _ffi.nu_error()
    st = _ffi.lib().nu_bleu_segment(
        ctypes.byref(p), hyp.encode("utf-8"), _strings(refs), len(refs), ctypes.byref(s),
        ctypes.byref(err)
    )
    _check(st, err)
    return s


def _score(p: _ffi.nu_bleu_params, stats: _ffi.nu_bleu_stats) -> BleuScore:
    lib, r, err = _ffi.lib(), _ffi.nu_bleu_result(), _ffi.nu_error()
    _check(lib.nu_bleu_compute(ctypes.byref(p), ctypes.byref(stats), ctypes.byref(r),
                               ctypes.byref(err)), err)
    sig = ctypes.create_string_buffer(512)
    if p.flavor == _ffi.BLEU_FLAVORS["sacrebleu"][0]:  # NLTK has none
        _check(lib.nu_bleu_signature(ctypes.byref(p), ctypes.byref(stats), sig, len(sig),
                                     ctypes.byref(err)), err)
    return BleuScore(
        score=r.score,
        precisions=tuple(r.precisions[i] for i in range(r.order)),
        bp=r.bp,
        ratio=r.ratio,
        hyp_len=r.hyp_len,
        ref_len=r.ref_len,
        signature=sig.value.decode(),
    )


def bleu(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[Optional[str]]],
    *,
    flavor: str = "sacrebleu",
    tokenize: Optional[str] = None,
    lowercase: bool = False,
    smooth: Optional[str] = None,
    smooth_value: Optional[float] = None,
    max_order: int = 4,
    effective_order: bool = False,
    weights: Optional[Sequence[float]] = None,
    auto_reweigh: bool = False,
) -> BleuScore:
    """Corpus BLEU of ``hypotheses`` against reference streams, as sacreBLEU's
    ``corpus_bleu(hypotheses, references)`` takes them: ``references[r][i]``
    is the r-th reference of hypothesis i (``None`` for a missing one).

    ``tokenize``: "13a" (sacreBLEU's default), "intl", "zh", "char", "none";
    ``smooth``: "exp" (default), "floor", "add-k", "none", or with
    ``flavor="nltk"`` NLTK's "method0" .. "method7" (NLTK: whitespace tokens
    as given, ``weights`` for orders 1..len(weights), default 1/4 each)."""
    p = _params(flavor, tokenize, lowercase, smooth, smooth_value, max_order, effective_order,
                weights, auto_reweigh)
    for r, stream in enumerate(references):
        if len(stream) != len(hypotheses):
            raise NucleusError(
                _ffi.Status.ERR_INVALID_ARG,
                f"reference stream {r} has {len(stream)} segments, the hypotheses "
                f"{len(hypotheses)}",
            )
    total = _ffi.nu_bleu_stats()
    lib = _ffi.lib()
    for i, hyp in enumerate(hypotheses):
        seg = _segment(p, hyp, [stream[i] for stream in references])
        lib.nu_bleu_stats_add(ctypes.byref(total), ctypes.byref(seg))
    return _score(p, total)


def sentence_bleu(hypothesis: str, references: Sequence[Optional[str]], **options) -> BleuScore:
    """BLEU of one hypothesis against its references (sacreBLEU's
    ``sentence_bleu``; the options are :func:`bleu`'s; sacreBLEU's
    sentence_bleu uses ``effective_order=True``, pass it to match)."""
    return bleu([hypothesis], [[r] for r in references], **options)


def _rouge_types(types: Sequence[str]):
    arr = (ctypes.c_int32 * max(len(types), 1))()
    err = _ffi.nu_error()
    for i, name in enumerate(types):
        t = ctypes.c_int32()
        _check(_ffi.lib().nu_rouge_type(name.encode(), ctypes.byref(t), ctypes.byref(err)), err)
        arr[i] = t.value
    return arr


def rouge(
    prediction: str,
    targets,
    types: Sequence[str] = ("rouge1", "rouge2", "rougeL"),
    *,
    stemmer: bool = False,
) -> Dict[str, RougeScore]:
    """ROUGE of ``prediction`` against one target (a string) or several (a
    list: each type takes the target of highest F-measure, as rouge-score's
    ``score_multi``), as ``RougeScorer(types, use_stemmer=stemmer)`` scores
    it. Types: "rouge1" .. "rouge9", "rougeL", "rougeLsum" (newlines
    separate its sentences)."""
    if isinstance(targets, str):
        targets = [targets]
    out = (_ffi.nu_rouge_score * max(len(types), 1))()
    err = _ffi.nu_error()
    st = _ffi.lib().nu_rouge(
        _rouge_types(types), len(types), stemmer, _strings(targets), len(targets),
        prediction.encode("utf-8"), out, ctypes.byref(err)
    )
    _check(st, err)
    return {t: RougeScore(out[i].precision, out[i].recall, out[i].fmeasure)
            for i, t in enumerate(types)}


def rouge_bootstrap(
    scores: Sequence[RougeScore],
    *,
    confidence: float = 0.95,
    n_samples: int = 1000,
    seed: int = 0,
) -> Tuple[RougeScore, RougeScore, RougeScore]:
    """(low, mid, high) of the mean of ``scores`` by bootstrap resampling, as
    rouge-score's BootstrapAggregator (its draws are nucleus's own)."""
    arr = (_ffi.nu_rouge_score * max(len(scores), 1))()
    for i, s in enumerate(scores):
        arr[i] = _ffi.nu_rouge_score(s.precision, s.recall, s.fmeasure)
    iv, err = _ffi.nu_rouge_interval(), _ffi.nu_error()
    st = _ffi.lib().nu_rouge_bootstrap(arr, len(scores), confidence, n_samples, seed,
                                       ctypes.byref(iv), ctypes.byref(err))
    _check(st, err)

    def conv(s: _ffi.nu_rouge_score) -> RougeScore:
        return RougeScore(s.precision, s.recall, s.fmeasure)

    return conv(iv.low), conv(iv.mid), conv(iv.high)

