"""Results files edited by hand (issue 31): nested past any parser's recursion, sizes the file does
not hold, a baseline that is gone, a grid NumPy cannot stack. The readers name the file and the
field; the report skips that file in one line and builds the rest. Hypothesis for the depth,
the sizes and a file a command both reads and writes (the JSONL it resumes from and appends to).
References: the documents as the results' own classes write them."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headlab.report.reading import SkippedResultsWarning
from headlab.results.input_files import MAX_JSON_DEPTH
from headlab.results.json_store import read_result
from headlab.results.jsonl_store import read_results
from headlab.results.jsonl_writer import ResultsWriter
from headlab.results.kv_budget_result import KVBudgetResult
from headlab.results.long_context_result import LongContextResult
from report.long_results import write_long_results
from results.test_jsonl_store import _line, _row

FIXTURE = [HealthCheck.function_scoped_fixture]


@pytest.fixture(scope="module")
def long_dir(tmp_path_factory) -> Path:
    return write_long_results(tmp_path_factory.mktemp("long"))


def edited(source: Path, folder: Path, name: str, change) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    data = json.loads((folder / name).read_text())
    change(data)
    (folder / name).write_text(json.dumps(data))
    return folder / name


@settings(max_examples=30, deadline=None, suppress_health_check=FIXTURE)
@given(st.integers(1, 200_000))
def test_any_nesting_depth_is_a_named_refusal_or_a_document(tmp_path_factory, depth):
    """A valid document with one field wrapped ``depth`` lists deep: read back or refused naming
    the file, never a RecursionError, whatever the depth."""
    path = tmp_path_factory.mktemp("deep") / "model_kv-budget.json"
    text = json.dumps({"headlab": "model-kv-budget", "model": "m", "deep": 0})
    path.write_text(text.replace('"deep": 0', '"deep": ' + "[" * depth + "]" * depth))
    if depth + 1 > MAX_JSON_DEPTH:
        with pytest.raises(ValueError, match=rf"{path.name}: expected JSON nested at most"):
            read_result(path, KVBudgetResult)
    else:
        with pytest.raises(ValueError, match=path.name):  # then its schema (no runs) names it
            read_result(path, KVBudgetResult)


@settings(max_examples=25, deadline=None, suppress_health_check=FIXTURE)
@given(st.one_of(st.integers(2, 10**15), st.just(10**12)))
def test_a_size_is_checked_against_what_the_file_holds(long_dir, tmp_path_factory, n_tokens):
    """context.n_tokens edited to any size: read back only when the maps hold that many tokens
    (the report would otherwise allocate for 10**12)."""
    data = json.loads((long_dir / "model_long-context.json").read_text())
    block, blocks = data["maps"]["block"], len(data["maps"]["blocked"][0][0])
    holds = (
        -(-n_tokens // block) == blocks
        and -(-n_tokens // data["maps"]["bin"]) == len(data["maps"]["received"][0][0])
        and n_tokens > max(max(map(max, row)) for row in data["heavy_hitters"]["top_keys"])
    )
    data["context"]["n_tokens"] = n_tokens
    if holds:
        assert LongContextResult.from_dict(data).context.n_tokens == n_tokens
    else:
        with pytest.raises(ValueError, match=r"expected"):
            LongContextResult.from_dict(data)


def test_a_budget_file_without_its_baseline_is_named(long_dir, tmp_path):
    path = edited(long_dir, tmp_path, "model_kv-budget.json", lambda d: d.update(runs=[]))
    with pytest.raises(ValueError, match=r'runs: expected one run of kind "full"'):
        read_result(path, KVBudgetResult)


def _long_sections(folder: Path) -> dict:
    from headlab.report.long_context_section import long_context_sections

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sections = long_context_sections(folder, {})
    said = [str(w.message) for w in caught if issubclass(w.category, SkippedResultsWarning)]
    return sections, said


@pytest.mark.parametrize(
    ("name", "change", "field"),
    [
        ("model_kv-budget.json", lambda d: d.update(runs=[]), "runs"),
        ("model_long-context.json", lambda d: d["context"].update(n_tokens=10**12), "maps"),
        ("model_long-context.json", lambda d: d.update(metrics=[[1]] * 100_000), "metrics"),
    ],
    ids=["no-baseline", "huge-n_tokens", "metrics-not-an-object"],
)
def test_the_report_skips_a_hand_edited_file_in_one_line(long_dir, tmp_path, name, change, field):
    path = edited(long_dir, tmp_path, name, change)
    sections, said = _long_sections(tmp_path)
    key = "kv_budget" if name == "model_kv-budget.json" else "roles"
    other = "roles" if key == "kv_budget" else "kv_budget"
    assert "skipped" in sections[key] and field in sections[key]["skipped"]
    assert len(said) == 1 and str(path) in said[0]
    assert "display" in sections[other]  # the rest of the report is still drawn


def test_a_ragged_grid_skips_its_file_naming_it_not_numpy_alone(tmp_path):
    """Rows shorter than the head count pass the schema (a pruned layer); if the figure cannot
    stack them, the file is skipped in one line naming it, and the other parts are kept."""
    from headlab.report.sections import _results_sections

    heads = {
        "headlab": "model-heads",
        "model": "m",
        "n_texts": 2,
        "num_layers": 3,
        "num_heads": 3,
        "metrics": {"entropy": [[0.1, 0.2, 0.3], [0.1], [0.2, 0.3, 0.4]]},
    }
    (tmp_path / "model_heads.json").write_text(json.dumps(heads))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sections = _results_sections(tmp_path, {})
    said = [str(w.message) for w in caught if issubclass(w.category, SkippedResultsWarning)]
    if "skipped" in sections["heads"]:
        assert len(said) == 1 and "model_heads.json" in said[0]
    else:  # drawn: the heads display holds the grid as it is
        assert "display" in sections["heads"]
    assert "missing" in sections["sweep"]


@settings(max_examples=20, deadline=None, suppress_health_check=FIXTURE)
@given(st.integers(1, 100_000), st.integers(0, 3))
def test_a_file_both_read_and_written_keeps_every_row_past_a_deep_line(tmp_path_factory, depth, at):
    """The JSONL a command resumes from and appends to: a hand-added line of any depth among its
    rows is skipped (named, with its depth when too deep), never removed, and every row written
    before and after it is read back."""
    path = tmp_path_factory.mktemp("rw") / "r.jsonl"
    rows = [_line(_row(seed, 5, True)) for seed in range(3)]
    deep = '{"run_id": ' + "[" * depth + "]" * depth + "}\n"
    path.write_text("".join([*rows[:at], deep, *rows[at:]]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ResultsWriter(path) as writer:
            writer.append([_row(7, 5, True)])
        result = read_results(path)
    assert [r["config"]["seed"] for r in result.rows] == [0, 1, 2, 7]
    assert deep in path.read_text()
    (skipped,) = result.skipped
    if depth + 1 > MAX_JSON_DEPTH:
        assert skipped.reason == f"JSON nested {depth + 1} deep, expected at most {MAX_JSON_DEPTH}"


def test_a_ragged_grid_is_drawn_and_summarised_with_its_pruned_layer(tmp_path):
    """Issue 31: a metrics grid with a short row (a pruned layer) passes the schema, and the
    figure pads it blank, but the page's summary stacked it into one NumPy array and skipped the
    whole file with NumPy's message. Now it is drawn: the heads display carries the pruned
    layer's one value, 0.5 at layer 1, head 0 (the largest, found here by hand)."""
    from headlab.report.sections import _results_sections

    heads = {
        "headlab": "model-heads",
        "model": "m",
        "n_texts": 2,
        "num_layers": 3,
        "num_heads": 3,
        "metrics": {"entropy": [[0.1, 0.2, 0.3], [0.5], [0.2, 0.3, 0.4]]},
    }
    (tmp_path / "model_heads.json").write_text(json.dumps(heads))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sections = _results_sections(tmp_path, {})
    assert not [w for w in caught if issubclass(w.category, SkippedResultsWarning)]
    assert "display" in sections["heads"], sections["heads"]
    assert "0.5" in json.dumps(sections["heads"]) and "skipped" not in sections["heads"]
