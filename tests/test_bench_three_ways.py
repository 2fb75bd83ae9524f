"""The three-ways benchmark's cheap parts: the task's definition against transformers' eager
weights, the agreement check, the fit and the arithmetic, and the one-line skip of a tool that
is not installed (CI has neither TransformerLens nor nnsight)."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
three = pytest.importorskip("bench_three_ways")
fits = pytest.importorskip("three_ways_fits")


def _random_weights(batch: int, heads: int, length: int, seed: int = 2) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, heads, length, length, generator=generator)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(-1)


def test_the_reduction_is_the_first_key_mean_and_the_induction_diagonal():
    from headlab.heads.detectors import detector_scores

    n = 7
    weights = _random_weights(1, 5, 2 * n)  # 5 heads, 14 positions: a swapped axis fails
    first, induction = three.reduce_pattern(weights, n)
    by_hand_first = torch.stack(
        [sum(weights[0, h, q, 0] for q in range(2 * n)) / (2 * n) for h in range(5)]
    )
    by_hand_induction = torch.stack(
        [sum(weights[0, h, n + i, i + 1] for i in range(n - 1)) / (n - 1) for h in range(5)]
    )
    torch.testing.assert_close(first, by_hand_first)
    torch.testing.assert_close(induction, by_hand_induction)
    torch.testing.assert_close(induction, detector_scores(weights, n)["induction"])


def test_headlabs_streaming_scores_equal_those_of_transformers_eager_weights(tiny_llama_dir):
    # Reference: transformers' eager attention with output_attentions, the weights that
    # TransformerLens' pattern hook and nnsight's trace read; reduced as those tools do.
    import transformers

    from headlab.heads.detectors import repeated_random_tokens

    n = 13  # 26 tokens of the 64 positions
    ids = repeated_random_tokens(torch.arange(97), n, 1, seed=3)
    eager = transformers.LlamaForCausalLM.from_pretrained(
        tiny_llama_dir, attn_implementation="eager", dtype=torch.float32
    ).eval()
    with torch.no_grad():
        layers = eager(ids, output_attentions=True).attentions
    expected = [three.reduce_pattern(w, n) for w in layers]
    first, induction = three.run_headlab(three.load_headlab(tiny_llama_dir), ids, n)
    assert first.shape == induction.shape == (3, 6)  # (layer, head)
    torch.testing.assert_close(
        first, torch.stack([f for f, _ in expected]).double(), atol=1e-6, rtol=1e-5
    )
    torch.testing.assert_close(
        induction, torch.stack([i for _, i in expected]).double(), atol=1e-6, rtol=1e-5
    )


def test_repeated_ids_are_one_random_half_twice():
    ids = three.repeated_ids(16)
    assert ids.shape == (1, 16) and torch.equal(ids[0, :8], ids[0, 8:])
    assert torch.equal(ids, three.repeated_ids(16))  # seeded: the same in every process
    assert int(ids.max()) < three.SMOLLM2["vocab_size"]
    with pytest.raises(ValueError, match="length must be even"):
        three.repeated_ids(15)


def _row(tool: str, length: int, shift: float) -> dict:
    first = [[0.5 + shift, 0.25], [0.125, 0.0625]]
    return {"tool": tool, "length": length, "first": first, "induction": [[0.1, 0.2], [0.3, 0.4]]}


def test_agreement_is_checked_against_headlab_at_each_length():
    rows = [
        _row("headlab", 512, 0.0),
        _row("nnsight", 512, 2e-6),
        _row("transformer_lens", 512, 3e-4),
    ]
    rows.append(_row("headlab", 8192, 0.0))  # alone at its length: nothing to compare
    lines = fits.disagreements(rows, 1e-4)
    assert lines == [
        "512: nnsight - headlab: max |first| 2.0e-06, max |induction| 0.0e+00: agree",
        "512: transformer_lens - headlab: max |first| 3.0e-04, max |induction| 0.0e+00: "
        "DISAGREE (tolerance 0.0001)",
    ]


def test_the_fit_recovers_a_quadratic_and_extrapolates_it():
    lengths = [512, 1024, 2048, 4096]
    a, b, c = 3e8, 2e4, 108.0
    values = [a + b * t + c * t**2 for t in lengths]
    fitted = fits.fit_quadratic(lengths, values)
    assert fitted == pytest.approx((a, b, c), rel=1e-6)
    rows = [
        {"tool": "nnsight", "length": t, "peak": v + 1e9, "before": 1e9, "seconds": t / 100}
        for t, v in zip(lengths, values, strict=True)
    ]
    fit_line, two_line, target_line = fits.extrapolation(rows, "nnsight", 8192)
    assert "+108.0 B x T^2" in fit_line and "3.00 x 9 heads" in fit_line
    assert all(
        abs(float(r)) < 1 for r in fit_line.split("residuals ")[1].split(" MiB")[0].split(", ")
    )
    at_target = (a + b * 8192 + c * 8192**2) / 2**30
    assert f"{at_target:.1f} GiB above the model by the fit" in target_line
    # Through the two longest with no constant: b T + c T^2 through (2048, .), (4096, .).
    b2, c2 = fits.through_two(lengths, values)
    assert 2048 * b2 + c2 * 2048**2 == pytest.approx(values[2])
    assert 4096 * b2 + c2 * 4096**2 == pytest.approx(values[3])
    assert f"{c2:+.1f} B x T^2 ({c2 / 36:.2f} arrays)" in two_line
    assert f"{(b2 * 8192 + c2 * 8192**2) / 2**30:.1f} GiB by the two longest" in target_line
    assert "seconds 82 s" in target_line  # t / 100 at 8192, wall seconds: no CPU time recorded
    assert fits.extrapolation(rows[:2], "nnsight", 8192) == [
        "nnsight: 2 measured length(s), a fit needs 3"
    ]
    with pytest.raises(ValueError, match="3 distinct lengths"):
        fits.fit_quadratic([512, 512, 1024], [1.0, 2.0, 3.0])


def test_the_arithmetic_of_eager_attention_at_8192():
    assert fits.full_cache_bytes(8192) == 30 * 9 * 8192**2 * 4 == 72_477_573_120
    assert fits.eager_bytes(8192) == 2 * 9 * 8192**2 * 4 + 8192**2 * 4
    logits = 8192 * 49152 * 4
    assert fits.eager_estimate(8192) == 3 * 9 * 8192**2 * 4 + 8192**2 * 4 + logits
    one_layer, cache = fits.arithmetic(8192)
    assert "9 x 8192^2 x 4 B = 2.42 GB" in one_layer and one_layer.endswith("mask: 5.1 GB")
    assert cache.endswith("= 72.5 GB (67.5 GiB)")


def test_a_tool_that_is_not_installed_is_skipped_in_one_line(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "nnsight" else real(name)
    )
    assert three.missing("nnsight").startswith("nnsight: nnsight is not installed in ")
    assert three.missing("headlab") is None
    code = three.main(["--tools", "nnsight", "--gguf", "unused.gguf", "--headlab-lengths"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert [line for line in out if "nnsight" in line] == [three.missing("nnsight")]
    assert "agreement: no length where two tools ran" in out
