"""Typed requests of the analyses over a trained model that check themselves before any model
loads: each bound is written here once, and the CLI maps a field's name to its option
(``headlab.cli.parsing.flags``).

``CorpusRequest``: the many short texts of ``model heads``, ``collapse``, ``importance``,
``prune``, ``ablate`` and ``redundancy``; ``head_statistics``, ``collapse_heads``,
``head_importance`` and ``ablation_effect`` take one in place of their list of texts
(``corpus_texts``). ``GenerationRequest``: a greedy continuation.
The rest of the model's own limits (its positions) are checked once it is loaded
(``CorpusRequest.length_for``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headlab.limits import check_int

MAX_TEXTS = 10**6  # texts of one analysis: more is a typo, not an experiment
DEFAULT_LENGTH = 128  # tokens kept per text unless the model has fewer positions
MAX_NEW_TOKENS = 4096  # tokens one greedy continuation may add


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


def corpus_texts(
    texts: list[str] | CorpusRequest, max_length: int | None, max_positions: int
) -> tuple[list[str], int]:
    """What an analysis over many texts runs on: (texts, tokens per text). A ``CorpusRequest``
    is read and its length fitted to the model (``length_for``); a list is taken as it is, with
    ``max_length`` (None: DEFAULT_LENGTH, as before requests). ValueError for a request beside a
    ``max_length`` of its own."""
    if not isinstance(texts, CorpusRequest):
        return texts, DEFAULT_LENGTH if max_length is None else max_length
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
