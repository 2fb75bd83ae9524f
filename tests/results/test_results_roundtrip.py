"""Every results file, from its real writer to its reader: write, read back with from_dict, compare.

Results come from the library on the tiny random BERT (E=15, H=3, 2 layers) and from small
configurations of the toy experiments, so that each file is what headlab really writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headlab.results.json_store import read_result, write_result

TEXTS = [
    "The first line of the corpus has a few words.",
    "A second line, with punctuation!",
    "and a third line to make batches",
    "four words in this line",
]


def round_trip(result, path: Path):
    """Write ``result`` with the writer the CLI uses, read it back through its type."""
    written = write_result(path, result)
    assert json.loads(path.read_text()) == written and written["headlab"] == type(result).KIND
    back = read_result(path, type(result))
    assert isinstance(back, type(result))
    # JSON has no tuples: compare the documents, and the objects where they are plain
    assert back.to_dict() == json.loads(json.dumps(result.to_dict()))
    return back


def test_model_heads(tiny, tmp_path):
    from headlab.heads import head_statistics

    result = head_statistics(tiny, TEXTS, max_length=16)
    assert round_trip(result, tmp_path / "model_heads.json") == result


def test_model_long_context(tiny, tmp_path):
    from headlab.heads.long_context import long_text_statistics

    result = long_text_statistics(tiny, " ".join(TEXTS), max_tokens=30).result()
    assert round_trip(result, tmp_path / "model_long-context.json") == result


def test_model_collapse(tiny, tmp_path):
    from headlab.heads import collapse_heads

    result = collapse_heads(tiny, TEXTS, max_length=16)
    assert round_trip(result, tmp_path / "model_collapse.json") == result


def test_model_importance(tiny, tmp_path):
    from headlab.heads import head_importance

    result = head_importance(tiny, TEXTS, max_length=16)
    assert round_trip(result, tmp_path / "model_importance.json") == result


def test_model_prune(tiny, tmp_path):
    from headlab.heads import prune_by_importance

    result = prune_by_importance(tiny, TEXTS, fractions=(0.0, 0.5), max_length=16)
    assert round_trip(result, tmp_path / "model_prune.json") == result


def test_model_ablate(tiny, tmp_path):
    from headlab.heads.ablation import ablation_effect

    result = ablation_effect(tiny, TEXTS, [(1, 2)], mode="mean", max_length=16)
    assert round_trip(result, tmp_path / "model_ablate.json") == result


def test_redundancy(tiny, tmp_path):
    from headlab.heads.redundancy import measure_redundancy
    from headlab.results.redundancy_result import CurvePoint, LayerSpectrum

    result = measure_redundancy(tiny, TEXTS, ranks=(8, 2), max_length=16)
    back = round_trip(result, tmp_path / "redundancy.json")
    assert back == result and back.layers == result.layers and back.curve == result.curve
    assert all(isinstance(layer, LayerSpectrum) for layer in back.layers)
    assert all(isinstance(point, CurvePoint) for point in back.curve)


def test_expressivity(tmp_path):
    from headlab.analysis.expressivity import ExpressivityRequest, measure_expressivity
    from headlab.results.expressivity_result import PatternRow, RankRow

    config = ExpressivityRequest(
        seq_lens=(4,), head_dims=(1, 4), targets=1, steps=5, offset_seq_len=5, offset_steps=5
    )
    result = measure_expressivity(config)
    back = round_trip(result, tmp_path / "expressivity.json")
    assert back.rank == result.rank and back.patterns == result.patterns
    assert all(isinstance(r, RankRow) for r in back.rank)
    assert all(isinstance(p, PatternRow) for p in back.patterns)


def test_specialisation(tmp_path):
    from headlab.experiments.specialisation import SpecialisationRequest, measure_specialisation
    from headlab.results.specialisation_result import Checkpoint, SpecialisationRun

    config = SpecialisationRequest(
        heads=(1, 2), attention=("plain",), d_model=8, steps=4, eval_every=2, eval_size=8
    )
    result = measure_specialisation(config)
    back = round_trip(result, tmp_path / "specialisation.json")
    assert back.runs == result.runs
    assert all(isinstance(run, SpecialisationRun) for run in back.runs)
    assert all(isinstance(c, Checkpoint) for run in back.runs for c in run.checkpoints)


def test_sweep_rows(tmp_path):
    from headlab.experiments.run_sizing import make_config
    from headlab.experiments.train import run_one
    from headlab.results.jsonl_store import SweepRow, read_finals
    from headlab.results.jsonl_writer import ResultsWriter

    run = run_one(make_config("multi-lookup", 2, d_model=8, steps=4, eval_every=2))
    path = tmp_path / "sweep.jsonl"
    with ResultsWriter(path) as writer:
        writer.append(run.rows())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [SweepRow.from_dict(line).to_dict() for line in lines] == run.rows()
    (final,) = read_finals(path)
    assert final.final and final.config == run.config and final.run_id == run.config.run_id
    assert final.accuracy == run.final.accuracy and final.head_entropy == run.head_entropy


BROKEN = [  # (change to a model-heads document, the message it must give)
    (lambda d: d.pop("n_texts"), r"heads\.n_texts: expected an integer >= 0, got nothing"),
    (lambda d: d.update(num_heads="3"), r"heads\.num_heads: expected an integer >= 1, got \"3\""),
    (
        lambda d: d["metrics"].update(entropy=[[0.5]]),
        r"metrics\.entropy: expected 2 x 3 \(layer x head\) numbers, got 1 rows",
    ),
    (
        lambda d: d["metrics"]["entropy"][1].__setitem__(0, "x"),
        r"metrics\.entropy\[1\]\[0\]: expected a finite number, got \"x\"",
    ),
    (lambda d: d.update(headlab="model-prune"), r"headlab: expected 'model-heads', got \"model-"),
]


@pytest.mark.parametrize(("change", "message"), BROKEN)
def test_a_broken_file_names_the_file_the_field_the_expected_and_the_received(
    tiny, tmp_path, change, message
):
    from headlab.heads import head_statistics
    from headlab.results.head_statistics import HeadStatistics

    path = tmp_path / "model_heads.json"
    document = write_result(path, head_statistics(tiny, TEXTS[:2], max_length=8))
    change(document)
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match=message) as error:
        read_result(path, HeadStatistics)
    assert str(path) in str(error.value)


def test_a_bad_sweep_row_names_its_field():
    from headlab.results.jsonl_store import SweepRow

    row = {"run_id": "a", "step": 1, "loss": 0.1, "accuracy": 2, "final": True, "params": 3}
    with pytest.raises(ValueError, match=r"sweep row: 'accuracy' must be a number in \[0, 1\]"):
        SweepRow.from_dict(row)


MEASURE_ERRORS = [  # (change to a row of quality measures, the message it must give)
    (
        lambda row: row.update(nn_agrement=row.pop("nn_agreement")),  # misspelt
        r"\.nn_agrement: expected no such field \(the measures are mean_cosine, nn_agreement\), "
        r"got \d",
    ),
    (lambda row: row.update(bleu=0.5), r"\.bleu: expected no such field \(the measures are mean"),
    (lambda row: row.update(perplexity=3.0), r"\.perplexity: expected no such field"),
    (lambda row: row.pop("mean_cosine"), r"\.mean_cosine: expected a finite number, got nothing"),
]


@pytest.mark.parametrize(("change", "message"), MEASURE_ERRORS)
def test_collapse_prune_and_redundancy_rows_take_only_the_measures_quality_gives(
    tiny, tmp_path, change, message
):
    from headlab.heads import collapse_heads, prune_by_importance
    from headlab.heads.redundancy import measure_redundancy

    results = {
        "all_layers": collapse_heads(tiny, TEXTS[:2], max_length=8, head_counts=(1,)),
        "steps": prune_by_importance(tiny, TEXTS[:2], fractions=(0.0,), max_length=8),
        "curve": measure_redundancy(tiny, TEXTS[:2], ranks=(2,), max_length=8),
    }
    for rows, result in results.items():
        path = tmp_path / f"{rows}.json"
        document = write_result(path, result)
        change(document[rows][0])
        path.write_text(json.dumps(document))
        with pytest.raises(ValueError, match=f"{rows}\\[0\\]{message}") as error:
            read_result(path, type(result))
        assert str(path) in str(error.value)


def test_a_redundancy_curve_row_with_an_unknown_measure_is_refused(tiny, tmp_path):
    from headlab.heads.redundancy import measure_redundancy
    from headlab.results.redundancy_result import RedundancyResult

    path = tmp_path / "redundancy.json"
    document = write_result(path, measure_redundancy(tiny, TEXTS[:2], ranks=(2,), max_length=8))
    document["curve"][1]["accuracy"] = 0.5  # numeric, but no measure of headlab.heads.quality
    path.write_text(json.dumps(document))
    message = (
        r"redundancy\.curve\[1\]\.accuracy: expected no such field "
        r"\(the measures are mean_cosine, nn_agreement\), got 0\.5"
    )
    with pytest.raises(ValueError, match=message) as error:
        read_result(path, RedundancyResult)
    assert str(path) in str(error.value)


LONG_CONTEXT_ERRORS = [  # (change to a model-long-context document, the message it must give)
    (lambda d: d["context"].pop("n_tokens"), r"context\.n_tokens: expected an integer >= 2, got"),
    (
        lambda d: d["heavy_hitters"]["top_keys"][1][2].__setitem__(0, 30),
        r"heavy_hitters\.top_keys\[1\]\[2\]\[0\]: expected a key position in \[0, 30\), got 30",
    ),
    (
        lambda d: d["heavy_hitters"]["top_keys"].pop(),
        r"heavy_hitters\.top_keys: expected 2 rows \(layer\), got \"1 rows\"",
    ),
    (
        lambda d: d["heavy_hitters"].update(excluded_positions=[-1]),
        r"excluded_positions\[0\]: expected a key position in \[0, 30\), got -1",
    ),
    (
        lambda d: d["findings"]["most_concentrated"].__setitem__(0, [0, 3, 0.5]),
        r"findings\.most_concentrated\[0\]: expected \[layer < 2, head < 3, share\], got \[0, 3",
    ),
    (
        lambda d: d["findings"]["mean_distance_per_layer"].append(1.0),
        r"mean_distance_per_layer: expected 2 numbers \(layer\), got \"3 numbers\"",
    ),
    (lambda d: d["findings"].update(sink_share=1.5), r"findings\.sink_share: expected a finite"),
]


@pytest.mark.parametrize(("change", "message"), LONG_CONTEXT_ERRORS)
def test_a_broken_long_context_file_names_its_field(tiny, tmp_path, change, message):
    from headlab.heads.long_context import long_text_statistics
    from headlab.results.long_context_result import LongContextResult

    path = tmp_path / "model_long-context.json"
    result = long_text_statistics(tiny, " ".join(TEXTS), max_tokens=30).result()
    document = write_result(path, result)
    change(document)
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match=message) as error:
        read_result(path, LongContextResult)
    assert str(path) in str(error.value)


def test_a_broken_specialisation_checkpoint_names_its_field(tmp_path):
    from headlab.experiments.specialisation import SpecialisationRequest, measure_specialisation
    from headlab.results.specialisation_result import SpecialisationResult

    config = SpecialisationRequest(
        heads=(2,), attention=("plain",), d_model=8, steps=2, eval_every=2, eval_size=8
    )
    path = tmp_path / "specialisation.json"
    document = write_result(path, measure_specialisation(config))
    document["runs"][0]["checkpoints"][0]["served_by"][1] = 2  # a third head of two
    path.write_text(json.dumps(document))
    message = (
        r"specialisation\.runs\[0\]\.checkpoints\[0\]\.served_by: "
        r"expected 4 heads \(each < 2\) or null, one per lookup, got \["
    )
    with pytest.raises(ValueError, match=message) as error:
        read_result(path, SpecialisationResult)
    assert str(path) in str(error.value)
