"""One head's pair matrix over all its queries as one call (circuits.score_pairs_run), in float64:

- its results document equals the pair split's matrices summed over the queries
  (``pair_split_sum``, the streamed matrix's own reference): both marginals, the framed matrix,
  the strongest cells, the attended keys; and it survives a write and a read;
- the text it names: the text given, the start of a file cut to the length, the built-in copy
  task at the length;
- the config alone says what the run refuses: for each family, ``attention_extras`` names
  something exactly when the streamed run raises (Mistral's window lives only in its config);
- the request's and the config's checks, each one line naming the field.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from hf_families import VOCAB, build, config
from task_tokenizers import tiny_llama, word_tokenizer
from test_score_split import pair_split_sum

from headlab.circuits.score_pairs_run import PairsRequest, pairs_result
from headlab.circuits.score_pairs_streamed import pairs_over_queries
from headlab.models.hf import attach
from headlab.models.hf.plain_attention import attention_extras
from headlab.results.pairs_over_queries_result import PairsOverQueriesResult

TEXT = "Mary went to the park . John went to the store . Mary went to the park and John"


@pytest.fixture(scope="module")
def tiny():
    """The tiny random Llama (3 query heads on 1 K/V head, 2 layers) in float64."""
    model = tiny_llama(word_tokenizer(), seed=7)
    model.model.double()
    return model


def test_the_document_equals_the_pair_split_summed(tiny, tmp_path):
    from results.test_results_roundtrip import round_trip

    result = pairs_result(tiny, PairsRequest(1, 2, text=TEXT))
    ids = torch.tensor([tiny.encode(TEXT)])
    want, split = pair_split_sum(tiny, ids, 1, 2)
    assert result.components == split.components
    assert result.keys == [p.key for p in split.pairs]
    assert result.kv_group == split.kv_group == 0
    size = float(want.abs().max())
    for got, reference in (
        (result.query_marginal, want.sum(1)),
        (result.key_marginal, want.sum(0)),
        (result.raw, [p.raw for p in split.pairs]),
    ):
        gap = torch.tensor(got, dtype=torch.float64) - torch.as_tensor(
            reference, dtype=torch.float64
        )
        assert float(gap.abs().max()) <= 1e-10 * size
    assert abs(sum(map(sum, result.pair)) - float(want.sum())) <= 1e-10 * size
    assert abs(result.total - float(want.sum())) <= 1e-10 * size
    names = split.components
    for query_side, key_side, value in result.strongest:
        assert abs(value - float(want[names.index(query_side), names.index(key_side)])) <= 1e-12
    assert abs(result.strongest[0][2]) == pytest.approx(float(want.abs().max()), abs=1e-12)
    assert result.tokens == [tiny.decode([t]) for t in ids[0].tolist()]
    assert round_trip(result, tmp_path / "all.json") == result


def test_the_text_a_request_names(tiny, tmp_path):
    long = tmp_path / "long.txt"
    long.write_text(" ".join([TEXT] * 40))
    cut = pairs_result(tiny, PairsRequest(0, 1, text_file=long, length=23))
    assert len(cut.keys) == len(cut.tokens) == 23
    assert cut.tokens == [tiny.decode([t]) for t in tiny.encode(" ".join([TEXT] * 2))][:23]
    assert "long.txt" in cut.text and "cut to 23 tokens" in cut.text
    copy = pairs_result(tiny, PairsRequest(0, 1, length=97))
    assert 48 < len(copy.keys) <= 97
    assert copy.text.startswith("the built-in copy task")


@pytest.mark.parametrize(
    "family", ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gpt2", "gpt_oss"]
)
def test_the_config_names_what_the_run_refuses(family):
    model = build(family).double()
    if family == "gpt_oss":  # grouped_mm takes no float64
        model.set_experts_implementation("eager")
    model = attach(model)
    ids = torch.randint(3, VOCAB, (1, 11), generator=torch.Generator().manual_seed(1))
    said = attention_extras(config(family))
    try:
        with torch.no_grad():
            pairs_over_queries(model, ids, len(model.layers) - 1, 0)
        refused = None
    except ValueError as error:
        refused = str(error)
    assert (said is None) == (refused is None), (said, refused)


def test_mistral_is_refused_not_read_without_its_window():
    """Mistral's attention module keeps no window: without its config, the run computed full
    causal attention over a text longer than the window and summed the wrong keys."""
    model = attach(build("mistral").double())
    ids = torch.randint(3, VOCAB, (1, 11), generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="has sliding_window"):
        pairs_over_queries(model, ids, 1, 0)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"layer": -1, "head": 0, "text": "a b"}, "layer must be >= 0, got -1"),
        ({"layer": 0, "head": 0, "length": 1}, "length must be >= 2 tokens, got 1"),
        ({"layer": 0, "head": 0, "text": "a", "text_file": Path("f")}, "not both"),
        ({"layer": 0, "head": 0}, "give text, text_file or length"),
    ],
)
def test_a_request_checks_itself(fields, says):
    with pytest.raises(ValueError, match=says):
        PairsRequest(**fields)


@pytest.mark.parametrize(
    ("family", "fields", "causal", "says"),
    [
        ("llama", {"layer": 2, "head": 0}, True, r"layer must lie in 0\.\.1 \(m\), got 2"),
        ("llama", {"layer": 1, "head": 6}, True, r"head must lie in 0\.\.5 \(m\), got 6"),
        ("llama", {"layer": 0, "head": 0, "length": 65}, True, "at most 64"),
        ("llama", {"layer": 0, "head": 0}, False, "reads a causal model; m is not causal"),
        ("qwen3", {"layer": 0, "head": 0}, True, "QK-norm"),
        ("gemma2", {"layer": 0, "head": 0}, True, "a soft-cap"),
        ("mistral", {"layer": 0, "head": 0}, True, "sliding-window"),
    ],
)
def test_the_config_is_checked_before_the_load(family, fields, causal, says):
    request = PairsRequest(**{"length": 8, **fields})
    with pytest.raises(ValueError, match=says):
        request.check_config("m", causal, config(family), 64)


def test_a_hand_edited_document_is_refused_naming_its_field(tiny):
    document = pairs_result(tiny, PairsRequest(1, 0, text="a b c d e")).to_dict()
    for change, says in (
        (lambda d: d["keys"].__setitem__(2, 3), r"keys\[2\]: expected a key position in 0..2"),
        (lambda d: d["key_marginal"].pop(), "key_marginal: expected"),
        (lambda d: d["raw"].pop(), "raw: expected 6 values"),
        (lambda d: d["strongest"].append(["x", "embed", 1.0]), r"strongest\[12\]"),
    ):
        edited = {**document, **{k: list(v) for k, v in document.items() if isinstance(v, list)}}
        change(edited)
        with pytest.raises(ValueError, match=says):
            PairsOverQueriesResult.from_dict(edited)
