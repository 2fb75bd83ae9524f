"""One head's pair matrix over every query of a text, as one library call (``headlab
why-attends --all-queries``): the request, checked before the model loads, the text it names,
the streamed matrix (score_pairs_streamed.py) and its results document.

``PairsRequest`` says what runs and checks itself (layer and head not negative, a length of at
least 2, one text source). ``check_config`` checks it against the model's config before the
weights load: a causal model, a length within its positions, the layer and head within its
sizes, and a family the streamed matrix reads (no QK-norm, soft-cap, sliding window or sinks:
the kept keys must be the whole story of a plain causal softmax). ``pairs_result`` then builds
the text (the text given, the start of a file, or the built-in copy task at the length asked),
runs the matrix and returns ``PairsOverQueriesResult``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from headlab.circuits.score_pairs_streamed import PairsOverQueries, pairs_over_queries
from headlab.circuits.score_split import framed
from headlab.models.hf.plain_attention import attention_extras, text_config
from headlab.results.input_files import TextFile, open_text
from headlab.results.pairs_over_queries_result import PairsOverQueriesResult

#: Cells of the matrix listed as the strongest pairs.
STRONGEST = 12


@dataclass(frozen=True)
class PairsRequest:
    """Head ``head`` of layer ``layer`` over every query of one text: ``text`` itself, or the
    start of ``text_file``, or (neither) the built-in copy task at ``length`` tokens; ``length``
    cuts a text to that many tokens. ValueError naming the field, before anything loads."""

    layer: int
    head: int
    text: str | None = None
    text_file: Path | None = None
    length: int | None = None

    def __post_init__(self) -> None:
        for name in ("layer", "head"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.length is not None and self.length < 2:
            raise ValueError(f"length must be >= 2 tokens, got {self.length}")
        if self.text is not None and self.text_file is not None:
            raise ValueError("give text or text_file, not both")
        if self.text is None and self.text_file is None and self.length is None:
            raise ValueError("give text, text_file or length (the built-in copy task)")

    def open(self, what: str = "text_file") -> TextFile | None:
        """The text file checked, not read (None without one); ``what`` names it."""
        return None if self.text_file is None else open_text(self.text_file, what)

    def check_config(self, name: str, causal: bool, config, max_positions: int | None) -> None:
        """ValueError (one line) where the model ``name`` (``causal``, its transformers
        ``config``, ``max_positions``) cannot give this matrix, from its config alone."""
        if not causal:
            raise ValueError(
                f"the pair matrix over all queries reads a causal model; {name} is not causal "
                "(split chosen pairs instead)"
            )
        if self.length is not None and max_positions is not None and self.length > max_positions:
            raise ValueError(
                f"length must be at most {max_positions} ({name}'s positions), got {self.length}"
            )
        text = text_config(config)
        layers = getattr(text, "num_hidden_layers", None)
        if isinstance(layers, int) and self.layer >= layers:
            raise ValueError(f"layer must lie in 0..{layers - 1} ({name}), got {self.layer}")
        heads = getattr(text, "num_attention_heads", None)
        if isinstance(heads, int) and self.head >= heads:
            raise ValueError(f"head must lie in 0..{heads - 1} ({name}), got {self.head}")
        why = attention_extras(config)
        if why is not None:
            raise ValueError(
                f"the pair matrix over all queries reads a plain causal softmax with one norm "
                f"in front; {name} has {why} (split chosen pairs instead)"
            )


def request_ids(model, request: PairsRequest, text: TextFile | None = None) -> tuple[list, str]:
    """(the text's token ids, what the text is in words). ``text``: the request's file already
    opened (``request.open()``), else it is opened now."""
    limit = request.length or model.max_positions
    if request.text is not None:
        ids = model.encode(request.text)
        said = "the text given"
    elif request.text_file is not None:
        text = request.open() if text is None else text
        read = text.read_tokens(model.count_tokens, limit)
        ids = model.encode(read.text)
        said = f"{text.path.name}" + ("" if read.complete else f" ({read.cut_note()})")
    else:
        from headlab.heads.repeats import context_copy_task

        task = context_copy_task(model, request.length, "give text_file")
        ids = model.encode(task.text)
        said = (
            f"the built-in copy task: a {task.passage_words}-word passage placed early in "
            "the standard library's docstrings and repeated at the end"
        )
    if len(ids) > limit:
        ids, said = ids[:limit], f"{said}, cut to {limit} tokens"
    if len(ids) < 2:
        raise ValueError(f"the pair matrix needs a text of at least 2 tokens, got {len(ids)}")
    return ids, said


def summarised(
    found: PairsOverQueries, model: str, kv_group: int, text: str, tokens: list[str]
) -> PairsOverQueriesResult:
    """The results document of ``found``: its marginals, its matrix framed on the strongest
    components of each side (score_split's frame, "rest" keeping the sum) and its strongest
    cells."""
    matrix = found.matrix
    rows, cols, grid = framed(matrix, found.components, matrix.sum(1), matrix.sum(0))
    flat = matrix.flatten()
    top = flat.abs().topk(min(STRONGEST, flat.numel())).indices.tolist()
    width = matrix.shape[1]
    strongest = [
        (found.components[i // width], found.components[i % width], float(flat[i])) for i in top
    ]
    return PairsOverQueriesResult(
        model=model,
        layer=found.layer,
        head=found.head,
        kv_group=kv_group,
        text=text,
        tokens=tokens,
        components=list(found.components),
        scale=found.scale,
        query_marginal=matrix.sum(1).tolist(),
        key_marginal=matrix.sum(0).tolist(),
        pair_rows=rows,
        pair_cols=cols,
        pair=grid,
        strongest=strongest,
        keys=found.key.tolist(),
        raw=found.raw.tolist(),
    )


def pairs_result(
    model,
    request: PairsRequest,
    *,
    text: TextFile | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> PairsOverQueriesResult:
    """Head ``request.head`` of layer ``request.layer`` of ``model`` (a causal model behind the
    run protocol), its pair matrix summed over every query of the request's text at the key it
    attends. ValueError (one line) for a layer or head beyond the model's, or a family the
    streamed matrix does not read."""
    sizes = model.heads_per_layer
    if request.layer >= len(sizes):
        raise ValueError(
            f"layer must lie in 0..{len(sizes) - 1} ({model.name}), got {request.layer}"
        )
    if request.head >= sizes[request.layer]:
        raise ValueError(
            f"head must lie in 0..{sizes[request.layer] - 1} (layer {request.layer}), "
            f"got {request.head}"
        )
    ids, said = request_ids(model, request, text)
    with torch.no_grad():
        found = pairs_over_queries(
            model, torch.tensor([ids]), request.layer, request.head, progress=progress
        )
    per = sizes[request.layer] // model.kv_heads_per_layer[request.layer]
    tokens = [model.decode([t]) for t in ids]
    return summarised(found, model.name, request.head // per, said, tokens)


__all__ = [
    "PairsRequest",
    "pairs_result",
    "request_ids",
    "summarised",
]
