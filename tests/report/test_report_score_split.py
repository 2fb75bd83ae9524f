"""The report's "why a head attends" part: read through ``ScoreSplitResult``, shown through the
notebook's display (its figure drawn for the figures folder), the sentence names the largest
key-side term and the source token that the strongest key-side head read, and a missing file
named with the command that makes it."""

from __future__ import annotations

import json

from headlab.report.displays import show
from headlab.report.score_split_section import FILE, score_split_section
from headlab.results.score_split_result import PairSplit, ScoreSplitResult, SourceSplit

COMPONENTS = ["embed", "0.0", "0.1", "mlp.0", "out-bias", "qk-bias"]


def _result() -> ScoreSplitResult:
    key = [0.5, -0.25, 2.0, 0.125, 0.0, 0.375]
    query = [1.0, 0.5, 0.25, 1.0, 0.0, 0.0]
    pair = PairSplit(
        batch=0,
        query=3,
        key=2,
        score=2.75,
        raw=2.75,
        softcap_term=0.0,
        bias_term=0.0,
        query_marginal=query,
        key_marginal=key,
        pair_rows=["embed", "rest"],
        pair_cols=["0.1", "rest"],
        pair=[[1.0, 0.0], [1.0, 0.75]],
        sources=[SourceSplit("0.1", [0, 1, 2], [0.25, 1.5, 0.25])],
    )
    tokens = [["<s>", "<script>x</script>", "b", "c"]]
    return ScoreSplitResult(
        "fixture <b>model</b>", 1, 0, 0, "attended", tokens, COMPONENTS, 0.125, None, [pair]
    )


def test_the_part_reads_draws_and_says(tmp_path):
    document = {"headlab": ScoreSplitResult.KIND, **_result().to_dict()}
    (tmp_path / FILE).write_text(json.dumps(document))
    pngs: dict[str, bytes] = {}
    part = score_split_section(tmp_path, pngs)
    assert pngs["why_attends.png"].startswith(b"\x89PNG")
    assert part["display"] == show(_result()).html()  # the notebook's display, the strongest pair
    assert "<script>x</script>" not in part["display"]  # the tokens stay inside escaped JSON
    assert "0.1's (+2)" in part["answer"]
    assert "at 1 ('<script>x</script>', +1.5)" in part["answer"]


def test_a_missing_file_names_its_command(tmp_path):
    part = score_split_section(tmp_path, {})
    assert part["missing"].startswith("headlab why-attends")


def test_a_cross_attention_split_names_and_draws_the_source_tokens(tmp_path):
    """A cross-attention's sources are the source text's positions: the sentence and the
    figure's token strip read ``key_tokens``, not the target's tokens; the strip shows the
    tokens around the key (the head read those after it too), not all 60."""
    from dataclasses import replace

    from headlab.report.score_split_figures import AFTER, score_split_figure

    plain = _result()
    source = SourceSplit("enc.0.1", list(range(60)), [0.25, 1.5, 0.25] + [0.0625] * 57)
    pairs = [replace(plain.pairs[0], sources=[source])]
    labels = ["▁das", "▁Haus", "</s>"] + [f"w{i}" for i in range(3, 60)]
    result = replace(
        plain,
        pairs=pairs,
        attention="cross",
        key_components=["enc." + c for c in COMPONENTS[:-1]] + ["qk-bias"],
        key_tokens=labels,
    )
    document = {"headlab": ScoreSplitResult.KIND, **result.to_dict()}
    (tmp_path / FILE).write_text(json.dumps(document))
    part = score_split_section(tmp_path, {})
    assert "Head enc.0.1 adds +5.562 to the key side" in part["answer"]
    assert "at 1 ('▁Haus', +1.5)" in part["answer"]
    figure = score_split_figure(result)
    drawn = [t.get_text() for ax in figure.axes for t in ax.texts]
    strip = labels[: pairs[0].key + AFTER + 1]  # the key is 2: every token before it
    assert [t for t in drawn if t in labels] == strip
    assert "b" not in drawn  # the target's tokens
