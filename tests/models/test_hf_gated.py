"""A family that multiplies the attention's output by a gate before its output projection (LFM3:
a sigmoid per head, as Qwen3-Next's gate) has no W_O of the heads: the contribution norms are
left out with a one-line note naming the layers, never NaN or 0, and every other statistic still
equals the one computed from transformers' eager weights. The tiny LFM3 has a convolution layer
first, so its attention layers 0 and 1 are the model's layers 1 and 2."""

from __future__ import annotations

import html
import json
import re

import pytest
import torch
from hf_families import family, model_class, padded, text, write_family
from test_hf_heads import batch_of, eager_run, reference_means

from cli_run import run
from headlab.analysis.report_measuring import measure_report
from headlab.heads.model_head_sums import model_head_sums
from headlab.heads.statistics import head_statistics
from headlab.report import ReportRequest, build_report
from headlab.results.head_statistics import HeadStatistics

NOTE = (
    "contribution_norm left out (attention layers 0, 1): the family changes the attention's "
    "output (a gate) before its output projection, so no W_O maps one head's output alone"
)
#: The convolution block has no heads (models/hf/hybrid.py).
BLOCKS = (
    "attention layers 0, 1 are the model's blocks 1, 2 (of 3, model.layers); block 0 (conv) "
    "has no heads"
)


@pytest.fixture(scope="module")
def lfm3_dir(tmp_path_factory):
    return write_family("lfm3", tmp_path_factory.mktemp("gated") / "lfm3")


@pytest.fixture(scope="module")
def models(lfm3_dir):
    """(headlab's route, transformers' eager model) of the tiny LFM3."""
    from headlab.models.hf import load_transformers

    eager = model_class(family("lfm3")).from_pretrained(
        lfm3_dir, attn_implementation="eager", dtype=torch.float32
    )
    return load_transformers(lfm3_dir), eager.eval()


def test_the_gate_leaves_no_output_projection(models):
    model, eager = models
    assert [layer.path for layer in model.attention_layers()] == [
        "model.layers.1.self_attn",
        "model.layers.2.self_attn",
    ]
    for layer in model.attention_layers():
        assert layer.output is None and layer.output_weight() is None
        assert eager.get_submodule(layer.path).g_proj is not None  # the gate is there


def test_every_other_statistic_equals_eager_weights(models):
    model, eager = models
    ids, mask = padded(6)
    _, per_layer = model_head_sums(model, batch_of(ids, mask))
    _, attentions = eager_run(eager, ids, mask)
    assert len(attentions) == 2  # the convolution layer has none
    for sums, w in zip(per_layer, attentions, strict=True):
        assert "contribution_norm" not in sums.sums
        want = reference_means(w, mask.bool(), torch.zeros(w.shape[:3]))
        del want["contribution_norm"]
        for metric, expected in want.items():
            if metric == "received":
                got = sums.received
            else:
                got = sums.sums[metric] / (sums.n_prev if metric == "prev" else sums.n_queries)
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5, msg=metric)


def test_the_results_leave_the_statistic_out_with_a_note(models):
    from headlab.heads.long_context import long_text_statistics

    model, _ = models
    texts = [text(9, seed) for seed in range(3)]
    result = head_statistics(model, texts, max_length=20, detector_length=5)
    assert "contribution_norm" not in result.metrics and result.notes == [NOTE, BLOCKS]
    assert {"entropy", "first", "distance"} <= set(result.metrics)
    assert set(result.detectors) == {"previous_token", "duplicate_token", "induction"}
    document = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert document["notes"] == [NOTE, BLOCKS]
    assert HeadStatistics.from_dict(document) == result
    long = long_text_statistics(model, text(40, 7), window=(2, 5))
    assert long.statistics.notes == [NOTE, BLOCKS]
    assert "contribution_norm" not in long.statistics.metrics
    assert long.roles.window_error is not None and len(long.roles.window_error) == 2


def test_the_command_and_the_report_show_the_note_and_the_metric_is_refused(
    lfm3_dir, tmp_path, capsys
):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(text(8, seed) for seed in range(4)), encoding="utf-8")
    args = ["model", "heads", "--model", str(lfm3_dir), "--corpus", str(corpus), "--n-texts", "4"]
    results = tmp_path / "results"
    code, out, err = run([*args, "--out", str(results / "model_heads.json"), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["notes"] == [NOTE, BLOCKS]  # --json refuses NaN: none was there
    options = ReportRequest(text="w1 w2", results=results)
    page = build_report(tmp_path / "report", options, measure_report(options))
    shown = re.search(r'data-testid="heads-note">(.*?)</p>', page.read_text()).group(1)
    assert html.unescape(shown) == f"Note: {NOTE}."
    code, out, err = run([*args, "--out", str(tmp_path / "t.json")], capsys)
    assert code == 0, err
    assert "note: contribution_norm left out (attention layers 0, 1)" in " ".join(out.split())
    code, out, err = run(
        [*args, "--metric", "contribution_norm", "--out", str(tmp_path / "m.json")], capsys
    )
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--metric must be one of entropy, max_weight, first, self, prev, distance" in err
    assert f"got 'contribution_norm' ({NOTE})" in err
    assert not (tmp_path / "m.json").exists()
