"""nucleus: text generation for GGUF language models on the CPU, from Python.

A pure-Python package over the nucleus C library (libnucleus.so) with
ctypes::

    import nucleus

    with nucleus.Model() as model:          # the demo model, models/stories260K.gguf
        print(model.generate("Once upon a time", max_tokens=32, temperature=0).text)
        for piece in model.stream("Once upon a time", max_tokens=32):
            print(piece, end="", flush=True)

See python/README.md for the rest (chat, batches, log-probs, constrained
output, perplexity, BLEU and ROUGE) and how the library is found.
"""

from ._ffi import FinishReason, LibraryNotFound, Status, library_path
from ._metrics import BleuScore, RougeScore, bleu, rouge, rouge_bootstrap, sentence_bleu
from ._model import (
    OPTIONS,
    Completion,
    Model,
    NucleusError,
    Perplexity,
    Stream,
    TokenLogprob,
    demo_model_candidates,
    find_demo_model,
)

__version__ = "0.1.0"

__all__ = [
    "Model",
    "Completion",
    "TokenLogprob",
    "Perplexity",
    "Stream",
    "bleu",
    "sentence_bleu",
    "BleuScore",
    "rouge",
    "rouge_bootstrap",
    "RougeScore",
    "NucleusError",
    "LibraryNotFound",
    "Status",
    "FinishReason",
    "OPTIONS",
    "find_demo_model",
    "demo_model_candidates",
    "library_path",
    "__version__",
]
