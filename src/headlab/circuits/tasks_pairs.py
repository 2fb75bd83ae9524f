"""The user's own pairs for circuits: a JSONL file, one pair a line.

    {"clean": "The capital of France is", "corrupted": "The capital of Spain is",
     "answer": " Paris", "wrong": " Madrid"}

``answer`` (and the optional ``wrong``) is one token: its text (the tokenizer must write it as
exactly one token) or its id. The metric reads the clean text's last position: the logit
difference answer - wrong when every row has ``wrong``, the answer's log-probability when none
has. Lines end at ``\n`` only (a raw U+2028 or U+0085 inside a string, as
``json.dumps(..., ensure_ascii=False)`` writes it, is text); blank lines are skipped. Checked in
two steps, each error one line naming the line and the rule: ``read_pairs`` (no tokenizer: JSON,
fields, types, Unicode text without lone surrogates, at most ``MAX_TEXT_CHARS`` characters a
text; before any model loads) and ``encode_pairs`` (the tokenizer: every text at least one token
and within the model's positions, answers inside the vocabulary and one token each, equal lengths
where the method needs them).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from headlab.circuits.clean_corrupted import TaskPairs, check_positions, last_position_answers
from headlab.results.input_files import check_depth, check_regular, loads, read_bytes

FIELDS = ("clean", "corrupted", "answer", "wrong")
#: the largest pairs file read (a pair is a few hundred bytes; this is far more than a run takes)
MAX_BYTES = 64 * 2**20
MAX_PAIRS = 4096
#: the longest text of a pair: beyond any model's context (128k positions at four characters a
#: token is half of it), small enough for a tokenizer to hold (it takes about 70 bytes a character)
MAX_TEXT_CHARS = 2**20


@dataclass(frozen=True)
class PairRow:
    """One line of the file: ``line`` (1-based), the texts, the answer and wrong tokens (text
    or id; wrong None when absent)."""

    line: int
    clean: str
    corrupted: str
    answer: str | int
    wrong: str | int | None


def read_pairs(path: str | Path) -> list[PairRow]:
    """The rows of the JSONL file at ``path``; ValueError naming the file and line for anything
    but a JSON object with string ``clean`` and ``corrupted`` and a token (string or
    non-negative integer) ``answer`` and optional ``wrong``, for an unknown field, for rows that
    mix having ``wrong`` with not, and for a file without pairs."""
    path = Path(path)
    if not os.path.lexists(path) or path.is_dir():
        raise ValueError(f"pairs file must be a file, got {str(path)!r}")
    size = check_regular(path, "pairs file").st_size  # a FIFO or a device: named, not opened
    if size > MAX_BYTES:
        raise ValueError(f"{path}: expected at most {MAX_BYTES} bytes of pairs, got {size}")
    rows = []
    try:
        lines = read_bytes(path, "pairs file", MAX_BYTES).decode("utf-8").split("\n")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: expected UTF-8 text, got {error.reason}") from None
    for number, text in enumerate(lines, 1):
        if not text.strip(" \t\r"):  # JSON's whitespace: a line of it is blank
            continue
        rows.append(_row(text, number, path))
        if len(rows) > MAX_PAIRS:
            raise ValueError(f"{path}: expected at most {MAX_PAIRS} pairs, got more")
    if not rows:
        raise ValueError(f"{path}: expected at least one pair (a JSON object a line), got none")
    having = [row.wrong is not None for row in rows]
    if any(having) and not all(having):
        odd = next(row for row, has in zip(rows, having, strict=True) if has != having[0])
        first = f"line {rows[0].line} {'has' if having[0] else 'has none'}"
        raise ValueError(
            f"{path} line {odd.line}: 'wrong' must be given on every line or on none ({first})"
        )
    return rows


def _row(text: str, number: int, path: Path) -> PairRow:
    where = f"{path} line {number}"
    try:
        check_depth(text.encode("utf-8", "surrogatepass"), where)  # never a RecursionError
        data = loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{where}: expected a JSON object, got invalid JSON ({error.msg} at "
            f"column {error.colno})"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ValueError(
            f"{where}: expected only the fields {', '.join(FIELDS)}, got "
            f"{', '.join(map(repr, unknown))}"
        )
    for name in ("clean", "corrupted"):
        value = data.get(name)
        if not isinstance(value, str) or not value:
            raise ValueError(f"{where}: expected {name!r} a non-empty string, got {_shown(value)}")
        if len(value) > MAX_TEXT_CHARS:
            raise ValueError(
                f"{where}: expected {name!r} of at most {MAX_TEXT_CHARS:,} "
                f"characters, got {len(value):,}"
            )
    tokens = {}
    for name in ("answer", "wrong"):
        value = data.get(name)
        if value is None and name == "wrong":
            tokens[name] = None
            continue
        token_id = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        if not (token_id or (isinstance(value, str) and value)):
            raise ValueError(
                f"{where}: expected {name!r} a token (its text or a non-negative "
                f"id), got {_shown(value)}"
            )
        tokens[name] = value
    for name in FIELDS:
        _check_unicode(data.get(name), name, where)
    return PairRow(number, data["clean"], data["corrupted"], tokens["answer"], tokens["wrong"])


def _check_unicode(value: object, name: str, where: str) -> None:
    """ValueError for a string holding a lone surrogate (JSON's ``\\ud800`` escape reads as
    one): no Unicode text, which no tokenizer takes."""
    if not isinstance(value, str):
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(value[error.start])
        raise ValueError(
            f"{where}: expected {name!r} Unicode text, got a lone surrogate "
            f"(\\u{code:04x} at character {error.start + 1})"
        ) from None


def _shown(value: object) -> str:
    if value is None:
        return "nothing"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def encode_pairs(
    rows: list[PairRow],
    tokenizer,
    equal_lengths: bool = True,
    where: str | Path = "pairs",
    positions: int | None = None,
) -> TaskPairs:
    """``rows`` in ``tokenizer``'s tokens (its own special tokens added, as the model reads a
    text): ValueError naming the line for a text of no token or of more than ``positions``
    tokens (the model's; None: unchecked), an answer outside the vocabulary or not one token,
    and, with ``equal_lengths``, for clean and corrupted texts of different token counts.
    Rows of different lengths are padded on the right (a causal model's padding after the last
    real token changes nothing before it)."""
    vocab = len(tokenizer)
    encoded = []
    for row in rows:
        at = f"{where} line {row.line}"
        clean = list(tokenizer(row.clean)["input_ids"])
        corrupted = list(tokenizer(row.corrupted)["input_ids"])
        for name, text, ids in (
            ("clean", row.clean, clean),
            ("corrupted", row.corrupted, corrupted),
        ):
            if not ids:
                raise ValueError(
                    f"{at}: expected {name!r} of at least one token, got none (the "
                    f"tokenizer writes {_shown_text(text)} as no token)"
                )
            check_positions(len(ids), positions, f"{at}: {name!r}")
        if equal_lengths and len(clean) != len(corrupted):
            raise ValueError(
                f"{at}: clean and corrupted must have the same number of tokens "
                f"for this method, got {len(clean)} and {len(corrupted)}"
            )
        answer = _token(row.answer, "answer", tokenizer, vocab, at)
        wrong = None if row.wrong is None else _token(row.wrong, "wrong", tokenizer, vocab, at)
        encoded.append((clean, corrupted, answer, wrong))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    width = max(max(len(c), len(k)) for c, k, _, _ in encoded)
    clean_ids = torch.full((len(encoded), width), int(pad), dtype=torch.long)
    corrupted_ids = clean_ids.clone()
    for i, (c, k, _, _) in enumerate(encoded):
        clean_ids[i, : len(c)], corrupted_ids[i, : len(k)] = torch.tensor(c), torch.tensor(k)
    last = torch.tensor([len(c) - 1 for c, *_ in encoded])
    answer = torch.tensor([a for _, _, a, _ in encoded])
    wrong = None if encoded[0][3] is None else torch.tensor([w for *_, w in encoded])
    mask, answers, wrong_full = last_position_answers(clean_ids, last, answer, wrong)
    metric = "logprob" if wrong is None else "logit_diff"
    return TaskPairs(
        "pairs", metric, clean_ids, corrupted_ids, mask, answers, wrong_full, pad_id=int(pad)
    )


def _shown_text(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37]) + "..."


def _token(value: str | int, name: str, tokenizer, vocab: int, at: str) -> int:
    """The id of one answer token given by id or text; ValueError naming the line."""
    if isinstance(value, int):
        if value >= vocab:
            raise ValueError(
                f"{at}: {name} token id must lie in the vocabulary 0..{vocab - 1}, got {value}"
            )
        return value
    ids = list(tokenizer(value, add_special_tokens=False)["input_ids"])
    if ids and ids == [tokenizer.unk_token_id]:
        raise ValueError(
            f"{at}: {name} {value!r} is not in the vocabulary (the tokenizer writes "
            "it as its unknown token)"
        )
    if len(ids) != 1:
        pieces = tokenizer.convert_ids_to_tokens(ids)
        raise ValueError(
            f"{at}: {name} {value!r} must be one token, got {len(ids)} "
            f"({', '.join(map(repr, pieces))}); give one token or its id"
        )
    return int(ids[0])
