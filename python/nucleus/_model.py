"""nucleus.Model: a loaded model with one context, and what it can do.

Everything goes through the C library (libnucleus.so) with ctypes: loading,
tokenizing, generating (the library's scheduler, which is what
``nu_generate`` runs too, so results are those of ``nucleus generate``),
streaming (the scheduler stepped here, text arriving through the library's
text callback), chat templates and perplexity. No generation logic is
written in Python.
"""

from __future__ import annotations

import ctypes
import json as _json
import os
import threading
from ctypes import POINTER, byref, c_bool, c_char_p, c_int, c_int32, c_size_t, c_void_p
from dataclasses import dataclass
from pathlib import Path
from typing import (
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
    overload,
)

from . import _ffi
from ._ffi import KvType, Status

PathLike = Union[str, "os.PathLike[str]"]

DEMO_MODEL_FILE = "stories260K.gguf"
INT32_MAX = 2**31 - 1
UINT64_MAX = 2**64 - 1


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


class NucleusError(Exception):
    """A failure reported by the library: its status and its message.

    ``status`` is a :class:`nucleus.Status` (``Status.ERR_INVALID_ARG``, ...),
    ``status_name`` the library's short name for it ("invalid argument"),
    and ``message`` (also ``str(error)``) the one-line message the library
    wrote, the same text the ``nucleus`` command prints after ``nucleus:``.
    """

    def __init__(self, status: int, message: str) -> None:
        try:
            self.status: Union[Status, int] = Status(status)
        except ValueError:
            self.status = status
        self.message = message
        super().__init__(message)

    @property
    def status_name(self) -> str:
        name = _ffi.lib().nu_status_name(int(self.status))
        return name.decode() if name else "unknown status"

    def __repr__(self) -> str:
        return f"NucleusError({self.status!r}, {self.message!r})"


def _error_of(err: _ffi.nu_error) -> NucleusError:
    return NucleusError(err.status, err.message.decode("utf-8", "replace"))


def _check(status: int, err: _ffi.nu_error) -> None:
    if status != Status.OK:
        raise _error_of(err)


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenLogprob:
    """One token's log-probability and the most likely alternatives at its place.

    ``logprob`` is -inf when the sampler chain had removed the token (with
    ``logprobs_after_chain``). ``top`` lists (token id, log-prob) pairs, most
    likely first. ``offset`` is the character of the result's text where the
    token's text begins.
    """

    token: int
    text: str
    logprob: float
    top: List[Tuple[int, float]]
    offset: int


@dataclass
class Completion:
    """What one sample produced.

    ``text`` is the continuation (the prompt first when ``echo``), ``tokens``
    the generated token ids, ``finish_reason`` one of "length", "eos", "stop",
    "context" or "cancelled". ``logprobs`` (when asked for) has one entry per
    generated token, ``prompt_logprobs`` one per prompt token (with ``echo``).
    """

    text: str
    tokens: List[int]
    finish_reason: str
    logprobs: Optional[List[TokenLogprob]] = None
    prompt_logprobs: Optional[List[TokenLogprob]] = None
    sum_logprob: float = 0.0
    n_prompt_tokens: int = 0
    n_cached_tokens: int = 0
    prompt_ms: float = 0.0
    generate_ms: float = 0.0
    index: int = 0


@dataclass(frozen=True)
class Perplexity:
    """The perplexity of a text (see ``nu_perplexity`` in nucleus.h)."""

    perplexity: float
    stderr: float
    nll: float
    n_tokens: int
    n_scored: int
    n_windows: int


# ---------------------------------------------------------------------------
# Generation options -> nu_generate_params
# ---------------------------------------------------------------------------

# Sampling options and the nu_sampler_params field each sets.
_SAMPLING_FIELDS = {
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "typical_p": "typical_p",
    "repeat_penalty": "repeat_penalty",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "penalty_last_n": "penalty_last_n",
    "penalize_prompt": "penalize_prompt",
    "no_repeat_ngram_size": "no_repeat_ngram_size",
    "repetition_guard": "guard_strength",
    "guard_window": "guard_window",
    "min_tokens": "min_tokens",
    "ignore_eos": "ignore_eos",
    "seed": "seed",
    "dry_multiplier": "dry_multiplier",
    "dry_base": "dry_base",
    "dry_allowed_length": "dry_allowed_length",
    "dry_penalty_last_n": "dry_penalty_last_n",
    "xtc_probability": "xtc_probability",
    "xtc_threshold": "xtc_threshold",
    "top_n_sigma": "top_n_sigma",
    "dynatemp_range": "dynatemp_range",
    "dynatemp_exponent": "dynatemp_exponent",
    "mirostat": "mirostat",
    "mirostat_tau": "mirostat_tau",
    "mirostat_eta": "mirostat_eta",
}
_INT_FIELDS = {"top_k", "penalty_last_n", "no_repeat_ngram_size", "guard_window", "min_tokens",
               "dry_allowed_length", "dry_penalty_last_n", "mirostat"}
_BOOL_FIELDS = {"penalize_prompt", "ignore_eos"}

# Every option generate, stream and chat take, besides the prompt.
OPTIONS = frozenset(
    list(_SAMPLING_FIELDS)
    + [
        "max_tokens",
        "n",
        "logit_bias",
        "dry_sequence_breakers",
        "banned_strings",
        "banned_tokens",
        "sampler_order",
        "watermark",
        "stop",
        "stop_tokens",
        "include_stop",
        "echo",
        "add_bos",
        "special",
        "logprobs",
        "logprobs_after_chain",
        "grammar",
        "json_schema",
        "json",
        "regex",
        "choices",
        "json_whitespace",
    ]
)


def _int(name: str, value: Any, lo: int = -(2**31), hi: int = INT32_MAX) -> int:
    """An integer option, checked so that ctypes never wraps it silently."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def _float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    return float(value)


def _strings(name: str, value: Union[str, Sequence[str], None]) -> List[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    out = list(value)
    for s in out:
        if not isinstance(s, str):
            raise TypeError(f"{name} must hold strings, not {type(s).__name__}")
    return out


class _Params:
    """A nu_generate_params filled from keyword options, with everything its
    pointers point to kept alive, and the grammar it compiled (freed by close)."""

    def __init__(self, model: "Model", options: Mapping[str, Any]) -> None:
        unknown = set(options) - OPTIONS
        if unknown:
            raise TypeError(f"unknown option(s): {', '.join(sorted(unknown))}")
        lib = _ffi.lib()
        self.keep: List[Any] = []
        self.grammar: Optional[int] = None
        self.n = 1
        p = lib.nu_generate_default_params()
        opt = {k: v for k, v in options.items() if v is not None}
        self._sampling(p.sampling, opt)
        if "max_tokens" in opt:
            p.n_predict = _int("max_tokens", opt["max_tokens"], -1)
        if "n" in opt:
            self.n = p.n = _int("n", opt["n"], 1)
        for name, fld in (("echo", "echo"), ("add_bos", "add_bos"), ("special", "parse_special"),
                          ("include_stop", "include_stop"),
                          ("logprobs_after_chain", "logprobs_after_chain")):
            if name in opt:
                setattr(p, fld, bool(opt[name]))
        stops = [s.encode() for s in _strings("stop", opt.get("stop"))]
        if stops:
            arr = (c_char_p * len(stops))(*stops)
            self.keep += [arr, stops]
            p.stop, p.n_stop = ctypes.cast(arr, POINTER(c_char_p)), len(stops)
        stop_tokens = [_int("stop_tokens", t, 0) for t in opt.get("stop_tokens", [])]
        if stop_tokens:
            arr = (c_int32 * len(stop_tokens))(*stop_tokens)
            self.keep.append(arr)
            p.stop_tokens, p.n_stop_tokens = ctypes.cast(arr, POINTER(c_int32)), len(stop_tokens)
        if "logprobs" in opt:
            lp = opt["logprobs"]
            p.logprobs = (_ffi.MAX_TOP_LOGPROBS if lp is True else
                          -1 if lp is False else _int("logprobs", lp, 0, _ffi.MAX_TOP_LOGPROBS))
        self.params = p
        err = _ffi.nu_error()
        _check(lib.nu_generate_params_check(byref(p), byref(err)), err)
        self.grammar = model._compile_grammar(opt)
        p.grammar = self.grammar

    def _sampling(self, s: _ffi.nu_sampler_params, opt: Mapping[str, Any]) -> None:
        for name, fld in _SAMPLING_FIELDS.items():
            if name not in opt:
                continue
            v = opt[name]
            if name == "seed":
                setattr(s, fld, _int("seed", v, 0, UINT64_MAX))
            elif name in _INT_FIELDS:
                setattr(s, fld, _int(name, v, -1))
            elif name in _BOOL_FIELDS:
                setattr(s, fld, bool(v))
            else:
                setattr(s, fld, _float(name, v))
        bias = opt.get("logit_bias")
        if bias:
            items = list(bias.items())
            arr = (_ffi.nu_logit_bias * len(items))()
            for i, (tok, b) in enumerate(items):
                arr[i].token = _int("logit_bias token", tok, 0)
                arr[i].bias = _float("logit_bias", b)
            self.keep.append(arr)
            s.logit_bias = ctypes.cast(arr, POINTER(_ffi.nu_logit_bias))
            s.n_logit_bias = len(items)
        self._lists(s, opt)
        order = opt.get("sampler_order")
        if order is not None:
            text = order if isinstance(order, str) else ",".join(order)
            n = c_int32()
            err = _ffi.nu_error()
            st = _ffi.lib().nu_sampler_order_parse(
                text.encode(), ctypes.cast(s.order, POINTER(c_int)), byref(n), byref(err))
            _check(st, err)
            s.n_stages = n.value
        wm = opt.get("watermark")
        if wm is not None:
            wm = {"key": wm} if isinstance(wm, str) else dict(wm)
            key = str(wm.pop("key")).encode()
            self.keep.append(key)
            s.watermark.key = key
            s.watermark.gamma = _float("gamma", wm.pop("gamma", 0.25))
            s.watermark.delta = _float("delta", wm.pop("delta", 2.0))
            s.watermark.context = _int("context", wm.pop("context", 1), 1)
            if wm:
                raise TypeError(f"unknown watermark field(s): {', '.join(sorted(wm))}")

    def _lists(self, s: _ffi.nu_sampler_params, opt: Mapping[str, Any]) -> None:
        """dry_sequence_breakers, banned_strings and banned_tokens (kept alive
        in self.keep for as long as the parameters are used)."""
        for name, ptr, count in (("dry_sequence_breakers", "dry_sequence_breakers",
                                  "n_dry_sequence_breakers"),
                                 ("banned_strings", "banned_strings", "n_banned_strings")):
            if name not in opt:
                continue
            items = [x.encode() for x in _strings(name, opt[name])]
            arr = (c_char_p * max(len(items), 1))(*items)
            self.keep += [arr, items]
            setattr(s, ptr, ctypes.cast(arr, POINTER(c_char_p)))
            setattr(s, count, len(items))
        bans = opt.get("banned_tokens")
        if bans:
            seqs = (_ffi.nu_token_seq * len(bans))()
            for i, b in enumerate(bans):
                ids = [b] if isinstance(b, int) else list(b)
                arr = (c_int32 * max(len(ids), 1))(
                    *[_int("banned_tokens", t, 0) for t in ids])
                self.keep.append(arr)
                seqs[i].tokens = ctypes.cast(arr, POINTER(c_int32))
                seqs[i].n = len(ids)
            self.keep.append(seqs)
            s.banned_tokens = ctypes.cast(seqs, POINTER(_ffi.nu_token_seq))
            s.n_banned_tokens = len(bans)

    def close(self) -> None:
        if self.grammar:
            _ffi.lib().nu_grammar_free(self.grammar)
            self.grammar = None


# ---------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------


class Stream:
    """Text pieces of one generation as they are produced.

    Iterate over it for ``str`` pieces; joined, they are the completion's
    text. Once the iteration ends, ``result`` holds the :class:`Completion`
    (tokens, finish reason, log-probs). ``close()`` (or leaving a ``with``
    block, or breaking out and dropping the stream) stops the generation and
    frees the model for other calls.
    """

    def __init__(self, steps: Iterator[Tuple[int, int, str]], runner: "_Run") -> None:
        self._steps = steps
        self._runner = runner
        self.result: Optional[Completion] = None

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> str:
        try:
            _, _, piece = next(self._steps)
            return piece
        except StopIteration:
            results = self._runner.completions
            self.result = results[0][0] if results else None
            raise

    def close(self) -> None:
        """Stops the generation (if still running) and releases the model."""
        self._steps.close()
        self._runner.params.close()  # its grammar, when the stream was never started

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def text(self) -> str:
        """Reads the rest of the stream and returns all of its text."""
        return "".join(self)


class _Run:
    """One scheduler run over a list of prompts (text or token ids), stepped
    here: ``steps()`` yields (prompt, sample, text piece) as the library's
    text callback delivers them, then ``completions`` holds the results."""

    def __init__(self, model: "Model", prompts: Sequence[Union[bytes, Sequence[int]]],
                 params: _Params) -> None:
        self.model = model
        self.prompts = prompts
        self.params = params
        self.completions: List[List[Completion]] = []

    def steps(self) -> Iterator[Tuple[int, int, str]]:
        lib = _ffi.lib()
        model = self.model
        n = self.params.n
        pieces: List[Tuple[int, int, bytes]] = []
        failures: List[BaseException] = []

        def on_text(user: Optional[int], index: int, text: Optional[int], length: int) -> bool:
            try:
                pieces.append((user or 0, index, ctypes.string_at(text, length) if length else b""))
                return True
            except BaseException as e:  # never let an exception cross the C frame
                failures.append(e)
                return False

        callback = _ffi.TEXT_CALLBACK(on_text)
        results = [(_ffi.nu_generate_result * n)() for _ in self.prompts]
        sched = c_void_p()
        ids: List[int] = []
        err = _ffi.nu_error()
        finished = False
        model._enter()
        try:
            _check(lib.nu_scheduler_new(model._ctx, byref(sched), byref(err)), err)
            for p, prompt in enumerate(self.prompts):
                gp = _ffi.nu_generate_params.from_buffer_copy(self.params.params)
                gp.on_text = callback
                gp.user = p
                rid = c_int32(-1)
                if isinstance(prompt, bytes):
                    st = lib.nu_scheduler_submit(sched, prompt, None, 0, byref(gp), results[p],
                                                 byref(rid), byref(err))
                else:
                    toks = (c_int32 * len(prompt))(*prompt)
                    st = lib.nu_scheduler_submit(sched, None, toks, len(prompt), byref(gp),
                                                 results[p], byref(rid), byref(err))
                _check(st, err)
                ids.append(rid.value)
            active = c_bool(True)
            while active.value:
                _check(lib.nu_scheduler_step(sched, byref(active), byref(err)), err)
                if failures:
                    raise failures[0]
                batch, pieces[:] = pieces[:], []
                for p, i, data in batch:
                    yield p, i, data.decode("utf-8", "replace")
            self.completions = [[model._completion(r) for r in rs] for rs in results]
            finished = True
        finally:
            if sched.value:
                if not finished:  # closed early or failed: stop what still runs
                    for rid in ids:
                        lib.nu_scheduler_cancel(sched, rid)
                    active = c_bool(True)
                    while active.value and lib.nu_scheduler_step(sched, byref(active), None) == 0:
                        pass
                lib.nu_scheduler_free(sched)
            for rs in results:
                for r in rs:
                    lib.nu_generate_result_free(byref(r))
            self.params.close()
            model._leave()

    def run(self) -> List[List[Completion]]:
        for _ in self.steps():
            pass
        return self.completions


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------


def demo_model_candidates() -> List[str]:
    """Where the demo model models/stories260K.gguf is looked for, in order:
    beside the library (a build tree's ``build/../models``, an installed
    ``lib/../share/nucleus/models``), beside the package, the source tree the
    package sits in, then the usual install prefixes."""
    places: List[Path] = []
    lib_path = _ffi.library_path()
    if os.sep in lib_path:
        lib_dir = Path(lib_path).resolve().parent
        places += [lib_dir.parent / "models", lib_dir.parent / "share/nucleus/models",
                   lib_dir.parent.parent / "share/nucleus/models"]
    pkg = Path(__file__).resolve().parent
    places += [pkg / "models", pkg.parent.parent / "models",
               Path("/usr/local/share/nucleus/models"), Path("/usr/share/nucleus/models")]
    return [str(p / DEMO_MODEL_FILE) for p in places]


def find_demo_model() -> str:
    """The path of the demo model; NucleusError (an i/o error) naming the
    places looked in when it is nowhere."""
    places = demo_model_candidates()
    for place in places:
        if os.path.isfile(place):
            return os.path.normpath(place)
    raise NucleusError(Status.ERR_IO, "no model given, and the demo model is not at "
                       + ", ".join(places))


class Model:
    """A GGUF model loaded by the library, with one context to run it.

    ``Model()`` loads the demo model (models/stories260K.gguf); ``path`` may
    be a file or an ``hf:ORG/REPO/FILE.gguf`` reference (downloaded once into
    the cache, as the command line does). Keyword arguments size the context:
    ``n_ctx`` KV cache cells shared by all sequences (0: the model's training
    length, at most 4096), ``n_threads`` (0: all cores), ``n_batch`` tokens per
    forward pass, ``n_seq_max`` sequences at once (the most samples and
    prompts generated together), ``kv_type`` "f16", "f32", "q8_0" or "q4_0". ``chat_template``
    is a built-in template name or a Jinja file for :meth:`chat` (default:
    the model's own, else a built-in guessed from its vocabulary).

    Use it as a context manager, or call :meth:`close`, to free the library's
    objects. One model may be used from several threads: calls take turns.
    """

    def __init__(self, path: Optional[PathLike] = None, *, n_ctx: int = 0, n_threads: int = 0,
                 n_batch: int = 512, n_seq_max: int = 16, kv_type: str = "f16",
                 chat_template: Optional[str] = None, download: bool = True) -> None:
        lib = _ffi.lib()
        self._model = c_void_p()
        self._ctx = c_void_p()
        self._lock = threading.Lock()
        self._owner: Optional[int] = None
        self._template = c_void_p()
        self._template_name: Optional[str] = None
        self._chat_template_option = chat_template
        err = _ffi.nu_error()
        ref = find_demo_model() if path is None else os.fspath(path)
        self.path: str = ref
        if ref.startswith("hf:"):
            # references are resolved (and downloaded) by libnucleus-hub.so
            buf = ctypes.create_string_buffer(4096)
            _check(_ffi.hub().nu_resolve_model(ref.encode(), download, None, None, buf,
                                               len(buf), byref(err)), err)
            self.path = buf.value.decode()
        mp = lib.nu_model_default_params()
        _check(lib.nu_model_load(self.path.encode(), byref(mp), byref(self._model), byref(err)),
               err)
        try:
            cp = lib.nu_context_default_params()
            cp.n_ctx = _int("n_ctx", n_ctx, 0)
            cp.n_threads = _int("n_threads", n_threads, 0)
            cp.n_batch = _int("n_batch", n_batch, 1)
            cp.n_seq_max = _int("n_seq_max", n_seq_max, 1)
            kinds = {"f16": KvType.F16, "f32": KvType.F32, "q8_0": KvType.Q8_0,
                     "q4_0": KvType.Q4_0}
            if kv_type not in kinds:
                raise ValueError(
                    f"kv_type must be 'f16', 'f32', 'q8_0' or 'q4_0', not {kv_type!r}")
            cp.kv_type = kinds[kv_type]
            _check(lib.nu_context_new(self._model, byref(cp), byref(self._ctx), byref(err)), err)
        except BaseException:
            lib.nu_model_free(self._model)
            self._model = c_void_p()
            raise

    # -- lifetime -----------------------------------------------------------

    def close(self) -> None:
        """Frees the context, the chat template and the model (idempotent)."""
        if not self._model:
            return
        self._enter()
        try:
            lib = _ffi.lib()
            if self._template:
                lib.nu_chat_template_free(self._template)
            lib.nu_context_free(self._ctx)
            lib.nu_model_free(self._model)
            self._template = self._ctx = self._model = c_void_p()
        finally:
            self._leave()

    @property
    def closed(self) -> bool:
        return not self._model

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if self._model and self._owner is None:
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.arch}, {self.n_params:,} parameters"
        return f"<nucleus.Model {self.path!r} ({state})>"

    def _enter(self) -> None:
        """Takes the context for one call (or a whole stream)."""
        if self._owner == threading.get_ident():
            raise RuntimeError("this model is busy with an unfinished stream in this thread: "
                               "read it to the end or close it first")
        self._lock.acquire()
        self._owner = threading.get_ident()
        if not self._model:
            self._leave()
            raise ValueError("the model is closed")

    def _leave(self) -> None:
        self._owner = None
        self._lock.release()

    def _handle(self) -> c_void_p:
        if not self._model:
            raise ValueError("the model is closed")
        return self._model

    # -- facts --------------------------------------------------------------

    @property
    def arch(self) -> str:
        """general.architecture ("llama", ...)."""
        return _ffi.lib().nu_model_arch(self._handle()).decode()

    @property
    def name(self) -> str:
        """general.name, or ""."""
        return (_ffi.lib().nu_model_name(self._handle()) or b"").decode()

    @property
    def n_vocab(self) -> int:
        return int(_ffi.lib().nu_model_n_vocab(self._handle()))

    @property
    def n_ctx_train(self) -> int:
        return int(_ffi.lib().nu_model_n_ctx_train(self._handle()))

    @property
    def n_embd(self) -> int:
        return int(_ffi.lib().nu_model_n_embd(self._handle()))

    @property
    def n_layer(self) -> int:
        return int(_ffi.lib().nu_model_n_layer(self._handle()))

    @property
    def n_params(self) -> int:
        return int(_ffi.lib().nu_model_n_params(self._handle()))

    @property
    def n_ctx(self) -> int:
        """KV cache cells of the model's context."""
        self._handle()
        return int(_ffi.lib().nu_context_n_ctx(self._ctx))

    @property
    def bos(self) -> Optional[int]:
        t = _ffi.lib().nu_token_bos(self._handle())
        return None if t < 0 else int(t)

    @property
    def eos(self) -> Optional[int]:
        t = _ffi.lib().nu_token_eos(self._handle())
        return None if t < 0 else int(t)

    @property
    def metadata(self) -> Dict[str, str]:
        """The file's metadata, each value rendered as text (arrays shortened)."""
        lib, m = _ffi.lib(), self._handle()
        out: Dict[str, str] = {}
        buf = ctypes.create_string_buffer(1024)
        for i in range(lib.nu_model_meta_count(m)):
            need = lib.nu_model_meta_value(m, i, buf, len(buf), 8)
            if need >= len(buf):
                buf = ctypes.create_string_buffer(need + 1)
                lib.nu_model_meta_value(m, i, buf, len(buf), 8)
            out[lib.nu_model_meta_key(m, i).decode()] = buf.value.decode("utf-8", "replace")
        return out

    # -- tokens -------------------------------------------------------------

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = False) -> List[int]:
        """The token ids of text; ``add_bos`` adds the BOS token when the model
        asks for one, ``special`` reads special-token text (``<s>``) as its id."""
        lib, m = _ffi.lib(), self._handle()
        data = text.encode()
        flags = (_ffi.TOKENIZE_ADD_BOS if add_bos else 0) | (
            _ffi.TOKENIZE_PARSE_SPECIAL if special else 0)
        err = _ffi.nu_error()
        n = c_size_t()
        cap = len(data) + 8
        while True:
            buf = (c_int32 * cap)()
            st = lib.nu_tokenize(m, data, len(data), flags, buf, cap, byref(n), byref(err))
            if st == Status.ERR_BUFFER_SMALL and n.value > cap:
                cap = n.value
                continue
            _check(st, err)
            return list(buf[: n.value])

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        """The bytes a token stands for in text (control tokens give b"" unless special)."""
        lib, m = _ffi.lib(), self._handle()
        _int("token", token, 0, self.n_vocab - 1)
        buf = ctypes.create_string_buffer(256)
        n = lib.nu_token_to_bytes(m, token, special, buf, len(buf))
        if n > len(buf):
            buf = ctypes.create_string_buffer(n)
            n = lib.nu_token_to_bytes(m, token, special, buf, len(buf))
        return buf.raw[:n]

    def detokenize(self, tokens: Iterable[int], *, special: bool = False,
                   strip_leading_space: Optional[bool] = None) -> str:
        """The text of token ids, as generation writes it. The space a
        SentencePiece tokenizer puts before the text is removed (unless
        ``strip_leading_space`` is False), so ``detokenize(tokenize(t)) == t``."""
        lib, m = _ffi.lib(), self._handle()
        ids = [_int("token", t, 0, self.n_vocab - 1) for t in tokens]
        if strip_leading_space is None:
            strip_leading_space = self._adds_space_prefix()
        d = _ffi.nu_detokenizer()
        lib.nu_detokenizer_init(byref(d), m, special, strip_leading_space)
        buf = ctypes.create_string_buffer(4096)
        out = bytearray()
        for t in ids:
            k = lib.nu_detokenizer_push(byref(d), t, buf, len(buf))
            out += buf.raw[: min(k, len(buf))]
        k = lib.nu_detokenizer_flush(byref(d), buf, len(buf))
        out += buf.raw[: min(k, len(buf))]
        return out.decode("utf-8", "replace")

    def _adds_space_prefix(self) -> bool:
        first = self.tokenize("a", add_bos=False)
        return bool(first) and self.token_bytes(first[0]).startswith(b" ")

    # -- generation ---------------------------------------------------------

    @overload
    def generate(self, prompt: str, *, n: Literal[1] = ..., **options: Any) -> Completion: ...

    @overload
    def generate(self, prompt: str, *, n: int, **options: Any) -> List[Completion]: ...

    @overload
    def generate(self, prompt: Sequence[str], *, n: Literal[1] = ...,
                 **options: Any) -> List[Completion]: ...

    @overload
    def generate(self, prompt: Sequence[str], *, n: int,
                 **options: Any) -> List[List[Completion]]: ...

    def generate(self, prompt: Union[str, Sequence[str]], *, max_tokens: Optional[int] = None,
                 n: int = 1, temperature: Optional[float] = None, top_k: Optional[int] = None,
                 top_p: Optional[float] = None, min_p: Optional[float] = None,
                 seed: Optional[int] = None, stop: Union[str, Sequence[str], None] = None,
                 grammar: Optional[str] = None, json_schema: Union[Mapping[str, Any], str, None] = None,
                 regex: Optional[str] = None, logprobs: Union[int, bool, None] = None,
                 **options: Any) -> Any:
        """Continues a prompt, or a list of prompts generated together.

        Returns a :class:`Completion` for one prompt, a list of them for a list
        of prompts; with ``n`` > 1 samples per prompt, a list of ``n``
        completions (per prompt, for a list). Options (None keeps the
        library's default, the ``nucleus generate`` one):

        * ``max_tokens`` (128; -1 runs to the end of generation or the context),
          ``n`` samples sharing the prompt's cache;
        * sampling: ``temperature`` (0.8; 0 is greedy), ``top_k`` (40), ``top_p``
          (0.95), ``min_p`` (0.05), ``typical_p``, ``repeat_penalty``,
          ``frequency_penalty``, ``presence_penalty``, ``penalty_last_n``,
          ``penalize_prompt``, ``no_repeat_ngram_size``, ``repetition_guard``
          (strength), ``guard_window``, ``min_tokens``, ``ignore_eos``,
          ``logit_bias`` ({token: bias}), ``sampler_order`` (names or a preset),
          ``seed``, ``watermark`` (a key, or {"key", "gamma", "delta", "context"});
        * llama.cpp's samplers, by its names: ``dry_multiplier`` (0: off),
          ``dry_base`` (1.75), ``dry_allowed_length`` (2), ``dry_penalty_last_n``
          (64; -1 all), ``dry_sequence_breakers`` (strings; ["\\n", ":", "\\"", "*"]),
          ``xtc_probability`` (0: off), ``xtc_threshold`` (0.1), ``top_n_sigma``
          (-1: off), ``dynatemp_range`` (0: off), ``dynatemp_exponent`` (1),
          ``mirostat`` (0, 1 or 2), ``mirostat_tau`` (5), ``mirostat_eta`` (0.1);
        * bans: ``banned_strings`` (texts the output never contains, however
          spelt), ``banned_tokens`` (token ids, or lists of ids: sequences);
        * ending: ``stop`` (a string or strings; the text ends before the first
          match), ``stop_tokens``, ``include_stop``;
        * prompt: ``echo``, ``add_bos`` (True), ``special`` (read special-token
          text in the prompt as tokens);
        * ``logprobs``: the number of alternatives (0..20) recorded with each
          token's log-prob (True: 20), ``logprobs_after_chain``;
        * constrained output, at most one of: ``grammar`` (GBNF text),
          ``json_schema`` (a dict or JSON text), ``json`` (any JSON object),
          ``regex``, ``choices`` (a list of strings); ``json_whitespace``.

        Bad values raise :class:`NucleusError` with the library's message.
        """
        options.update(max_tokens=max_tokens, n=n, temperature=temperature, top_k=top_k,
                       top_p=top_p, min_p=min_p, seed=seed, stop=stop, grammar=grammar,
                       json_schema=json_schema, regex=regex, logprobs=logprobs)
        single = isinstance(prompt, str)
        prompts = [prompt] if single else list(prompt)
        for p in prompts:
            if not isinstance(p, str):
                raise TypeError(f"a prompt must be a str, not {type(p).__name__}")
        if not prompts:
            return []
        params = _Params(self, options)
        results = _Run(self, [p.encode() for p in prompts], params).run()
        per_prompt = [rs[0] if params.n == 1 else rs for rs in results]
        return per_prompt[0] if single else per_prompt

    def stream(self, prompt: str, **options: Any) -> Stream:
        """Continues a prompt, yielding its text piece by piece as it is made.

        Takes the options of :meth:`generate` (one sample: ``n`` must be 1).
        The pieces are whole UTF-8 characters and never part of a stop string;
        joined, they are the completion's text (without ``echo``). The
        returned :class:`Stream` holds the :class:`Completion` in ``result``
        once read to the end.
        """
        if not isinstance(prompt, str):
            raise TypeError(f"a prompt must be a str, not {type(prompt).__name__}")
        if options.get("n", 1) not in (1, None):
            raise ValueError("stream generates one sample (n=1)")
        if options.get("echo"):
            raise ValueError("stream does not echo the prompt (its pieces are the continuation)")
        params = _Params(self, options)
        run = _Run(self, [prompt.encode()], params)
        return Stream(run.steps(), run)

    # -- chat ---------------------------------------------------------------

    def _chat_template(self) -> c_void_p:
        """The template, parsed once: the chat_template option, else the
        model's own, else the built-in its vocabulary suggests."""
        if self._template:
            return self._template
        lib, m = _ffi.lib(), self._handle()
        err = _ffi.nu_error()
        choice = self._chat_template_option
        tpl = c_void_p()
        builtins = self.builtin_templates()
        if choice is not None and choice in builtins:
            _check(lib.nu_chat_template_builtin(choice.encode(), byref(tpl), byref(err)), err)
            name = choice
        elif choice is not None:
            try:
                source = Path(choice).read_bytes()
            except OSError as e:
                raise NucleusError(Status.ERR_INVALID_ARG,
                                   f"chat_template '{choice}' is neither a built-in template "
                                   f"({', '.join(builtins)}) nor a readable file: {e}") from e
            _check(lib.nu_chat_template_parse(source, len(source), byref(tpl), byref(err)), err)
            name = "file"
        else:
            st = lib.nu_chat_template_from_model(m, byref(tpl), byref(err))
            name = "model"
            if st == Status.ERR_UNSUPPORTED:
                name = lib.nu_chat_template_guess_builtin(m).decode()
                st = lib.nu_chat_template_builtin(name.encode(), byref(tpl), byref(err))
            _check(st, err)
        self._template, self._template_name = tpl, name
        return tpl

    @property
    def chat_template_name(self) -> str:
        """Which template :meth:`chat` uses: "model", "file" or a built-in name."""
        self._chat_template()
        assert self._template_name is not None
        return self._template_name

    @staticmethod
    def builtin_templates() -> List[str]:
        """The names of the built-in chat templates."""
        names = _ffi.lib().nu_chat_template_builtin_names()
        out, i = [], 0
        while names[i]:
            out.append(names[i].decode())
            i += 1
        return out

    def _special_text(self, token: Optional[int]) -> Optional[bytes]:
        if token is None:
            return None
        return _ffi.lib().nu_token_text(self._handle(), token)

    def render_chat(self, messages: Sequence[Mapping[str, Any]], *,
                    add_generation_prompt: bool = True,
                    tools: Optional[Sequence[Mapping[str, Any]]] = None) -> str:
        """The prompt text the chat template makes of a conversation (a list
        of {"role", "content"} messages), as transformers would render it."""
        lib = _ffi.lib()
        tpl = self._chat_template()
        p = lib.nu_chat_render_default_params()
        messages_json = _json.dumps(list(messages)).encode()
        tools_json = _json.dumps(list(tools)).encode() if tools is not None else None
        p.messages_json = messages_json
        p.tools_json = tools_json
        p.add_generation_prompt = add_generation_prompt
        p.bos_token = self._special_text(self.bos)
        p.eos_token = self._special_text(self.eos)
        out = c_void_p()
        n = c_size_t()
        err = _ffi.nu_error()
        _check(lib.nu_chat_render(tpl, byref(p), byref(out), byref(n), byref(err)), err)
        try:
            return ctypes.string_at(out, n.value).decode("utf-8", "replace")
        finally:
            _ffi.c_free(out.value)

    def _end_of_turn_tokens(self) -> List[int]:
        """End-of-turn tokens of the common chat formats that the vocabulary has."""
        out = []
        for text in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>",
                     "<|END_OF_TURN_TOKEN|>", "<|endoftext|>", "</s>"):
            toks = self.tokenize(text, add_bos=False, special=True)
            if len(toks) == 1 and _ffi.lib().nu_token_get_type(self._handle(), toks[0]) in (3, 4):
                out.append(toks[0])
        return out

    def chat(self, messages: Sequence[Mapping[str, Any]], *, stream: bool = False,
             tools: Optional[Sequence[Mapping[str, Any]]] = None,
             **options: Any) -> Union[Completion, Stream]:
        """The assistant's next message in a conversation.

        ``messages`` is a list of {"role": "system" | "user" | "assistant",
        "content": text} dicts. The model's chat template renders them (see
        :meth:`render_chat`); generation stops at the template's end-of-turn
        token (and, for the plain template, at a new "User:" line). Takes the
        options of :meth:`generate`; ``stream=True`` returns a :class:`Stream`.
        """
        text = self.render_chat(messages, tools=tools)
        bos = self._special_text(self.bos)
        options = dict(options)
        options.setdefault("special", True)
        options.setdefault("add_bos", not (bos and text.encode().startswith(bos)))
        stop = _strings("stop", options.get("stop"))
        if self.chat_template_name == "plain":
            stop.append("\nUser:")
        options["stop"] = stop or None
        options["stop_tokens"] = list(options.get("stop_tokens") or []) + \
            self._end_of_turn_tokens()
        if stream:
            return self.stream(text, **options)
        result = self.generate(text, **options)
        return result

    # -- evaluation ---------------------------------------------------------

    def perplexity(self, text: str, *, window: Optional[int] = None,
                   score_from: Optional[int] = None, windows: bool = False) -> Perplexity:
        """The perplexity of text, as ``nucleus perplexity`` measures it: BOS
        added, then by default llama-perplexity's chunks of ``window`` tokens
        (default: the context's size), each starting with BOS and scoring its
        second half; with ``windows`` (or a ``score_from``) windows of the
        tokens as they are, each scoring its tokens from ``score_from``
        (default: half the window) on."""
        lib = _ffi.lib()
        tokens = self.tokenize(text, add_bos=True)
        arr = (c_int32 * len(tokens))(*tokens)
        p = lib.nu_perplexity_default_params()
        if windows or score_from is not None:
            p.mode = _ffi.PerplexityMode.WINDOWS
        if window is not None:
            p.n_window = _int("window", window, 2)
        if score_from is not None:
            p.score_from = _int("score_from", score_from, 1)
        out = _ffi.nu_perplexity_result()
        err = _ffi.nu_error()
        self._enter()
        try:
            st = lib.nu_perplexity(self._ctx, arr, len(tokens), byref(p), byref(out), byref(err))
        finally:
            self._leave()
        _check(st, err)
        return Perplexity(perplexity=out.perplexity, stderr=out.stderr_ppl, nll=out.nll,
                          n_tokens=len(tokens), n_scored=int(out.n_scored),
                          n_windows=int(out.n_windows))

    # -- helpers ------------------------------------------------------------

    def _compile_grammar(self, opt: Mapping[str, Any]) -> Optional[int]:
        """The grammar the constraint options ask for (a handle to free), or None."""
        kinds = [k for k in ("grammar", "json_schema", "json", "regex", "choices")
                 if opt.get(k) not in (None, False)]
        if len(kinds) > 1:
            raise ValueError(f"give at most one of grammar, json_schema, json, regex, choices "
                             f"(got {', '.join(kinds)})")
        if not kinds:
            return None
        lib, m = _ffi.lib(), self._handle()
        kind, value = kinds[0], opt[kinds[0]]
        jo = lib.nu_json_default_options()
        if opt.get("json_whitespace") is not None:
            jo.max_whitespace = _int("json_whitespace", opt["json_whitespace"], 0)
        g = c_void_p()
        err = _ffi.nu_error()
        if kind == "grammar":
            st = lib.nu_grammar_from_gbnf(m, str(value).encode(), None, byref(g), byref(err))
        elif kind == "json_schema":
            schema = value if isinstance(value, str) else _json.dumps(value)
            st = lib.nu_grammar_from_json_schema(m, schema.encode(), byref(jo), byref(g),
                                                 byref(err))
        elif kind == "json":
            st = lib.nu_grammar_json_object(m, byref(jo), byref(g), byref(err))
        elif kind == "regex":
            st = lib.nu_grammar_from_regex(m, str(value).encode(), byref(g), byref(err))
        else:
            items = [c.encode() for c in _strings("choices", value)]
            arr = (c_char_p * len(items))(*items)
            st = lib.nu_grammar_from_choices(m, arr, len(items), byref(g), byref(err))
        _check(st, err)
        return g.value

    def _logprob(self, lp: _ffi.nu_token_logprob, raw: bytes) -> TokenLogprob:
        top = [(int(t.token), float(t.logprob)) for t in lp.top[: lp.n_top]]
        offset = len(raw[: lp.text_offset].decode("utf-8", "ignore"))
        text = self.token_bytes(lp.token).decode("utf-8", "replace")
        return TokenLogprob(token=int(lp.token), text=text, logprob=float(lp.logprob), top=top,
                            offset=offset)

    def _completion(self, r: _ffi.nu_generate_result) -> Completion:
        raw = ctypes.string_at(r.text, r.text_len) if r.text else b""
        lps = [self._logprob(r.logprobs[i], raw) for i in range(r.n_logprobs)] \
            if r.logprobs else None
        reason = _ffi.lib().nu_finish_reason_name(r.finish).decode()
        return Completion(
            text=raw.decode("utf-8", "replace"),
            tokens=list(r.tokens[: r.n_tokens]) if r.tokens else [],
            finish_reason=reason,
            logprobs=lps[r.n_prompt_logprobs:] if lps is not None else None,
            prompt_logprobs=lps[: r.n_prompt_logprobs] if lps is not None and r.n_prompt_logprobs
            else None,
            sum_logprob=float(r.sum_logprob),
            n_prompt_tokens=int(r.n_prompt),
            n_cached_tokens=int(r.n_cached),
            prompt_ms=float(r.prompt_ms),
            generate_ms=float(r.generate_ms),
            index=int(r.index),
        )

