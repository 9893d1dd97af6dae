"""The C side: ctypes mirrors of include/nucleus.h and the shared library.

Every structure here has the field names, types and order of its C
declaration, so that its size and every field offset equal the C ones
(python/tests/test_abi.py compiles a probe against nucleus.h and compares).
Opaque handles (nu_model, nu_context, nu_scheduler, nu_grammar,
nu_chat_template) are plain void pointers.

The library is found, on first use, in this order:

1. ``$NUCLEUS_LIBRARY`` (a path to ``libnucleus.so``);
2. beside this package (``nucleus/libnucleus.so*``);
3. a build directory of the source tree the package sits in
   (``<repo>/build/libnucleus.so``);
4. the system's library path (``libnucleus.so.0``, as ``cmake --install`` lays it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
import os
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_bool,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import List, Optional

# Sizes fixed by the header.
ERROR_MESSAGE_SIZE = 512
MAX_STAGES = 16  # NU_MAX_STAGES
MAX_TOP_LOGPROBS = 20  # NU_MAX_TOP_LOGPROBS
DETOKENIZER_PENDING = 8

# ---------------------------------------------------------------------------
# Enumerations (C enums are ints)
# ---------------------------------------------------------------------------


class Status(enum.IntEnum):
    """nu_status."""

    OK = 0
    ERR_IO = 1
    ERR_FORMAT = 2
    ERR_UNSUPPORTED = 3
    ERR_NOMEM = 4
    ERR_INVALID_ARG = 5
    ERR_CONTEXT_FULL = 6
    ERR_BUFFER_SMALL = 7
    ERR_NETWORK = 8
    ERR_CHECKSUM = 9
    ERR_CANCELLED = 10


class FinishReason(enum.IntEnum):
    """nu_finish_reason."""

    NONE = 0
    LENGTH = 1
    EOS = 2
    STOP = 3
    CONTEXT = 4
    CANCELLED = 5


class LoadMode(enum.IntEnum):
    """nu_load_mode."""

    FULL = 0
    VOCAB_ONLY = 1
    METADATA_ONLY = 2


class KvType(enum.IntEnum):
    """nu_kv_type."""

    SAME = -1
    F32 = 0
    F16 = 1
    Q8_0 = 2
    Q4_0 = 3


class PerplexityMode(enum.IntEnum):
    """nu_perplexity_mode."""

    CHUNKS = 0  # llama-perplexity's
    WINDOWS = 1


# nu_tokenize flags
TOKENIZE_ADD_BOS = 1 << 0
TOKENIZE_PARSE_SPECIAL = 1 << 1

# BLEU (nu_bleu_flavor, nu_bleu_tokenizer, nu_bleu_smooth) by the names the
# command line uses, with their C names for the ABI test.
BLEU_FLAVORS = {"sacrebleu": (0, "NU_BLEU_SACREBLEU"), "nltk": (1, "NU_BLEU_NLTK")}
BLEU_TOKENIZERS = {
    "13a": (0, "NU_BLEU_TOK_13A"),
    "intl": (1, "NU_BLEU_TOK_INTL"),
    "zh": (2, "NU_BLEU_TOK_ZH"),
    "char": (3, "NU_BLEU_TOK_CHAR"),
    "none": (4, "NU_BLEU_TOK_NONE"),
}
BLEU_SMOOTHS = {
    "exp": (0, "NU_BLEU_SMOOTH_EXP"),
    "floor": (1, "NU_BLEU_SMOOTH_FLOOR"),
    "add-k": (2, "NU_BLEU_SMOOTH_ADD_K"),
    "none": (3, "NU_BLEU_SMOOTH_NONE"),
    **{f"method{i}": (4 + i, f"NU_BLEU_NLTK_METHOD{i}") for i in range(8)},
}
ROUGE_L = 10  # NU_ROUGE_L
ROUGE_LSUM = 11  # NU_ROUGE_LSUM

# The C constant names of the enumerations above, for the ABI test.
ENUM_CONSTANTS = {
    **{f"NU_{m.name}": m.value for m in Status},
    **{f"NU_FINISH_{m.name}": m.value for m in FinishReason},
    **{f"NU_LOAD_{m.name}": m.value for m in LoadMode},
    **{f"NU_KV_{m.name}": m.value for m in KvType},
    "NU_TOKENIZE_ADD_BOS": TOKENIZE_ADD_BOS,
    "NU_TOKENIZE_PARSE_SPECIAL": TOKENIZE_PARSE_SPECIAL,
    "NU_MAX_STAGES": MAX_STAGES,
    "NU_MAX_TOP_LOGPROBS": MAX_TOP_LOGPROBS,
    **{c: v for table in (BLEU_FLAVORS, BLEU_TOKENIZERS, BLEU_SMOOTHS) for v, c in table.values()},
    "NU_BLEU_MAX_ORDER": 9,
    "NU_ROUGE_L": ROUGE_L,
    "NU_ROUGE_LSUM": ROUGE_LSUM,
}

# ---------------------------------------------------------------------------
# Structures
# ---------------------------------------------------------------------------


class nu_error(Structure):
    _fields_ = [("status", c_int), ("message", c_char * ERROR_MESSAGE_SIZE)]


class nu_model_params(Structure):
    _fields_ = [("mode", c_int)]


class nu_context_params(Structure):
    _fields_ = [
        ("n_ctx", c_int32),
        ("n_batch", c_int32),
        ("n_seq_max", c_int32),
        ("n_threads", c_int32),
        ("kv_type", c_int),
        ("kv_type_k", c_int),
        ("kv_type_v", c_int),
        ("embeddings", c_bool),
        ("n_state_checkpoints", c_int32),
    ]


class nu_logit_bias(Structure):
    _fields_ = [("token", c_int32), ("bias", c_float)]


class nu_token_seq(Structure):
    _fields_ = [("tokens", POINTER(c_int32)), ("n", c_int32)]


class nu_watermark_params(Structure):
    _fields_ = [
        ("key", c_char_p),
        ("gamma", c_float),
        ("delta", c_float),
        ("context", c_int32),
    ]


class nu_sampler_params(Structure):
    _fields_ = [
        ("temperature", c_float),
        ("top_k", c_int32),
        ("top_p", c_float),
        ("min_p", c_float),
        ("typical_p", c_float),
        ("repeat_penalty", c_float),
        ("frequency_penalty", c_float),
        ("presence_penalty", c_float),
        ("penalty_last_n", c_int32),
        ("penalize_prompt", c_bool),
        ("no_repeat_ngram_size", c_int32),
        ("guard_strength", c_float),
        ("guard_window", c_int32),
        ("dry_multiplier", c_float),
        ("dry_base", c_float),
        ("dry_allowed_length", c_int32),
        ("dry_penalty_last_n", c_int32),
        ("dry_sequence_breakers", POINTER(c_char_p)),
        ("n_dry_sequence_breakers", c_int32),
        ("xtc_probability", c_float),
        ("xtc_threshold", c_float),
        ("top_n_sigma", c_float),
        ("dynatemp_range", c_float),
        ("dynatemp_exponent", c_float),
        ("mirostat", c_int32),
        ("mirostat_tau", c_float),
        ("mirostat_eta", c_float),
        ("banned_strings", POINTER(c_char_p)),
        ("n_banned_strings", c_int32),
        ("banned_tokens", POINTER(nu_token_seq)),
        ("n_banned_tokens", c_int32),
        ("min_tokens", c_int32),
        ("ignore_eos", c_bool),
        ("logit_bias", POINTER(nu_logit_bias)),
        ("n_logit_bias", c_int32),
        ("seed", c_uint64),
        ("watermark", nu_watermark_params),
        ("order", c_int * MAX_STAGES),
        ("n_stages", c_int32),
    ]


class nu_top_logprob(Structure):
    _fields_ = [("token", c_int32), ("logprob", c_float)]


class nu_token_logprob(Structure):
    _fields_ = [
        ("token", c_int32),
        ("logprob", c_float),
        ("n_top", c_int32),
        ("top", nu_top_logprob * MAX_TOP_LOGPROBS),
        ("text_offset", c_size_t),
    ]


# bool (*)(void *user, int32_t index, const char *text, size_t len)
TEXT_CALLBACK = CFUNCTYPE(c_bool, c_void_p, c_int32, c_void_p, c_size_t)


class nu_think_budget(Structure):
    _fields_ = [
        ("open", POINTER(c_int32)),
        ("n_open", c_int32),
        ("close", POINTER(c_int32)),
        ("n_close", c_int32),
        ("force", POINTER(c_int32)),
        ("n_force", c_int32),
        ("max_tokens", c_int32),
        ("start_inside", c_bool),
    ]


class nu_generate_params(Structure):
    _fields_ = [
        ("n_predict", c_int32),
        ("add_bos", c_bool),
        ("parse_special", c_bool),
        ("echo", c_bool),
        ("sampling", nu_sampler_params),
        ("n", c_int32),
        ("stop", POINTER(c_char_p)),
        ("n_stop", c_int32),
        ("include_stop", c_bool),
        ("stop_tokens", POINTER(c_int32)),
        ("n_stop_tokens", c_int32),
        ("logprobs", c_int32),
        ("logprobs_after_chain", c_bool),
        ("grammar", c_void_p),
        ("draft_max", c_int32),
        ("think", nu_think_budget),
        ("on_text", TEXT_CALLBACK),
        ("user", c_void_p),
    ]


class nu_generate_result(Structure):
    _fields_ = [
        ("index", c_int32),
        ("n_prompt", c_int32),
        ("n_cached", c_int32),
        ("n_generated", c_int32),
        ("prompt_ms", c_double),
        ("generate_ms", c_double),
        ("finish", c_int),
        ("text", c_void_p),
        ("text_len", c_size_t),
        ("tokens", POINTER(c_int32)),
        ("n_tokens", c_int32),
        ("logprobs", POINTER(nu_token_logprob)),
        ("n_logprobs", c_int32),
        ("n_prompt_logprobs", c_int32),
        ("sum_logprob", c_double),
        ("score", c_double),
        ("n_drafted", c_int32),
        ("n_accepted", c_int32),
        ("stop_index", c_int32),
    ]


class nu_detokenizer(Structure):
    _fields_ = [
        ("model", c_void_p),
        ("special", c_bool),
        ("strip_leading_space", c_bool),
        ("started", c_bool),
        ("pending", ctypes.c_ubyte * DETOKENIZER_PENDING),
        ("n_pending", c_size_t),
    ]


class nu_json_options(Structure):
    _fields_ = [("max_whitespace", c_int32)]


class nu_chat_render_params(Structure):
    _fields_ = [
        ("messages_json", c_char_p),
        ("tools_json", c_char_p),
        ("extra_json", c_char_p),
        ("add_generation_prompt", c_bool),
        ("bos_token", c_char_p),
        ("eos_token", c_char_p),
    ]


class nu_perplexity_result(Structure):
    _fields_ = [
        ("perplexity", c_double),
        ("stderr_ppl", c_double),
        ("nll", c_double),
        ("n_scored", c_int64),
        ("n_windows", c_int32),
    ]


# bool (*)(int32_t window, const nu_perplexity_result *so_far, void *user)
WINDOW_CALLBACK = CFUNCTYPE(c_bool, c_int32, POINTER(nu_perplexity_result), c_void_p)


class nu_perplexity_params(Structure):
    _fields_ = [
        ("n_window", c_int32),
        ("score_from", c_int32),
        ("on_window", WINDOW_CALLBACK),
        ("user", c_void_p),
        ("mode", c_int),  # nu_perplexity_mode
        ("save_base", c_char_p),
    ]


class nu_memory_estimate(Structure):
    _fields_ = [
        ("weights", c_uint64),
        ("kv_cache", c_uint64),
        ("scratch", c_uint64),
        ("total", c_uint64),
    ]


BLEU_MAX_ORDER = ENUM_CONSTANTS["NU_BLEU_MAX_ORDER"]


class nu_bleu_params(Structure):
    _fields_ = [
        ("flavor", c_int),  # nu_bleu_flavor
        ("tokenizer", c_int),  # nu_bleu_tokenizer
        ("lowercase", c_bool),
        ("smooth", c_int),  # nu_bleu_smooth
        ("smooth_value", c_double),
        ("max_order", c_int32),
        ("effective_order", c_bool),
        ("n_weights", c_int32),
        ("weights", c_double * BLEU_MAX_ORDER),
        ("auto_reweigh", c_bool),
    ]


class nu_bleu_stats(Structure):
    _fields_ = [
        ("hyp_len", c_int64),
        ("ref_len", c_int64),
        ("correct", c_int64 * BLEU_MAX_ORDER),
        ("total", c_int64 * BLEU_MAX_ORDER),
        ("n_segments", c_int64),
        ("n_refs", c_int32),
        ("last_hyp_len", c_int64),
        ("last_correct5", c_int64),
        ("last_total5", c_int64),
    ]


class nu_bleu_result(Structure):
    _fields_ = [
        ("score", c_double),
        ("precisions", c_double * BLEU_MAX_ORDER),
        ("order", c_int32),
        ("bp", c_double),
        ("ratio", c_double),
        ("hyp_len", c_int64),
        ("ref_len", c_int64),
    ]


class nu_rouge_score(Structure):
    _fields_ = [
        ("precision", c_double),
        ("recall", c_double),
        ("fmeasure", c_double),
    ]


class nu_rouge_interval(Structure):
    _fields_ = [
        ("low", nu_rouge_score),
        ("mid", nu_rouge_score),
        ("high", nu_rouge_score),
    ]


# Every mirrored structure, for the ABI test.
STRUCTS = [
    nu_error,
    nu_model_params,
    nu_context_params,
    nu_logit_bias,
    nu_token_seq,
    nu_watermark_params,
    nu_sampler_params,
    nu_top_logprob,
    nu_token_logprob,
    nu_think_budget,
    nu_generate_params,
    nu_generate_result,
    nu_detokenizer,
    nu_json_options,
    nu_chat_render_params,
    nu_perplexity_result,
    nu_perplexity_params,
    nu_memory_estimate,
    nu_bleu_params,
    nu_bleu_stats,
    nu_bleu_result,
    nu_rouge_score,
    nu_rouge_interval,
]

# ---------------------------------------------------------------------------
# Function prototypes: name -> (restype, argtypes)
# ---------------------------------------------------------------------------

_P = c_void_p  # an opaque handle
_E = POINTER(nu_error)
_OUT = POINTER(c_void_p)  # where a new handle is written

PROTOTYPES = {
    "nu_status_name": (c_char_p, [c_int]),
    "nu_simd_level": (c_char_p, []),
    # models
    "nu_model_default_params": (nu_model_params, []),
    "nu_model_load": (c_int, [c_char_p, POINTER(nu_model_params), _OUT, _E]),
    "nu_model_free": (None, [_P]),
    "nu_model_arch": (c_char_p, [_P]),
    "nu_model_name": (c_char_p, [_P]),
    "nu_model_n_vocab": (c_int32, [_P]),
    "nu_model_n_ctx_train": (c_int32, [_P]),
    "nu_model_n_embd": (c_int32, [_P]),
    "nu_model_n_layer": (c_int32, [_P]),
    "nu_model_n_params": (c_uint64, [_P]),
    "nu_model_meta_count": (c_int64, [_P]),
    "nu_model_meta_key": (c_char_p, [_P, c_int64]),
    "nu_model_meta_value": (c_size_t, [_P, c_int64, c_void_p, c_size_t, c_int]),
    "nu_model_warning": (c_char_p, [_P]),
    "nu_model_memory": (
        c_int,
        [_P, c_int32, c_int32, c_int32, c_int, c_int, POINTER(nu_memory_estimate), _E],
    ),
    # tokenizer
    "nu_tokenize": (
        c_int,
        [_P, c_char_p, c_size_t, c_uint, POINTER(c_int32), c_size_t, POINTER(c_size_t), _E],
    ),
    "nu_token_text": (c_char_p, [_P, c_int32]),
    "nu_token_to_bytes": (c_size_t, [_P, c_int32, c_bool, c_void_p, c_size_t]),
    "nu_token_bos": (c_int32, [_P]),
    "nu_token_eos": (c_int32, [_P]),
    "nu_token_is_eog": (c_bool, [_P, c_int32]),
    "nu_token_get_type": (c_int, [_P, c_int32]),
    "nu_model_adds_bos": (c_bool, [_P]),
    "nu_detokenizer_init": (None, [POINTER(nu_detokenizer), _P, c_bool, c_bool]),
    "nu_detokenizer_push": (c_size_t, [POINTER(nu_detokenizer), c_int32, c_void_p, c_size_t]),
    "nu_detokenizer_flush": (c_size_t, [POINTER(nu_detokenizer), c_void_p, c_size_t]),
    # contexts
    "nu_context_default_params": (nu_context_params, []),
    "nu_context_new": (c_int, [_P, POINTER(nu_context_params), _OUT, _E]),
    "nu_context_free": (None, [_P]),
    "nu_context_n_ctx": (c_int32, [_P]),
    "nu_context_n_threads": (c_int32, [_P]),
    "nu_kv_clear": (None, [_P]),
    # sampling
    "nu_sampler_order_parse": (c_int, [c_char_p, POINTER(c_int), POINTER(c_int32), _E]),
    # generation
    "nu_generate_default_params": (nu_generate_params, []),
    "nu_generate_params_check": (c_int, [POINTER(nu_generate_params), _E]),
    "nu_generate_result_free": (None, [POINTER(nu_generate_result)]),
    "nu_finish_reason_name": (c_char_p, [c_int]),
    "nu_scheduler_new": (c_int, [_P, _OUT, _E]),
    "nu_scheduler_free": (None, [_P]),
    "nu_scheduler_submit": (
        c_int,
        [
            _P,
            c_char_p,
            POINTER(c_int32),
            c_size_t,
            POINTER(nu_generate_params),
            POINTER(nu_generate_result),
            POINTER(c_int32),
            _E,
        ],
    ),
    "nu_scheduler_step": (c_int, [_P, POINTER(c_bool), _E]),
    "nu_scheduler_cancel": (None, [_P, c_int32]),
    "nu_scheduler_is_done": (c_bool, [_P, c_int32]),
    # constrained generation
    "nu_json_default_options": (nu_json_options, []),
    "nu_grammar_from_gbnf": (c_int, [_P, c_char_p, c_char_p, _OUT, _E]),
    "nu_grammar_from_json_schema": (c_int, [_P, c_char_p, POINTER(nu_json_options), _OUT, _E]),
    "nu_grammar_json_object": (c_int, [_P, POINTER(nu_json_options), _OUT, _E]),
    "nu_grammar_from_regex": (c_int, [_P, c_char_p, _OUT, _E]),
    "nu_grammar_from_choices": (c_int, [_P, POINTER(c_char_p), c_size_t, _OUT, _E]),
    "nu_grammar_free": (None, [_P]),
    # chat templates
    "nu_chat_template_from_model": (c_int, [_P, _OUT, _E]),
    "nu_chat_template_builtin": (c_int, [c_char_p, _OUT, _E]),
    "nu_chat_template_builtin_names": (POINTER(c_char_p), []),
    "nu_chat_template_guess_builtin": (c_char_p, [_P]),
    "nu_chat_template_parse": (c_int, [c_char_p, c_size_t, _OUT, _E]),
    "nu_chat_template_free": (None, [_P]),
    "nu_chat_render_default_params": (nu_chat_render_params, []),
    "nu_chat_render": (
        c_int,
        [_P, POINTER(nu_chat_render_params), POINTER(c_void_p), POINTER(c_size_t), _E],
    ),
    # evaluation
    "nu_bleu_default_params": (nu_bleu_params, [c_int]),
    "nu_bleu_segment": (
        c_int,
        [POINTER(nu_bleu_params), c_char_p, POINTER(c_char_p), c_int32, POINTER(nu_bleu_stats),
         _E],
    ),
    "nu_bleu_stats_add": (None, [POINTER(nu_bleu_stats), POINTER(nu_bleu_stats)]),
    "nu_bleu_compute": (
        c_int, [POINTER(nu_bleu_params), POINTER(nu_bleu_stats), POINTER(nu_bleu_result), _E]
    ),
    "nu_bleu_signature": (
        c_int, [POINTER(nu_bleu_params), POINTER(nu_bleu_stats), c_void_p, c_size_t, _E]
    ),
    "nu_rouge_type": (c_int, [c_char_p, POINTER(c_int32), _E]),
    "nu_rouge": (
        c_int,
        [POINTER(c_int32), c_int32, c_bool, POINTER(c_char_p), c_int32, c_char_p,
         POINTER(nu_rouge_score), _E],
    ),
    "nu_rouge_bootstrap": (
        c_int,
        [POINTER(nu_rouge_score), c_int64, c_double, c_int32, c_uint64,
         POINTER(nu_rouge_interval), _E],
    ),
    "nu_perplexity_default_params": (nu_perplexity_params, []),
    "nu_perplexity": (
        c_int,
        [_P, POINTER(c_int32), c_int64, POINTER(nu_perplexity_params),
         POINTER(nu_perplexity_result), _E],
    ),
}

# ---------------------------------------------------------------------------
# Finding and loading the library
# ---------------------------------------------------------------------------

LIBRARY_ENV = "NUCLEUS_LIBRARY"
_PACKAGE_DIR = Path(__file__).resolve().parent


class LibraryNotFound(OSError):
    """The shared library libnucleus.so could not be found or loaded."""


def library_candidates() -> List[str]:
    """The places looked in for the library, in order (see the module docstring)."""
    places: List[str] = []
    env = os.environ.get(LIBRARY_ENV)
    if env:
        return [env]  # when it is set, it is the only place
    places += sorted(str(p) for p in _PACKAGE_DIR.glob("libnucleus.so*"))
    repo = _PACKAGE_DIR.parent.parent
    for build in sorted(repo.glob("build*")):
        places += [str(build / "libnucleus.so")]
    system = ctypes.util.find_library("nucleus")
    places += [system] if system else []
    places += ["libnucleus.so.0"]
    return places


# In libnucleus-hub.so (downloads), beside libnucleus.so: the core library
# does not link libcurl.
HUB_PROTOTYPES = {
    "nu_resolve_model": (
        c_int,
        [c_char_p, c_bool, c_void_p, c_void_p, c_void_p, c_size_t, _E],
    ),
}

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None
_hub: Optional[ctypes.CDLL] = None


def _bind(lib: ctypes.CDLL, prototypes=None) -> None:
    for name, (restype, argtypes) in (prototypes or PROTOTYPES).items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def lib() -> ctypes.CDLL:
    """The loaded library with its prototypes set (loaded once, on first use)."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for place in library_candidates():
            is_path = os.sep in place
            if is_path and not os.path.exists(place):
                tried.append(f"{place} (no such file)")
                continue
            try:
                candidate = ctypes.CDLL(place)
                _bind(candidate)
            except (OSError, AttributeError) as e:
                tried.append(f"{place} ({e})")
                continue
            candidate.nu_free.argtypes = [c_void_p]
            candidate.nu_free.restype = None
            _lib, _lib_path = candidate, place
            return _lib
        raise LibraryNotFound(
            "cannot load the nucleus shared library (libnucleus.so); build it "
            "(scripts/setup.sh) or set NUCLEUS_LIBRARY to its path. Tried: " + "; ".join(tried)
        )


def library_path() -> str:
    """The path or name the library was loaded from."""
    lib()
    assert _lib_path is not None
    return _lib_path


def hub() -> ctypes.CDLL:
    """libnucleus-hub.so (model references and downloads), found beside the
    core library (or by its name), loaded once on first use."""
    global _hub
    if _hub is not None:
        return _hub
    core = library_path()
    places = []
    if os.sep in core:
        base = os.path.basename(core).replace("libnucleus.so", "libnucleus-hub.so")
        places.append(os.path.join(os.path.dirname(core), base))
        places.append(os.path.join(os.path.dirname(core), "libnucleus-hub.so"))
    places += ["libnucleus-hub.so.0"]
    tried = []
    with _lock:
        for place in places:
            if os.sep in place and not os.path.exists(place):
                tried.append(f"{place} (no such file)")
                continue
            try:
                candidate = ctypes.CDLL(place)
                _bind(candidate, HUB_PROTOTYPES)
            except (OSError, AttributeError) as e:
                tried.append(f"{place} ({e})")
                continue
            _hub = candidate
            return _hub
    raise LibraryNotFound(
        "cannot load libnucleus-hub.so (model references and downloads). Tried: "
        + "; ".join(tried)
    )


def c_free(ptr: int) -> None:
    """Releases a buffer the library handed over (nu_free)."""
    lib().nu_free(ptr)

