"""torchmt: Transformer translation models trained, run and scored by torchmt's C++ core.

The API follows CTranslate2's, so that a CTranslate2 user changes the import and little else::

    import torchmt
    translator = torchmt.Translator("runs/deen/checkpoint_best.pt", inter_threads=2)
    results = translator.translate_batch(["Ein Hund läuft über die Wiese."], beam_size=5)
    print(results[0].hypotheses[0])

Checkpoints (``.pt``) and TorchScript exports (``torchmt export``) load alike. Every long call
releases the GIL and stops cleanly on Ctrl-C (KeyboardInterrupt). Bad options raise ValueError
(TypeError for a wrong type), missing files FileNotFoundError, damaged ones RuntimeError; each
message is one line naming what is wrong.
"""

# Loaded on first use (PEP 562): the `torchmt` command (torchmt._cli) then starts without
# importing torch, and `import torchmt` costs nothing until the API is used.
from typing import TYPE_CHECKING

__all__ = ["Translator", "TranslationResult", "ScoringResult", "GenerationStepResult", "AsyncTranslationResult",
           "AsyncScoringResult", "train", "distill", "clean", "bleu", "chrf", "evaluate", "filter_corpus",
           "limit_library_isas", "use_cpu_tensor_pool", "use_one_heap_arena", "use_shape_free_cuda_attention",
           "__version__"]

if TYPE_CHECKING:
    from ._api import (AsyncScoringResult, AsyncTranslationResult, GenerationStepResult, ScoringResult,
                       TranslationResult, Translator, __version__, bleu, chrf, clean,
                       distill, evaluate, filter_corpus, limit_library_isas, train, use_cpu_tensor_pool,
                       use_one_heap_arena, use_shape_free_cuda_attention)


def __getattr__(name):
    if name in __all__:
        from . import _api

        return getattr(_api, name)
    raise AttributeError(f"module 'torchmt' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
