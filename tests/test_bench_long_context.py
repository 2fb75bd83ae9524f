"""The long-context benchmark's cheap parts: its arguments, its one-line failures, its verdicts,
and that its transformers baseline and headlab's route run the same model."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
bench = pytest.importorskip("bench_long_context")
routes = pytest.importorskip("long_context_routes")
fresh = pytest.importorskip("fresh_process")


def test_a_failed_child_is_its_exception_in_one_line():
    stderr = (
        'Traceback (most recent call last):\n  File "x.py", line 3, in <module>\n'
        "NotImplementedError: the transformers route does not yet do traces\n\n"
    )
    assert fresh.failure_line(stderr, 1) == (
        "NotImplementedError: the transformers route does not yet do traces"
    )
    assert fresh.failure_line("", -9) == "exit code -9, nothing on stderr"
    long = fresh.failure_line("E: " + "x" * 500, 1)
    assert len(long) == 240 and long.endswith("...") and "\n" not in long


def test_run_child_reads_the_last_json_line_or_says_why_in_one_line():
    ok = [sys.executable, "-c", "print('loading'); print('{\"seconds\": 1.5}')"]
    assert fresh.run_child(ok) == ({"seconds": 1.5}, "")
    bad = [sys.executable, "-c", "raise ValueError('max_tokens= must be at most 8192, got 9000')"]
    assert fresh.run_child(bad) == (None, "ValueError: max_tokens= must be at most 8192, got 9000")
    silent = [sys.executable, "-c", "print('no json')"]
    row, why = fresh.run_child(silent)
    assert row is None and why.startswith("no JSON result")


def test_measure_counts_what_the_call_allocates():
    # In a fresh process, as the benchmark measures: inside this long test session the
    # allocator may hand back pages that are already resident, and the peak would not move.
    size = 64 * 2**20  # a 64 MiB tensor, touched: its pages are resident
    child = (
        "import json, sys, torch; sys.path.insert(0, sys.argv[1]); import fresh_process; "
        f"print(json.dumps(fresh_process.measure(lambda n: torch.ones(n // 4), {size})))"
    )
    row, why = fresh.run_child([sys.executable, "-c", child, str(Path(fresh.__file__).parent)])
    assert row is not None, why
    assert row["peak"] - row["before"] >= 0.9 * size
    assert row["seconds"] > 0 and row["cpu_seconds"] > 0


def test_every_model_compares_with_transformers_sdpa():
    args = bench.parse([])
    assert args.routes == ["sdpa", "forward", "streaming", "roles"]
    assert args.lengths == [2048, 8192]
    assert bench.baseline(args.routes) == "sdpa"
    assert bench.BOUNDS[bench.bounds_key(args)] == (1.3, 2.0)
    llama = bench.parse(["--random-llama"])
    assert llama.lengths == [8192, 32768]
    assert bench.BOUNDS[bench.bounds_key(llama)] == (1.3, None)
    assert bench.baseline(bench.parse(["--routes", "forward", "streaming"]).routes) == "forward"
    bare = bench.parse(["--bare"])
    assert bare.routes == ["forward", "streaming", "materialised"]


@pytest.mark.parametrize("backend", ["headlab", "transformers"])
def test_a_retired_backend_is_accepted_with_one_line_saying_it_chooses_nothing(backend, capsys):
    args = bench.parse(["--backend", backend])
    assert args.routes == bench.parse([]).routes
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no longer chooses anything" in err
    assert "--backend" not in bench.child_command("forward", 64, args)


def test_a_backend_it_never_took_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.parse(["--backend", "x"])
    assert exit_.value.code == 2


def test_the_bare_module_has_no_sdpa_route(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.parse(["--bare", "--routes", "sdpa", "forward"])
    assert exit_.value.code == 2
    assert "--bare is one headlab module" in capsys.readouterr().err.strip().splitlines()[-1]


def test_a_child_gets_the_parents_flags():
    args = bench.parse(["--random-llama", "--threads", "2", "--chunk-elements", "4096"])
    command = bench.child_command("sdpa", 32768, args)
    assert command[2:5] == ["--child", "sdpa", "32768"]
    assert "--random-llama" in command and "--random-weights" not in command
    assert command[command.index("--threads") + 1] == "2"
    assert command[command.index("--chunk-elements") + 1] == "4096"
    assert bench.spec_of(bench.parse(command[2:])).model == "random-llama"


ROWS = [
    {"route": "sdpa", "length": 8192, "seconds": 10.0, "peak": 2 * 2**30, "before": 2**30},
    {"route": "forward", "length": 8192, "seconds": 11.0, "peak": 2.1 * 2**30, "before": 2**30},
    {
        "route": "streaming",
        "length": 8192,
        "seconds": 19.0,
        "cpu_seconds": 37.5,
        "peak": 2.5 * 2**30,
        "before": 2**30,
    },
    {"route": "roles", "length": 8192, "seconds": 15.0, "peak": 2.7 * 2**30, "before": 2**30},
    {"route": "streaming", "length": 32768, "failed": "NotImplementedError: not yet"},
]


def test_verdicts_hold_each_compared_route_to_the_bounds():
    lines = bench.verdicts(ROWS, "sdpa", (1.3, 2.0))
    assert lines == [
        "streaming at 8192: peak 1.25x sdpa (bound 1.3x), time 1.90x (bound 2x): within",
        "roles at 8192: peak 1.35x sdpa (bound 1.3x), time 1.50x (bound 2x): OVER",
        "streaming at 32768: not compared (failed)",
    ]
    slow = [dict(ROWS[0]), {**ROWS[2], "seconds": 25.0}]
    assert bench.verdicts(slow, "sdpa", (1.3, 2.0))[0].endswith("time 2.50x (bound 2x): OVER")
    assert bench.verdicts(slow, "sdpa", (1.3, None))[0].endswith("time 2.50x: within")
    assert bench.verdicts(ROWS[2:3], "sdpa", (1.3, 2.0)) == [
        "streaming at 8192: not compared (no sdpa)"
    ]


def test_model_heads_is_held_to_the_body_forward_whatever_the_baseline():
    gib = 2**30
    rows = [
        {"route": "sdpa", "length": 8192, "seconds": 20.0, "peak": 3.0 * gib},
        {"route": "sdpa-body", "length": 8192, "seconds": 16.0, "peak": 2.0 * gib},
        {"route": "heads", "length": 8192, "seconds": 48.0, "peak": 2.5 * gib},
        {"route": "heads", "length": 2048, "seconds": 8.0, "peak": 1.5 * gib},
    ]
    assert bench.baseline(["sdpa-body", "heads"]) == "sdpa-body"
    assert bench.verdicts(rows, "sdpa", (1.3, 2.0)) == [
        "heads at 8192: peak 1.25x sdpa-body (bound 1.2x), time 3.00x: OVER",
        "heads at 2048: not compared (no sdpa-body)",
    ]
    rows[2]["peak"] = 2.3 * gib
    assert bench.verdicts(rows[1:3], "sdpa-body", (1.3, 2.0)) == [
        "heads at 8192: peak 1.15x sdpa-body (bound 1.2x), time 3.00x: within"
    ]


def test_the_table_shows_a_failed_route_as_failed():
    lines = bench.table(ROWS, "sdpa")
    assert lines[0] == (
        "| length | route | seconds | cpu s | peak GiB | peak / sdpa | time / sdpa |"
    )
    assert "| 8192 | streaming | 19 | 37.5 | 2.50 | 1.25 | 1.90 |" in lines
    assert "| 8192 | roles | 15 | - | 2.70 | 1.35 | 1.50 |" in lines  # no CPU time recorded
    assert lines[-1] == "| 32768 | streaming | failed | - | - | - | - |"


def test_materialised_estimate_is_layers_heads_length_squared():
    assert routes.materialised_bytes("smollm2", 8192) == 30 * 9 * 8192**2 * 4
    assert routes.materialised_bytes("random-llama", 32768) == 4 * 9 * 32768**2 * 4
    assert routes.materialised_bytes(None, 100) == 12 * 100**2 * 4
    assert routes.RANDOM_LLAMA["max_position_embeddings"] == 32768


def test_sdpa_baseline_and_headlab_route_run_the_same_model():
    # Two separate builds, as in two processes: the same seeded weights and ids, so that the
    # benchmark compares two attentions of one model. Reference: transformers' own SDPA.
    pytest.importorskip("transformers")
    spec = routes.Spec("random-llama")
    sdpa, batch, warm = routes.route_runs("sdpa", spec, 37)
    forward, same_batch, _ = routes.route_runs("forward", spec, 37)
    assert torch.equal(batch.input_ids, same_batch.input_ids) and batch.input_ids.shape == (1, 37)
    assert warm.input_ids.shape == (1, 64)
    with torch.inference_mode():
        expected = sdpa(batch)
        got = forward(batch)
    assert expected.shape == (1, 37, routes.RANDOM_LLAMA["vocab_size"])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_the_streaming_route_through_transformers_measures_the_eager_weights():
    # The benchmark's statistics pass on the transformers route, against transformers' own eager
    # weights of the same seeded model: the mean weight on the first token of every head.
    pytest.importorskip("transformers")
    spec = routes.Spec("random-llama")
    streaming, batch, _ = routes.route_runs("streaming", spec, 29)
    with torch.inference_mode():
        _, sums = streaming(batch)
    eager = routes.random_llama(routes.RANDOM_LLAMA, "eager")
    with torch.no_grad():
        weights = eager(batch.input_ids, output_attentions=True).attentions
    assert len(sums) == len(weights) == 4
    for layer_sums, w in zip(sums, weights, strict=True):
        first = layer_sums.sums["first"] / layer_sums.n_queries
        torch.testing.assert_close(first, w[0, :, :, 0].mean(-1).double(), atol=1e-6, rtol=1e-5)


def test_the_random_weights_route_runs_on_token_ids_alone():
    # SmolLM2's shapes with random weights have no tokenizer: the model still runs and its
    # statistics name the first token as every decoder without a prefix token does.
    pytest.importorskip("transformers")
    spec = routes.Spec("smollm2-random")
    forward, batch, _ = routes.route_runs("forward", spec, 11)
    streaming, _, _ = routes.route_runs("streaming", spec, 11)
    with torch.inference_mode():
        logits = forward(batch)
        _, sums = streaming(batch)
    assert logits.shape == (1, 11, 49152) and torch.isfinite(logits).all()
    assert len(sums) == 30 and "first" in sums[0].sums
