"""The package's API (torchmt/__init__.py exports it on first use)."""

from __future__ import annotations

import concurrent.futures
import itertools
import numbers
import operator
import os
import stat
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Union

import importlib.metadata as _metadata

try:
    _TORCH = _metadata.version("torch")
except _metadata.PackageNotFoundError:
    raise ImportError("torchmt needs torch: pip install torch (the version torchmt was built against)") from None

# The compiled core finds LibTorch's libraries in the installed torch (its RPATH): torch's own
# Python module is not imported, which would cost a process about 100 MiB more.
from . import _native

PathLike = Union[str, os.PathLike]

__all__ = ["Translator", "TranslationResult", "ScoringResult", "GenerationStepResult", "AsyncTranslationResult",
           "AsyncScoringResult", "ExecutionStats", "train", "distill", "bleu", "chrf", "evaluate", "filter_corpus",
           "limit_library_isas", "use_cpu_tensor_pool", "use_one_heap_arena", "use_shape_free_cuda_attention",
           "__version__"]
__version__ = _native.version

if _TORCH.split("+")[0] != _native.torch_version:
    raise ImportError(
        f"torchmt was built against torch {_native.torch_version} but torch {_TORCH} is installed: "
        f"install torch=={_native.torch_version}, or build torchmt again against this torch (pip install . in its repository)"
    )

_COMPUTE_TYPES = {
    "auto": "auto",
    "default": "auto",
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "int8": "int8",
    "int8_float32": "int8",
}


def _is_bool(value: Any) -> bool:
    # numpy's bool_ is no int and no bool: told apart by its type, numpy is not imported
    return isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool"))


def _check_int(name: str, value: Any, minimum: int, maximum: int = 2**31 - 1) -> int:
    # Any integral number (numpy's integers too), never a bool.
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    value = operator.index(value)
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if value > maximum:  # (beyond C++'s integers pybind11's cast error names no option)
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return value


def _check_float(name: str, value: Any) -> float:
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    return float(value)


def _check_bool(name: str, value: Any) -> bool:
    # A string would be truthy: return_scores="false" must not turn scores on.
    if not _is_bool(value):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return bool(value)


def _check_text(what: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} is not valid UTF-8 text (character {e.start}: {value[e.start]!r})") from None
    return value


def _existing_file(path: Any, what: str) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what} must be a path, not {type(path).__name__}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(2, f"{what} not found", path)
    return path


class TranslationResult:
    """The translation of one source: ``hypotheses`` best first (strings for string input, token
    lists for token input), ``scores`` (length-normalised log-probabilities, when asked),
    ``alignments`` (per hypothesis, ``(source_word, target_word)`` pairs, when asked) and
    ``attention`` (per hypothesis, its target tokens' weights over the source, when asked)."""

    __slots__ = ("hypotheses", "scores", "log_probs", "alignments", "attention", "truncated", "_pieces")

    def __init__(self, hypotheses, scores, log_probs, alignments, truncated, pieces=None, attention=None):
        self._pieces = pieces  # the hypotheses' target pieces, where translate_file asked for them
        self.attention = attention if attention is not None else []
        self.hypotheses = hypotheses
        self.scores = scores
        self.log_probs = log_probs
        self.alignments = alignments
        self.truncated = truncated

    def __getitem__(self, i: int) -> Dict[str, Any]:
        # CTranslate2's older dict form: result[0]["tokens"], result[0]["score"].
        hyp = self.hypotheses[i]
        out = {"tokens": hyp} if isinstance(hyp, list) else {"text": hyp}
        if self.scores:
            out["score"] = self.scores[i]
        return out

    def __len__(self) -> int:
        return len(self.hypotheses)

    def __repr__(self) -> str:
        return f"TranslationResult(hypotheses={self.hypotheses!r}, scores={self.scores!r})"


class ScoringResult:
    """The score of one (source, target) pair (CTranslate2's ``ScoringResult``): the target's
    ``tokens`` (its pieces, then ``"</s>"``) with one log-probability each in ``log_probs``, their
    sum ``log_prob``, ``score`` (length-normalised as translate_batch scores a hypothesis), and
    ``truncated`` (a side longer than the model accepts, cut before scoring)."""

    __slots__ = ("tokens", "log_probs", "log_prob", "score", "truncated")

    def __init__(self, tokens, log_probs, log_prob, score, truncated):
        self.tokens, self.log_probs, self.log_prob, self.score, self.truncated = (
            tokens, log_probs, log_prob, score, truncated)

    def __repr__(self) -> str:
        return f"ScoringResult(tokens={self.tokens!r}, log_probs={self.log_probs!r}, score={self.score:.4f})"


class ExecutionStats:
    """What translate_file did (CTranslate2's ``ExecutionStats``): ``num_examples`` (source lines),
    ``num_tokens`` (target tokens written) and ``total_time_in_ms`` (wall time)."""

    __slots__ = ("num_examples", "num_tokens", "total_time_in_ms")

    def __init__(self, num_examples: int, num_tokens: int, total_time_in_ms: float):
        self.num_examples, self.num_tokens, self.total_time_in_ms = num_examples, num_tokens, total_time_in_ms

    def __repr__(self) -> str:
        return (f"ExecutionStats(num_examples={self.num_examples}, num_tokens={self.num_tokens}, "
                f"total_time_in_ms={self.total_time_in_ms:.1f})")


def _take(entries: Iterator[Any], n: int) -> List[Any]:
    """The next n entries (fewer at the end); a string's trailing newline dropped, so that an open
    file can be passed as it is."""
    return [e[:-1] if isinstance(e, str) and e.endswith("\n") else e for e in itertools.islice(entries, n)]


def _read_lines(path: PathLike, what: str) -> Iterator[str]:
    """A text file's lines, lazily, without their line ends and a first line's byte-order mark (as
    the CLI reads them); invalid UTF-8 is a ValueError naming the file and line."""
    path = _existing_file(path, what)
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{what} {path}: line {number} is not valid UTF-8 (byte {e.start + 1})") from None
            yield line.rstrip("\n").rstrip("\r")


def _write_whole(path: PathLike, lines: Iterable[str]) -> None:
    """Writes `lines` to `path` so that it appears whole: into a temporary beside it, renamed over
    it at the end (keeping the old file's mode); a device or FIFO is written as a stream, a link's
    file replaced and the link kept (as the CLI writes its outputs)."""
    path = os.path.realpath(path) if os.path.islink(path) else os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with open(path, "w", encoding="utf-8", newline="\n") as out:
            for line in lines:
                out.write(line + "\n")
        return
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=os.path.basename(path) + ".tmp.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            for line in lines:
                out.write(line + "\n")
        os.chmod(temporary, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _umask() -> int:
    # Read, not set and restored: os.umask would race with the host's other threads.
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


class _AsyncResult:
    __slots__ = ("_future", "_index")

    def __init__(self, future: "concurrent.futures.Future", index: int):
        self._future = future
        self._index = index

    def result(self):
        """Waits for the batch this source is in and returns its result, or raises the batch's
        exception."""
        return self._future.result()[self._index]

    def done(self) -> bool:
        """Whether the result is ready (result() would not wait)."""
        return self._future.done()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(done={self.done()})"


class AsyncTranslationResult(_AsyncResult):
    """One source's translation under way (``translate_batch(..., asynchronous=True)``, as
    CTranslate2's): ``result()`` waits for its TranslationResult, ``done()`` says whether it is ready."""

    __slots__ = ()


class AsyncScoringResult(_AsyncResult):
    """One pair's score under way (``score_batch(..., asynchronous=True)``): ``result()`` waits for
    its ScoringResult, ``done()`` says whether it is ready."""

    __slots__ = ()


class GenerationStepResult:
    """One step of generate_tokens: the target token decided at ``step`` (its id and piece), its
    log-probability, and whether it is the last."""

    __slots__ = ("step", "token_id", "token", "log_prob", "is_last")

    def __init__(self, step, token_id, token, log_prob, is_last):
        self.step, self.token_id, self.token, self.log_prob, self.is_last = step, token_id, token, log_prob, is_last

    def __repr__(self) -> str:
        return (f"GenerationStepResult(step={self.step}, token_id={self.token_id}, token={self.token!r}, "
                f"log_prob={self.log_prob:.4f}, is_last={self.is_last})")


class Translator:
    """A translation model loaded for decoding (CTranslate2's ``Translator``).

    Args:
        model_path: a torchmt checkpoint (``checkpoint_best.pt``) or a TorchScript export; a list
            of them: an ensemble (the models' log-probabilities averaged at every step; they
            must share the vocabulary).
        device: ``"cpu"``, ``"cuda"`` (``"cuda:1"``), or ``"auto"`` (a GPU when there is one).
        compute_type: ``"auto"`` (measures fp32 against bf16 on this machine and keeps the
            faster; an int8 export runs int8), ``"float32"``, ``"bfloat16"``, ``"float16"``
            (CUDA), ``"int8"`` (CPU: int8 weights and kernels).
        inter_threads: batches decoded at once, whoever calls (several Python threads share
            them).
        intra_threads: threads inside each batch's operations; 0: the cores / inter_threads.
        shortlist: a ``torchmt shortlist`` table restricting each sentence's output vocabulary.
        ensemble_weights: an ensemble's weights, one positive number per model (default: equal).
        runtime: this translator's CPU kernel settings where they differ from the environment
            table's (``TORCHMT_CPU_ISA`` ...): ``cpu_isa`` (``"portable"``, ``"avx2"``,
            ``"avx512"``, ``"avx512-vnni"``, ``"avx512-bf16"``, ``"avx512-amx"``), ``packed_gemm`` (``"aten"``,
            ``"mkl"``, ``"onednn"``), ``screened_argmax``, ``screened_beam``, ``sparse_input``
            (bools). Each translator runs under its own, on whichever thread calls it.

    The program's own settings (``torch.set_num_threads``, environment, allocator, signal
    handlers) are never changed.
    """

    def __init__(
        self,
        model_path: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]],
        device: str = "cpu",
        compute_type: str = "auto",
        inter_threads: int = 1,
        intra_threads: int = 0,
        device_index: int = 0,
        shortlist: Optional[Union[str, os.PathLike]] = None,
        runtime: Optional[Dict[str, Union[str, bool]]] = None,
        ensemble_weights: Optional[Sequence[float]] = None,
    ):
        if isinstance(model_path, (str, os.PathLike)):
            paths = [_existing_file(model_path, "model")]
        elif isinstance(model_path, (list, tuple)) and model_path:
            paths = [_existing_file(p, "model") for p in model_path]
        else:
            raise TypeError("model_path must be a path or a non-empty list of paths")
        weights = ""
        if ensemble_weights is not None:
            if not isinstance(ensemble_weights, (list, tuple)) or len(ensemble_weights) != len(paths):
                raise ValueError(f"ensemble_weights must give one weight per model ({len(paths)})")
            for w in ensemble_weights:
                if _is_bool(w) or not isinstance(w, numbers.Real) or not w > 0 or w == float("inf"):
                    raise ValueError(f"ensemble_weights must be positive numbers, got {w!r}")
            weights = ",".join(repr(float(w)) for w in ensemble_weights)
        if not isinstance(device, str) or not (device in ("cpu", "auto") or device.startswith("cuda")):
            raise ValueError(f"device must be 'cpu', 'cuda' or 'auto', got {device!r}")
        if compute_type not in _COMPUTE_TYPES:
            raise ValueError(f"compute_type must be one of {', '.join(_COMPUTE_TYPES)}; got {compute_type!r}")
        _check_int("inter_threads", inter_threads, 1, 1024)
        _check_int("intra_threads", intra_threads, 0, 1024)
        _check_int("device_index", device_index, 0)
        if device == "cuda" and device_index:
            device = f"cuda:{device_index}"
        table = _existing_file(shortlist, "shortlist") if shortlist is not None else ""
        # As bytes: a file name that is not UTF-8 (os.fsdecode's surrogates) reaches the file system as it is.
        arguments = ([os.fsencode(p) for p in paths], weights, device, _COMPUTE_TYPES[compute_type], inter_threads,
                     intra_threads, os.fsencode(table), _runtime_settings(runtime))
        self._load = lambda: _native.NativeTranslator(*arguments)
        self._loaded = self._load()
        self.model_path = paths[0] if len(paths) == 1 else paths
        self._inter_threads = inter_threads
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pool_lock = threading.Lock()

    def _submit(self, work: Callable[[], list], kind: type, n: int) -> list:
        # Asynchronous calls run on this translator's own threads, as many as its inter_threads
        # (the native call releases the GIL); one future per batch, one handle per source.
        with self._pool_lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self._inter_threads, thread_name_prefix="torchmt")
        future = self._pool.submit(work)
        return [kind(future, i) for i in range(n)]

    @property
    def _native(self):
        if self._loaded is None:
            raise RuntimeError("the model is unloaded (unload_model): call load_model() first")
        return self._loaded

    @_native.setter
    def _native(self, native) -> None:
        self._loaded = native

    def unload_model(self, to_cpu: bool = False) -> None:
        """Frees the model's memory (CTranslate2's ``unload_model``); ``load_model()`` reads it
        again from its file(s). Calls meanwhile raise RuntimeError; batches already running end
        first. (``to_cpu=True``, which parks a GPU model in host memory, is not offered.)"""
        if _check_bool("to_cpu", to_cpu):
            raise ValueError("unload_model(to_cpu=True) is not offered: unload_model() frees the model and "
                             "load_model() reads it again")
        self._loaded = None

    def load_model(self, keep_cache: bool = False) -> None:
        """Loads the model again after unload_model() (its file(s) as they are now; checksums checked
        again); nothing when it is loaded. ``keep_cache`` is CTranslate2's and changes nothing here
        (no cache of the unloaded model is kept)."""
        _check_bool("keep_cache", keep_cache)
        if self._loaded is None:
            self._loaded = self._load()

    @property
    def model_is_loaded(self) -> bool:
        """False between unload_model() and load_model()."""
        return self._loaded is not None

    @property
    def num_translators(self) -> int:
        """Batches translated at once (``inter_threads``)."""
        return self._inter_threads

    @property
    def device(self) -> str:
        """Where the model runs (``"cpu"``, ``"cuda:0"``)."""
        return self._native.device

    @property
    def compute_type(self) -> str:
        """The precision decoding runs in: ``"fp32"``, ``"bf16"``, ``"fp16"`` or ``"int8"``."""
        return self._native.precision

    def translate_batch(
        self,
        source: Sequence[Union[str, Sequence[str]]],
        target_prefix: Optional[Sequence[Optional[Union[str, Sequence[str]]]]] = None,
        *,
        max_batch_size: int = 64,
        batch_type: str = "examples",
        beam_size: int = 1,
        num_hypotheses: int = 1,
        length_penalty: float = 0.6,
        max_decoding_length: int = 256,
        max_len_a: float = 1.2,
        max_len_b: int = 10,
        early_exit: bool = False,
        patience: float = 1.0,
        return_scores: bool = False,
        return_alignments: bool = False,
        return_attention: bool = False,
        constraints: Optional[Sequence[Optional[Sequence[str]]]] = None,
        sampling_topk: int = 1,
        sampling_topp: float = 1.0,
        sampling_temperature: float = 1.0,
        seed: int = 1,
        min_decoding_length: int = 0,
        disable_unk: bool = False,
        no_repeat_ngram_size: int = 0,
        repetition_penalty: float = 1.0,
        reverse_weight: float = 0.0,
        reverse_translator: Optional["Translator"] = None,
        asynchronous: bool = False,
        _first_line: int = 0,
        _target_pieces: bool = False,
    ) -> Union[List[TranslationResult], List[AsyncTranslationResult]]:
        """Translates a batch of sources; one TranslationResult per source, in order. The GIL is
        released meanwhile; Ctrl-C stops the search at its next step and raises KeyboardInterrupt.

        Args:
            source: strings (raw text), or token lists (SentencePiece pieces of the model's
                source vocabulary, as CTranslate2 takes them; results are then token lists).
            target_prefix: per source, text (or pieces) the translation must start with, or None.
            max_batch_size: sentences per batch (``batch_type="examples"``), or source tokens per
                batch, padding included (``batch_type="tokens"``); sources are sorted by length and
                cut into batches as ``torchmt translate`` does, so the outputs are the CLI's (0: one
                batch, CTranslate2's "no limit").
            beam_size: 1 = greedy search. num_hypotheses: hypotheses per source (<= beam_size).
            length_penalty: GNMT's alpha (score / ((5 + len) / 6) ** alpha), torchmt's default.
            max_decoding_length: at most this many target tokens, and at most
                ``max_len_a * source length + max_len_b``.
            early_exit: beam search ends a sentence once its best candidate is finished.
            patience: beam search runs until round(beam_size x patience) hypotheses are finished
                (CTranslate2's; above 1 it searches longer).
            return_scores: fill ``scores`` (and ``log_probs``). return_alignments: fill
                ``alignments`` from the model's cross-attention (checkpoints only).
            return_attention: fill ``attention``: per hypothesis, one row per target token (the
                step that chose it) of weights over the source tokens and the source's end
                token, the last decoder layer's mean over heads (checkpoints only).
            constraints: per source, target phrases the translation must contain (terminology;
                lexically constrained beam search), or None.
            sampling_topk, sampling_topp, sampling_temperature, seed: sample instead of searching
                (topk 0 = the whole vocabulary); each source's draws depend only on the seed and
                its position, not on batching or threads.
            min_decoding_length: no end before this many target tokens (a prefix's included);
                the length limit wins. disable_unk: never the unknown token.
            no_repeat_ngram_size: no n-gram of this many tokens twice in one output (0 = off).
            repetition_penalty: a token already in the output has its log-probability multiplied
                by this (> 1 discourages repeating; CTranslate2 scales logits instead); the scores
                then include it. These rules hold for greedy, beam and sampling.
            reverse_weight: rerank the beam by score(translation | source) + reverse_weight x
                score(source | translation) (``torchmt translate --reverse-weight``; 0 = off; needs
                beam_size >= 2); the reverse score comes from ``reverse_translator`` (a Translator
                of the other direction), or from this model when it was trained with both directions.
            asynchronous: return at once, one AsyncTranslationResult per source (``result()``
                waits for it); the batch runs on one of the translator's ``inter_threads``
                threads. Bad options still raise here; Ctrl-C does not stop such a batch.
        """
        if _is_bool(reverse_weight) or not isinstance(reverse_weight, numbers.Real) or not reverse_weight >= 0:
            raise ValueError(f"reverse_weight must be a number >= 0, got {reverse_weight!r}")
        if reverse_weight and beam_size < 2:
            raise ValueError("reverse_weight reranks a beam: beam_size must be at least 2")
        if reverse_translator is not None and not isinstance(reverse_translator, Translator):
            raise TypeError(f"reverse_translator must be a torchmt.Translator, not {type(reverse_translator).__name__}")
        if reverse_translator is not None and not reverse_weight:
            raise ValueError("reverse_translator is used by reverse_weight: give it a weight above 0")
        tokens_in, lines = self._source_lines(source)
        n = len(lines)
        prefixes = self._per_source("target_prefix", target_prefix, n, tokens_in)
        if constraints is not None:
            if isinstance(constraints, (str, bytes)) or len(constraints) != n:
                raise ValueError(f"constraints must hold one list per source ({n}), got {_length(constraints)}")
            phrases = []
            for i, c in enumerate(constraints):
                if c is None:
                    phrases.append([])
                elif isinstance(c, (str, bytes)):
                    raise TypeError(f"constraints[{i}] must be a list of phrases, not a {type(c).__name__}")
                else:
                    phrases.append([_check_text(f"constraints[{i}][{j}]", p) for j, p in enumerate(c)])
            constraints = phrases
        settings = self._settings(beam_size=beam_size, num_hypotheses=num_hypotheses, length_penalty=length_penalty,
                                  max_decoding_length=max_decoding_length, max_len_a=max_len_a, max_len_b=max_len_b,
                                  early_exit=early_exit, return_scores=return_scores, sampling_topk=sampling_topk,
                                  sampling_topp=sampling_topp, sampling_temperature=sampling_temperature, seed=seed,
                                  max_batch_size=max_batch_size, batch_type=batch_type, first_line=_first_line,
                                  patience=patience, min_decoding_length=min_decoding_length, disable_unk=disable_unk,
                                  no_repeat_ngram_size=no_repeat_ngram_size, repetition_penalty=repetition_penalty)
        aligned = _check_bool("return_alignments", return_alignments)
        attended = _check_bool("return_attention", return_attention)
        reverse_native = reverse_translator._native if reverse_translator is not None else None

        def run() -> List[TranslationResult]:
            raw = self._native.translate(lines, settings, prefixes or [], constraints or [], aligned, attended,
                                         tokens_in or _target_pieces, float(reverse_weight), reverse_native)
            return [TranslationResult(hypotheses=[pieces if tokens_in else text for text, pieces, _, _ in hyps],
                                      scores=[score for _, _, score, _ in hyps] if return_scores else [],
                                      log_probs=[log_prob for _, _, _, log_prob in hyps] if return_scores else [],
                                      alignments=[list(a) for a in alignments] if aligned else [],
                                      truncated=truncated,
                                      pieces=[pieces for _, pieces, _, _ in hyps] if _target_pieces else None,
                                      attention=[[list(row) for row in a] for a in attention] if attended else None)
                    for hyps, alignments, truncated, attention in raw]

        if _check_bool("asynchronous", asynchronous):
            return self._submit(run, AsyncTranslationResult, n)
        return run()

    def score_batch(
        self,
        source: Sequence[Union[str, Sequence[str]]],
        target: Sequence[Union[str, Sequence[str]]],
        *,
        max_batch_size: int = 64,
        batch_type: str = "examples",
        length_penalty: float = 0.6,
        asynchronous: bool = False,
    ) -> Union[List[ScoringResult], List[AsyncScoringResult]]:
        """Scores given translations (forced decoding, CTranslate2's ``score_batch``): how
        probable the model finds ``target[i]`` as the translation of ``source[i]``; one
        ScoringResult per pair, in order. Sources and targets are strings or token lists (pieces,
        joined and tokenized again by the model's vocabulary). A hypothesis that translate_batch
        returned scores as it scored it (``score``, with the same ``length_penalty``), as
        ``torchmt score`` does. Batched as translate_batch (``max_batch_size``, ``batch_type``);
        ``asynchronous`` as translate_batch's (one AsyncScoringResult per pair)."""
        tokens_in, lines = self._source_lines(source)
        if isinstance(target, (str, bytes)) or not isinstance(target, Sequence):
            raise TypeError(f"target must be a list of strings or of token lists, not {type(target).__name__}")
        targets = self._per_source("target", target, len(lines), tokens_in)
        if targets is None or any(t is None for t in target):
            raise ValueError("target must hold one translation per source (no None)")
        settings = self._settings(beam_size=1, num_hypotheses=1, length_penalty=length_penalty, max_decoding_length=1,
                                  max_len_a=0.0, max_len_b=0, early_exit=False, return_scores=True, sampling_topk=1,
                                  sampling_topp=1.0, sampling_temperature=1.0, seed=1, max_batch_size=max_batch_size,
                                  batch_type=batch_type, first_line=0)
        def run() -> List[ScoringResult]:
            return [ScoringResult(*s) for s in self._native.score(lines, targets, settings)]

        if _check_bool("asynchronous", asynchronous):
            return self._submit(run, AsyncScoringResult, len(lines))
        return run()

    def translate_iterable(
        self,
        source: Iterable[Union[str, Sequence[str]]],
        target_prefix: Optional[Iterable[Optional[Union[str, Sequence[str]]]]] = None,
        *,
        max_batch_size: int = 64,
        batch_type: str = "examples",
        buffer_size: int = 1024,
        **options: Any,
    ) -> Iterator[TranslationResult]:
        """Translates an iterable of sources lazily, yielding one TranslationResult per source in
        input order: ``buffer_size`` sources are read, sorted and translated at a time (as
        ``torchmt translate`` streams a file), so memory stays bounded however long the input.
        A string's trailing newline is dropped, so an open file can be passed as it is. Takes
        translate_batch's options."""
        _check_int("buffer_size", buffer_size, 1)
        if options.get("asynchronous"):
            raise ValueError("translate_iterable yields each result once it is ready: asynchronous is translate_batch's")
        if isinstance(source, (str, bytes)):  # (iterating it would translate each character)
            raise TypeError(f"source must be an iterable of strings or of token lists, not {type(source).__name__}")
        sources = iter(source)
        # Per source, as the sources: each chunk gets its own sources' prefixes and phrases.
        constraints = options.pop("constraints", None)
        for name, values in (("target_prefix", target_prefix), ("constraints", constraints)):
            if isinstance(values, (str, bytes)):
                raise TypeError(f"{name} must hold one entry per source, not a {type(values).__name__}")
        per_source = {name: iter(values) for name, values in (("target_prefix", target_prefix),
                                                               ("constraints", constraints)) if values is not None}
        first = 0
        while True:
            chunk = _take(sources, buffer_size)
            taken = {}
            for name, values in per_source.items():
                taken[name] = list(itertools.islice(values, len(chunk) if chunk else 1))
                if not chunk and taken[name]:
                    raise ValueError(f"{name} holds more entries than the {first} sources")
                if chunk and len(taken[name]) != len(chunk):
                    raise ValueError(f"{name} ended after {first + len(taken[name])} entries, before the sources")
            if not chunk:
                return
            results = self.translate_batch(chunk, taken.get("target_prefix"), max_batch_size=max_batch_size,
                                           batch_type=batch_type, constraints=taken.get("constraints"),
                                           _first_line=first, **options)
            first += len(chunk)
            yield from results

    def translate_file(
        self,
        source_path: PathLike,
        output_path: PathLike,
        target_path: Optional[PathLike] = None,
        *,
        max_batch_size: int = 64,
        read_batch_size: int = 1024,
        batch_type: str = "examples",
        with_scores: bool = False,
        source_tokenize_fn: Optional[Callable[[str], List[str]]] = None,
        target_tokenize_fn: Optional[Callable[[str], List[str]]] = None,
        target_detokenize_fn: Optional[Callable[[List[str]], str]] = None,
        **options: Any,
    ) -> ExecutionStats:
        """Translates a file line by line into ``output_path`` (CTranslate2's ``translate_file``),
        as ``torchmt translate -i -o`` does: raw UTF-8 text, which the model's vocabulary tokenizes,
        unless ``source_tokenize_fn`` turns each line into pieces (and ``target_tokenize_fn`` each
        prefix); the output pieces are then joined by ``target_detokenize_fn`` (default: spaces; the
        model's vocabulary for text input). ``target_path``: a target prefix per line.
        ``read_batch_size`` lines are read and sorted at a time, so memory stays bounded. One line
        per source, or ``num_hypotheses`` lines; ``with_scores``: ``score ||| translation``. The
        output appears whole once done (written beside it, then renamed): an error or Ctrl-C leaves
        what was there. Takes translate_batch's options; returns ExecutionStats."""
        _check_int("read_batch_size", read_batch_size, 1)
        scores = _check_bool("with_scores", with_scores)
        for name, fn in (("source_tokenize_fn", source_tokenize_fn), ("target_tokenize_fn", target_tokenize_fn),
                         ("target_detokenize_fn", target_detokenize_fn)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable, not {type(fn).__name__}")
        if options.get("asynchronous"):
            raise ValueError("translate_file writes its results as they come: asynchronous is translate_batch's")
        if target_path is not None and (source_tokenize_fn is None) != (target_tokenize_fn is None):
            raise ValueError("target_path's prefixes are tokenized as the sources: give target_tokenize_fn with "
                             "source_tokenize_fn, or neither")
        options = dict(options)
        if scores:
            options["return_scores"] = True
        source_name = os.fspath(source_path)
        sources: Iterator[Any] = _read_lines(source_path, "source_path")
        if source_tokenize_fn is not None:
            sources = (source_tokenize_fn(line) for line in sources)
        prefixes = None
        if target_path is not None:
            prefix_name = os.fspath(target_path)
            prefix_lines = _read_lines(target_path, "target_path")
            prefixes = prefix_lines if target_tokenize_fn is None else (target_tokenize_fn(p) for p in prefix_lines)
        stats = ExecutionStats(0, 0, 0.0)
        start = time.perf_counter()

        def lines() -> Iterator[str]:
            results = self.translate_iterable(sources, prefixes, max_batch_size=max_batch_size, batch_type=batch_type,
                                              buffer_size=read_batch_size, _target_pieces=True, **options)
            for result in results:
                stats.num_examples += 1
                for h, pieces in enumerate(result._pieces):
                    stats.num_tokens += len(pieces)
                    if target_detokenize_fn is not None:
                        text = target_detokenize_fn(pieces)
                    elif source_tokenize_fn is not None:
                        text = " ".join(pieces)
                    else:
                        text = result.hypotheses[h]
                    yield f"{result.scores[h]:.4f} ||| {text}" if scores else text

        try:
            _write_whole(output_path, lines())
        except ValueError as e:
            if target_path is not None and "target_prefix" in str(e):
                raise ValueError(f"target_path {prefix_name} and source_path {source_name} hold different numbers "
                                 f"of lines ({e})") from None
            raise
        stats.total_time_in_ms = (time.perf_counter() - start) * 1000.0
        return stats

    def score_iterable(
        self,
        source: Iterable[Union[str, Sequence[str]]],
        target: Iterable[Union[str, Sequence[str]]],
        *,
        max_batch_size: int = 64,
        batch_type: str = "examples",
        buffer_size: int = 1024,
        **options: Any,
    ) -> Iterator[ScoringResult]:
        """Scores pairs from two iterables lazily (CTranslate2's ``score_iterable``), yielding one
        ScoringResult per pair in order: ``buffer_size`` pairs are read and scored at a time. The
        two must hold as many entries (a ValueError says which ended first). Takes score_batch's
        options."""
        _check_int("buffer_size", buffer_size, 1)
        for name, values in (("source", source), ("target", target)):
            if isinstance(values, (str, bytes)):
                raise TypeError(f"{name} must be an iterable of strings or of token lists, not {type(values).__name__}")
        if options.get("asynchronous"):
            raise ValueError("score_iterable yields each result once it is ready: asynchronous is score_batch's")
        sources, targets = iter(source), iter(target)
        seen = 0
        while True:
            chunk = _take(sources, buffer_size)
            paired = _take(targets, len(chunk) if chunk else 1)
            if len(paired) != len(chunk):
                longer, shorter = ("source", "target") if len(chunk) > len(paired) else ("target", "source")
                raise ValueError(f"{shorter} ended after {seen + min(len(chunk), len(paired))} entries, before {longer}")
            if not chunk:
                return
            seen += len(chunk)
            yield from self.score_batch(chunk, paired, max_batch_size=max_batch_size, batch_type=batch_type, **options)

    def generate_tokens(
        self,
        source: Union[str, Sequence[str]],
        *,
        max_decoding_length: int = 256,
        max_len_a: float = 1.2,
        max_len_b: int = 10,
        sampling_topk: int = 1,
        sampling_topp: float = 1.0,
        sampling_temperature: float = 1.0,
        seed: int = 1,
        min_decoding_length: int = 0,
        disable_unk: bool = False,
        no_repeat_ngram_size: int = 0,
        repetition_penalty: float = 1.0,
    ) -> Iterator["GenerationStepResult"]:
        """Translates one source (text or token list) token by token, as the server streams:
        yields a GenerationStepResult (``step``, ``token_id``, ``token``, ``log_prob``,
        ``is_last``) as each target token is decided. Greedy search, or sampling with
        translate_batch's sampling options and token rules (``min_decoding_length``,
        ``disable_unk``, ``no_repeat_ngram_size``, ``repetition_penalty``); the tokens are
        translate_batch's for the same options.
        """
        tokens_in, lines = self._source_lines([source])
        settings = self._settings(beam_size=1, num_hypotheses=1, length_penalty=0.0,
                                  max_decoding_length=max_decoding_length, max_len_a=max_len_a,
                                  max_len_b=max_len_b, early_exit=False, return_scores=True,
                                  sampling_topk=sampling_topk, sampling_topp=sampling_topp,
                                  sampling_temperature=sampling_temperature, seed=seed, max_batch_size=1,
                                  batch_type="examples", first_line=0, min_decoding_length=min_decoding_length,
                                  disable_unk=disable_unk, no_repeat_ngram_size=no_repeat_ngram_size,
                                  repetition_penalty=repetition_penalty)
        if not lines[0].strip(" \t\r"):  # empty in, empty out, as translate_batch (Translator::is_blank)
            return
        stream = _native.NativeTokenStream(self._native, lines[0], settings)
        step = 0
        while True:
            result = stream.next()
            if result is None:
                return
            token_id, token, log_prob, is_last = result
            yield GenerationStepResult(step, token_id, token, log_prob, is_last)
            step += 1

    def tokenize(self, text: str) -> List[str]:
        """The source pieces the model reads for ``text``."""
        return self._native.tokenize_source(_check_text("text", text))

    @staticmethod
    def _settings(*, beam_size, num_hypotheses, length_penalty, max_decoding_length, max_len_a, max_len_b,
                  early_exit, return_scores, sampling_topk, sampling_topp, sampling_temperature, seed,
                  max_batch_size, batch_type, first_line, patience=1.0, min_decoding_length=0, disable_unk=False,
                  no_repeat_ngram_size=0, repetition_penalty=1.0):
        # Types here, in Python's words; ranges in the core, where the rules live.
        if batch_type not in ("examples", "tokens"):
            raise ValueError(f"batch_type must be 'examples' or 'tokens', got {batch_type!r}")
        if _check_int("max_batch_size", max_batch_size, 0) == 0:  # CTranslate2's "no limit": one batch
            max_batch_size = 2**31 - 1
        return {
            "beam_size": _check_int("beam_size", beam_size, 1),
            "num_hypotheses": _check_int("num_hypotheses", num_hypotheses, 1),
            "length_penalty": _check_float("length_penalty", length_penalty),
            "max_decoding_length": _check_int("max_decoding_length", max_decoding_length, 1),
            "max_len_a": _check_float("max_len_a", max_len_a),
            "max_len_b": _check_int("max_len_b", max_len_b, 0),
            "early_exit": _check_bool("early_exit", early_exit),
            "patience": _check_float("patience", patience),
            "return_scores": _check_bool("return_scores", return_scores),
            "sampling_topk": _check_int("sampling_topk", sampling_topk, 0),
            "sampling_topp": _check_float("sampling_topp", sampling_topp),
            "sampling_temperature": _check_float("sampling_temperature", sampling_temperature),
            "seed": _check_int("seed", seed, 0, 2**63 - 1),
            "min_decoding_length": _check_int("min_decoding_length", min_decoding_length, 0),
            "disable_unk": _check_bool("disable_unk", disable_unk),
            "no_repeat_ngram_size": _check_int("no_repeat_ngram_size", no_repeat_ngram_size, 0),
            "repetition_penalty": _check_float("repetition_penalty", repetition_penalty),
            "max_batch_size": max_batch_size if batch_type == "examples" else 1,
            "batch_source_tokens": max_batch_size if batch_type == "tokens" else 0,
            "first_line": first_line,
        }

    def _source_lines(self, source):
        if isinstance(source, (str, bytes)) or not isinstance(source, Sequence):
            raise TypeError(f"source must be a list of strings or of token lists, not {type(source).__name__}")
        if not source:
            return False, []
        tokens_in = not isinstance(source[0], str)
        lines = []
        for i, s in enumerate(source):
            if tokens_in:
                if isinstance(s, (str, bytes)) or not isinstance(s, Sequence):
                    raise TypeError(f"source[{i}] must be a token list like source[0], not {type(s).__name__}")
                lines.append(self._native.detokenize_source([_check_text(f"source[{i}] token", t) for t in s]))
            else:
                lines.append(_check_text(f"source[{i}]", s))
        return tokens_in, lines

    def _per_source(self, name, values, n, tokens_in):
        if values is None:
            return None
        if isinstance(values, (str, bytes)) or len(values) != n:
            raise ValueError(f"{name} must hold one entry per source ({n}), got {_length(values)}")
        out = []
        for i, v in enumerate(values):
            if v is None:
                out.append("")
            elif isinstance(v, str):
                out.append(_check_text(f"{name}[{i}]", v))
            else:
                out.append(self._native.detokenize_target([_check_text(f"{name}[{i}] token", t) for t in v]))
        return out


_RUNTIME_FIELDS = {"cpu_isa": str, "packed_gemm": str, "screened_argmax": bool, "screened_beam": bool,
                   "sparse_input": bool}


def _runtime_settings(runtime) -> Dict[str, Union[str, bool]]:
    if runtime is None:
        return {}
    if not isinstance(runtime, dict):
        raise TypeError(f"runtime must be a dict of kernel settings, not {type(runtime).__name__}")
    for key, value in runtime.items():
        if key not in _RUNTIME_FIELDS:
            raise ValueError(f"runtime has no setting {key!r} (settings: {', '.join(_RUNTIME_FIELDS)})")
        if not isinstance(value, _RUNTIME_FIELDS[key]):
            raise TypeError(f"runtime[{key!r}] must be a {_RUNTIME_FIELDS[key].__name__}, "
                            f"not {type(value).__name__}")
    return dict(runtime)


def _length(value) -> str:
    try:
        return str(len(value))
    except TypeError:
        return f"a {type(value).__name__}"


def limit_library_isas() -> None:
    """Points LibTorch's own kernels at the instruction sets the ``torchmt`` command uses, so that
    ``compute_type="int8"`` gives the command's lines exactly (ATen's AVX-512 copies round some
    operations differently: 4 of 1,000 test_2016 lines differed on an AVX-512 CPU). It sets
    ``ATEN_CPU_CAPABILITY`` (and, under ``TORCHMT_CPU_ISA``, oneDNN's and MKL's variables) where
    they are unset, so it acts only when called before the process's first tensor operation.
    torchmt never calls it itself: the environment is the program's."""
    _native.limit_library_isas()


def use_cpu_tensor_pool(cache_mb: int = 128) -> None:
    """Makes LibTorch allocate CPU tensors of 64 KiB and more from torchmt's pool of mapped
    blocks, as ``torchmt translate --tensor-pool`` does (util/heap.h: freed blocks are reused, so
    the peak stays flat over an endless stream, at 30-90 MiB more on a short one). Up to
    ``cache_mb`` MiB of freed blocks wait for reuse; a later call with more raises the limit.
    ``torchmt train`` uses the pool with 2048: call ``use_cpu_tensor_pool(2048)`` before
    :func:`train` for its speed (modern-small, bf16: 1.17x the tokens/s). It replaces the
    process's CPU allocator, for every tensor of the program from then on, so torchmt never calls
    it itself; ``TORCHMT_NO_TENSOR_POOL=1`` makes it do nothing."""
    if _is_bool(cache_mb) or not isinstance(cache_mb, numbers.Integral) or cache_mb < 0:
        raise ValueError(f"cache_mb={cache_mb!r}: expected a whole number of MiB, 0 or more")
    _native.use_cpu_tensor_pool(operator.index(cache_mb))


def use_one_heap_arena() -> None:
    """Puts the process's C heap in one arena (glibc's ``M_ARENA_MAX=1``), as ``torchmt
    translate`` does for batches of 32 sentences or more: worker threads then share their free
    pages instead of each keeping its own (modern-small, 1,000 lines, batch 64: 40-90 MiB lower
    peak at about the same speed; at batch 1 the workers wait on its lock, 1.27x the time). It
    changes the whole process's allocator policy, so torchmt never calls it itself; call it before
    threads start. No effect outside glibc."""
    _native.use_one_heap_arena()


def use_shape_free_cuda_attention() -> None:
    """Turns off the cuDNN backend of LibTorch's attention on GPUs, as the ``torchmt`` command
    does: it plans every new shape anew, and decoding changes shape every step (flash and
    memory-efficient attention remain). It changes the process's LibTorch setting, so torchmt never
    calls it itself; ``TORCHMT_CUDNN_SDPA=1`` makes it do nothing."""
    _native.use_shape_free_cuda_attention()


def _command_options(command: str, options: Dict[str, Any]):
    """A command's keyword options as the native layer takes them: text values and lists of text."""
    values, lists = {}, {}
    for key, value in options.items():
        if value is None:
            continue
        if _is_bool(value):
            values[key] = "true" if value else "false"
        elif isinstance(value, numbers.Integral):  # (numpy's integers too)
            values[key] = str(operator.index(value))
        elif isinstance(value, numbers.Real):
            values[key] = repr(float(value))
        elif isinstance(value, (str, os.PathLike)):
            values[key] = os.fspath(value) if isinstance(value, os.PathLike) else value
        elif isinstance(value, (list, tuple)):
            lists[key] = [os.fspath(v) if isinstance(v, os.PathLike) else str(v) for v in value]
        else:
            raise TypeError(f"{command} option {key} must be a number, a string, a bool or a list, "
                            f"not {type(value).__name__}")
    # (C++ would read a path with a NUL character as the shorter path before it)
    for key, text in itertools.chain(values.items(), ((k, v) for k, vs in lists.items() for v in vs)):
        if "\0" in text:
            raise ValueError(f"{command} option {key} holds a NUL character: {text!r}")
    return values, lists


def train(on_progress: Optional[Callable[[int, str], None]] = None, **options: Any) -> Dict[str, Any]:
    """Trains a model as ``torchmt train`` does; the options are its flags with ``_`` for ``-``::

        torchmt.train(train_src="train.de", train_tgt="train.en", valid_src="val.de",
                      valid_tgt="val.en", recipe="multi30k-15min", out="runs/deen")

    ``on_progress(step, line)`` receives each progress line (step -1 for the others). Ctrl-C
    stops the run with a checkpoint (``resume=True`` continues it), then raises
    KeyboardInterrupt. Returns the run's summary (steps, best_bleu, best_checkpoint, ...).
    """
    values, lists = _command_options("train", options)
    if on_progress is not None and not callable(on_progress):
        raise TypeError("on_progress must be callable")
    return _native.train(values, lists, on_progress)


def distill(on_progress: Optional[Callable[[int, str], None]] = None, **options: Any) -> Dict[str, Any]:
    """Sequence-level distillation as ``torchmt distill`` does; the options are its flags with ``_``
    for ``-``::

        torchmt.distill(teacher_model=["a.pt", "b.pt"], train_src="train.de", train_tgt="train.en",
                        valid_src="val.de", valid_tgt="val.en", preset="small", out="runs/student")

    The teachers translate the sources into ``out/teacher/`` (``back_translate=True``: the targets
    too, into ``out/teacher/back/``), the student trains into
    ``out/student/``, ``out/shortlist.txt`` is its shortlist. A call that stopped (Ctrl-C raises
    KeyboardInterrupt once the step in flight is saved) goes on where it stopped when made again.
    ``on_progress(step, line)`` receives each progress line. Returns the summary (teacher_lines,
    back_lines, teacher_seconds, student: the training summary, shortlist, ...).
    """
    values, lists = _command_options("distill", options)
    if on_progress is not None and not callable(on_progress):
        raise TypeError("on_progress must be callable")
    return _native.distill(values, lists, on_progress)


def clean(on_progress: Optional[Callable[[int, str], None]] = None, **options: Any) -> Dict[str, Any]:
    """Cleans a corpus with no trusted models as ``torchmt clean`` does; the options are its flags
    with ``_`` for ``-``::

        torchmt.clean(src="crawl.de", tgt="crawl.en", kept_src="clean.de", kept_tgt="clean.en",
                      valid_src="val.de", valid_tgt="val.en", recipe="multi30k-15min", out="runs/clean")

    The corpus is cut into ``folds`` parts; a forward and a backward model train on the other parts
    of each (``out/fold<k>/``), and each part is filtered by its own models as ``filter_corpus``
    does. A call that stopped (Ctrl-C raises KeyboardInterrupt once the training in flight is saved)
    goes on where it stopped when made again. Returns ``filter_corpus``'s report with
    ``thresholds`` (each part's), ``trained``, ``reused`` and ``train_seconds``.
    """
    values, lists = _command_options("clean", options)
    if on_progress is not None and not callable(on_progress):
        raise TypeError("on_progress must be callable")
    return _native.clean(values, lists, on_progress)


def filter_corpus(forward: "Translator", backward: "Translator", src: PathLike, tgt: PathLike, kept_src: PathLike,
                  kept_tgt: PathLike, *, max_score: Optional[float] = None, keep_fraction: Optional[float] = None,
                  reference_src: Optional[PathLike] = None, reference_tgt: Optional[PathLike] = None,
                  reference_quantile: float = 0.95, dropped: Optional[PathLike] = None,
                  scores: Optional[PathLike] = None, max_batch_size: int = 64, batch_type: str = "examples",
                  buffer_size: int = 4096, realign: bool = False, realign_candidates: int = 3,
                  realign_quantile: float = 0.9, realigned: Optional[PathLike] = None,
                  language_check: bool = True, contrast: bool = False,
                  length_quantile: float = 0.002) -> Dict[str, Any]:
    """Cleans a parallel corpus as ``torchmt filter`` does (dual conditional cross-entropy,
    Junczys-Dowmunt 2018): ``forward`` translates ``src`` into ``tgt``, ``backward`` the other way;
    the pairs probable both ways, and about equally so, go to ``kept_src``/``kept_tgt``. Give one
    threshold: ``max_score`` (nats per piece, lower is better), ``keep_fraction`` of the scored
    pairs, or clean ``reference_src``/``reference_tgt`` pairs (e.g. the validation set) whose
    scores' ``reference_quantile`` becomes it. ``dropped`` and ``scores`` also write TSVs of the
    dropped pairs and of every pair's scores. ``language_check`` drops, unscored, the pairs whose
    target reads as the source's language or the source as the target's. ``realign`` re-pairs
    dropped sources with dropped targets of other lines (``realign_candidates`` scored per source,
    kept at the source's line when within the kept pairs' ``realign_quantile``; ``realigned``: a
    TSV of them). ``contrast`` scores each side against the same side given another pair's (for
    models trained on a noisy corpus, which find any fluent side probable; the score becomes
    ``exp(D_f + D_b)``, 1 no likelier than with unrelated sides). ``length_quantile`` drops the pairs
    whose target pieces per source piece lie outside the reference pairs' (or the corpus's) ``Q``
    and ``1 - Q`` quantiles: a side cut short or run on. The outputs appear whole or not at all.
    Returns ``{"pairs", "kept", "dropped_by_score", "dropped_by_length", "unscorable", "truncated",
    "threshold", "length_bounds" ((low, high) or None), "reference_pairs", "realigned",
    "realign_threshold", "wrong_language", "summary"}``."""
    if not isinstance(forward, Translator) or not isinstance(backward, Translator):
        raise TypeError("forward and backward must be torchmt.Translator objects")
    options: Dict[str, Any] = {
        "src": _existing_file(src, "src"),
        "tgt": _existing_file(tgt, "tgt"),
        "reference_quantile": _check_float("reference_quantile", reference_quantile),
        "length_quantile": _check_float("length_quantile", length_quantile),
        "buffer_size": _check_int("buffer_size", buffer_size, 1),
        "realign_candidates": _check_int("realign_candidates", realign_candidates, 1),
        "realign_quantile": _check_float("realign_quantile", realign_quantile),
    }
    for name, value in (("realign", realign), ("language_check", language_check), ("contrast", contrast)):
        if not _is_bool(value):
            raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
        options[name] = bool(value)
    for name, path in (("reference_src", reference_src), ("reference_tgt", reference_tgt)):
        if path is not None:
            options[name] = _existing_file(path, name)
    for name, path in (("kept_src", kept_src), ("kept_tgt", kept_tgt), ("dropped", dropped), ("scores", scores),
                       ("realigned", realigned)):
        if path is not None:
            if not isinstance(path, (str, os.PathLike)):
                raise TypeError(f"{name} must be a path, not {type(path).__name__}")
            options[name] = os.fspath(path)
    for name, value in (("max_score", max_score), ("keep_fraction", keep_fraction)):
        if value is not None:
            options[name] = _check_float(name, value)
    settings = Translator._settings(beam_size=1, num_hypotheses=1, length_penalty=0.0, max_decoding_length=1,
                                    max_len_a=0.0, max_len_b=0, early_exit=False, return_scores=True,
                                    sampling_topk=1, sampling_topp=1.0, sampling_temperature=1.0, seed=1,
                                    max_batch_size=max_batch_size, batch_type=batch_type, first_line=0)
    values, _ = _command_options("filter_corpus", options)
    return _native.filter_corpus(forward._native, backward._native, values, settings)


def _check_pairs(hypotheses: Sequence[str], references: Sequence[str]):
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("hypotheses and references must be lists of strings")
    hyps = [_check_text(f"hypotheses[{i}]", h) for i, h in enumerate(hypotheses)]
    refs = [_check_text(f"references[{i}]", r) for i, r in enumerate(references)]
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    return hyps, refs


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> Dict[str, Any]:
    """Corpus BLEU exactly as sacreBLEU 2.6.0 computes it by default (13a, one reference each):
    ``score``, ``precisions``, ``bp``, ``ratio``, ``sys_len``, ``ref_len``, ``text`` (sacreBLEU's
    line) and ``signature``."""
    return _native.bleu(*_check_pairs(hypotheses, references))


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> Dict[str, Any]:
    """Corpus chrF2 exactly as sacreBLEU 2.6.0 computes it by default: ``score``, ``text``,
    ``signature``."""
    return _native.chrf(*_check_pairs(hypotheses, references))


def evaluate(translator: Translator, sources: Sequence[str], references: Sequence[str],
             **options: Any) -> Dict[str, Any]:
    """Translates ``sources`` (translate_batch's options) and scores them against ``references``
    as ``torchmt evaluate`` does: ``{"bleu": ..., "chrf": ..., "hypotheses": [...]}``."""
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references")
    hyps = [r.hypotheses[0] for r in translator.translate_batch(list(sources), **options)]
    return {"bleu": bleu(hyps, references), "chrf": chrf(hyps, references), "hypotheses": hyps}


# What help() and repr() name: the package, not this module.
for _public in (Translator, TranslationResult, ScoringResult, GenerationStepResult, train, bleu, chrf, evaluate,
                filter_corpus, limit_library_isas,
                use_cpu_tensor_pool, use_one_heap_arena, use_shape_free_cuda_attention):
    _public.__module__ = "torchmt"
del _public
