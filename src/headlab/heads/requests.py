"""Typed requests of the analyses over a trained model that check themselves before any model
loads: each bound is written here once, and the CLI maps a field's name to its option
(``headlab.cli.parsing.flags``).

``CorpusRequest``: the many short texts of ``model heads``, ``collapse``, ``importance``,
``prune``, ``ablate`` and ``redundancy``; ``head_statistics`` takes one in place of its list of
texts (``corpus_texts``). ``ImportanceRequest``, ``AblationRequest`` and ``CollapseRequest``: a
corpus (a ``CorpusRequest`` or the texts) with the options of ``head_importance``,
``ablation_effect`` and ``collapse_heads``, which take one in place of their texts (their
keywords still work: ``analysis_request`` builds the request from them). ``PruneRequest``: the
pruning curve of ``prune_by_importance``, taken the same way. ``GenerationRequest``: a greedy
continuation.
The rest of the model's own limits (its positions) are checked once it is loaded
(``CorpusRequest.length_for``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from headlab.limits import check_finite, check_int, check_seed
from headlab.results.ablation_result import Group, Head
from headlab.results.prune_result import BY

MAX_TEXTS = 10**6  # texts of one analysis: more is a typo, not an experiment
DEFAULT_LENGTH = 128  # tokens kept per text unless the model has fewer positions
MAX_NEW_TOKENS = 4096  # tokens one greedy continuation may add
ABLATION_MODES = ("zero", "mean", "resample")  # headlab.attention.interventions.AblationMode
PRUNE_FRACTIONS = tuple(i / 10 for i in range(11))  # shares of all heads, 10% steps


@dataclass(frozen=True)
class CorpusRequest:
    """The first ``n_texts`` texts of ``corpus`` (a UTF-8 file, one text per line) or of the
    built-in corpus (None), each cut to ``max_length`` tokens (None: ``default_length``, or the
    model's positions when it has fewer). ValueError naming the field, before anything loads."""

    n_texts: int = 300
    max_length: int | None = None
    corpus: Path | None = None
    default_length: int = DEFAULT_LENGTH

    def __post_init__(self) -> None:
        check_int("n_texts", self.n_texts, high=MAX_TEXTS)
        if self.max_length is not None:
            check_int("max_length", self.max_length, low=2)

    def texts(self) -> list[str]:
        """The texts, read now (the file's problems and a built-in corpus too small for
        ``n_texts`` are ValueErrors naming them)."""
        from headlab.models import default_corpus, read_corpus

        if self.corpus is not None:
            return read_corpus(self.corpus, self.n_texts)
        return default_corpus(self.n_texts)

    def length_for(self, max_positions: int) -> int:
        """Tokens kept per text on a model of ``max_positions`` positions; ValueError naming
        ``max_length`` when it asks for more."""
        length = self.max_length
        if length is None:
            length = min(self.default_length, max_positions)
        return check_int("max_length", length, low=2, high=max_positions)


Texts = CorpusRequest | Sequence[str]  # a corpus to read, or the texts themselves


def corpus_texts(texts: Texts, max_length: int | None, max_positions: int) -> tuple[list[str], int]:
    """What an analysis over many texts runs on: (texts, tokens per text). A ``CorpusRequest``
    is read and its length fitted to the model (``length_for``); texts are taken as they are,
    with ``max_length`` (None: DEFAULT_LENGTH, as before requests). ValueError for a request
    beside a ``max_length`` of its own."""
    if not isinstance(texts, CorpusRequest):
        return list(texts), DEFAULT_LENGTH if max_length is None else max_length
    if max_length is not None:
        raise ValueError("max_length is the request's own: pass it in the CorpusRequest")
    return texts.texts(), texts.length_for(max_positions)


@dataclass(frozen=True)
class GenerationRequest:
    """A greedy continuation of ``prompt`` by ``max_new_tokens`` tokens, in the model's chat
    template when ``chat``. ValueError naming the field, before any model loads."""

    prompt: str
    max_new_tokens: int = 32
    chat: bool = False

    def __post_init__(self) -> None:
        check_int("max_new_tokens", self.max_new_tokens, high=MAX_NEW_TOKENS)
        if not self.prompt and not self.chat:
            raise ValueError("PROMPT must be a text to continue, got an empty text")


def check_mode(mode: object) -> str:
    """An ablation mode, one of ABLATION_MODES (ValueError naming ``mode``)."""
    if mode not in ABLATION_MODES:
        raise ValueError(f"mode must be zero, mean or resample, got {mode!r}")
    return mode  # type: ignore[return-value]


def check_temperature(temperature: object) -> float:
    """The InfoNCE temperature: a finite number > 0 (ValueError naming ``temperature``)."""
    return check_finite("temperature", temperature, positive=True)  # type: ignore[arg-type]


def _corpus(request: object) -> None:
    """A request's ``corpus``: a ``CorpusRequest`` as it is, texts as a tuple of strings."""
    corpus = request.corpus  # type: ignore[attr-defined]
    if isinstance(corpus, CorpusRequest):
        return
    if isinstance(corpus, str) or not all(isinstance(t, str) for t in corpus):
        raise ValueError(f"corpus must be a CorpusRequest or a list of texts, got {corpus!r:.60}")
    object.__setattr__(request, "corpus", tuple(corpus))


def _pairs(name: str, pairs: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """(layer, index) pairs of integers >= 0, as a tuple (ValueError naming ``name``)."""
    chosen = []
    for pair in pairs:
        if isinstance(pair, str) or len(pair) != 2:
            raise ValueError(f"{name} must be (layer, index) pairs, got {pair!r}")
        chosen.append(tuple(check_int(name, x, low=0) for x in pair))
    return tuple(chosen)  # type: ignore[return-value]


@dataclass(frozen=True)
class ImportanceRequest:
    """Michel et al.'s head importance (``head_importance``) over ``corpus``, in batches of
    ``batch_size`` texts (at least 2), with the encoders' InfoNCE ``temperature`` (None:
    ``models.objectives.TEMPERATURE``). ValueError naming the field, before anything loads."""

    corpus: Texts = CorpusRequest()
    temperature: float | None = None
    batch_size: int = 32

    def __post_init__(self) -> None:
        _corpus(self)
        if self.temperature is not None:
            check_temperature(self.temperature)
        check_int("batch_size", self.batch_size, low=2)


@dataclass(frozen=True)
class AblationRequest:
    """The objective over ``corpus`` with and without ``heads`` (layer, head) and every query
    head of ``kv_groups`` (layer, group) ablated in ``mode`` (ABLATION_MODES), in batches of
    ``batch_size`` texts (at least 2). ValueError naming the field, before anything loads;
    whether the model has those heads is checked once it has loaded (``ablation_effect``)."""

    heads: tuple[Head, ...] = ()
    kv_groups: tuple[Group, ...] = ()
    mode: str = "zero"
    corpus: Texts = CorpusRequest()
    batch_size: int = 32

    def __post_init__(self) -> None:
        _corpus(self)
        object.__setattr__(self, "heads", _pairs("heads", self.heads))
        object.__setattr__(self, "kv_groups", _pairs("heads", self.kv_groups))
        if not self.heads and not self.kv_groups:
            raise ValueError("name at least one head to ablate (LAYER.HEAD)")
        check_mode(self.mode)
        check_int("batch_size", self.batch_size, low=2)


@dataclass(frozen=True)
class CollapseRequest:
    """The model over ``corpus`` with every layer viewed as each of ``head_counts`` heads (None:
    every count that divides), then one layer at a time as ``per_layer_heads``, in batches of
    ``batch_size`` texts. ValueError naming the field, before anything loads; whether a count
    divides the model's heads is checked once it has loaded (``collapse_heads``)."""

    corpus: Texts = CorpusRequest()
    head_counts: tuple[int, ...] | None = None
    per_layer_heads: int = 1
    batch_size: int = 32

    def __post_init__(self) -> None:
        _corpus(self)
        if self.head_counts is not None:
            if not self.head_counts:
                raise ValueError("head_counts must list at least one head count, got none")
            counts = tuple(check_int("head_counts", h) for h in self.head_counts)
            object.__setattr__(self, "head_counts", counts)
        check_int("per_layer_heads", self.per_layer_heads)
        check_int("batch_size", self.batch_size)


@dataclass(frozen=True)
class PruneRequest:
    """Michel et al.'s pruning curve (``prune_by_importance``) over ``corpus``: the shares
    ``fractions`` of all heads (each in [0, 1]) removed from the weights (``by`` "removal") or
    masked ("mask"), least important first and in an order drawn with ``seed``. ValueError
    naming the field, before anything loads; whether the model can lose heads is checked once it
    has loaded (``heads.pruning.check_prunable``)."""

    corpus: Texts = CorpusRequest()
    seed: int = 0
    by: str = "removal"
    fractions: tuple[float, ...] = PRUNE_FRACTIONS

    def __post_init__(self) -> None:
        _corpus(self)
        check_by(self.by)
        check_seed("seed", self.seed)
        fractions = tuple(self.fractions)
        if not fractions or not all(isinstance(f, int | float) and 0 <= f <= 1 for f in fractions):
            raise ValueError(f"fractions must be shares in [0, 1], got {fractions!r:.60}")
        object.__setattr__(self, "fractions", fractions)


def check_by(by: str) -> None:
    """ValueError unless ``by`` is one of BY (how heads are pruned)."""
    if by not in BY:
        raise ValueError(f"by must be removal or mask, got {by!r}")


Request = TypeVar("Request", ImportanceRequest, AblationRequest, CollapseRequest, PruneRequest)


def analysis_request(kind: type[Request], given: Request | Texts, **options: object) -> Request:
    """What an analysis runs: ``given`` when it is a ``kind`` already (ValueError for an option
    passed beside it: its options are the request's own), else a ``kind`` with ``given`` (a
    ``CorpusRequest`` or the texts) as its corpus and the options passed (None: the default),
    checked now."""
    chosen = {name: value for name, value in options.items() if value is not None}
    if isinstance(given, kind):
        if chosen:
            names = ", ".join(chosen)
            raise ValueError(f"{names} is the request's own: pass it in the {kind.__name__}")
        return given
    return kind(corpus=given, **chosen)
