"""The results file: validated rows, torn and merged files, the lock, never a complete run lost."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headlab.experiments.config import make_config
from headlab.experiments.results import (
    ResultsWriter,
    SkippedLinesWarning,
    TornLineWarning,
    final_rows,
    finished_run_ids,
    parse_results,
    read_results,
    read_rows,
    row_problem,
)
from headlab.output_policy import OutputRefused


def _row(seed, step, final):
    config = make_config("multi-lookup", 2, d_model=8, seed=seed, steps=5)
    return {
        "run_id": config.run_id,
        "config": config.to_dict(),
        "step": step,
        "loss": 1.5,
        "accuracy": 0.25,
        "final": final,
        "head_entropy": [0.5, 0.25] if final else None,
        "params": 123,
        "seconds": 0.5 if final else None,
    }


def _line(row):
    return json.dumps(row, separators=(",", ":")) + "\n"


def test_missing_file_reads_as_empty(tmp_path):
    assert read_rows(tmp_path / "none.jsonl") == []


def test_appended_rows_read_back_in_order(tmp_path):
    path = tmp_path / "r.jsonl"
    with ResultsWriter(path) as writer:
        writer.append([_row(0, 1, False), _row(0, 2, True)])
        writer.append([_row(1, 2, True)])
    rows = read_rows(path)
    assert [(r["config"]["seed"], r["step"]) for r in rows] == [(0, 1), (0, 2), (1, 2)]
    assert finished_run_ids(rows) == {_row(0, 0, 0)["run_id"], _row(1, 0, 0)["run_id"]}
    assert path.read_text().endswith("\n") and len(path.read_text().splitlines()) == 3


def test_torn_last_line_is_ignored_with_a_warning_and_cut_before_the_next_append(tmp_path):
    path = tmp_path / "r.jsonl"
    whole = _line(_row(0, 5, True))
    path.write_text(whole + _line(_row(1, 5, True))[:17])  # a write cut short
    with pytest.warns(TornLineWarning, match="torn last line"):
        assert [r["config"]["seed"] for r in read_rows(path)] == [0]
    with ResultsWriter(path) as writer:
        writer.append([_row(2, 5, True)])
    assert path.read_text() == whole + _line(_row(2, 5, True))
    assert [r["config"]["seed"] for r in read_rows(path)] == [0, 2]  # no warning any more


def test_a_complete_last_line_without_newline_is_kept_and_completed(tmp_path):
    """Files merged with "\\n".join end without a newline: the last run must survive."""
    path = tmp_path / "r.jsonl"
    path.write_text(_line(_row(0, 5, True)) + _line(_row(1, 5, True)).rstrip("\n"))
    assert len(read_rows(path)) == 2
    with ResultsWriter(path) as writer:
        writer.append([_row(2, 5, True)])
    assert [r["config"]["seed"] for r in read_rows(path)] == [0, 1, 2]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"run_id":"abc"}', "missing 'step'"),
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_lines_that_are_not_rows_are_skipped_and_reported_with_their_number(tmp_path, line, reason):
    path = tmp_path / "r.jsonl"
    path.write_text(_line(_row(0, 5, True)) + line + "\n" + _line(_row(1, 5, True)))
    with pytest.warns(SkippedLinesWarning, match=f"line 2: {reason}"):
        rows = read_rows(path)
    assert [r["config"]["seed"] for r in rows] == [0, 1]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"final": "false"}, "'final' must be true or false"),
        ({"loss": "1.0"}, "'loss' must be a finite number"),
        ({"accuracy": 1.5}, "'accuracy' must be a number in [0, 1]"),
        ({"step": True}, "'step' must be an integer"),
        ({"head_entropy": [1, "x"]}, "head_entropy"),
        ({"config": {"task": "t"}}, "config lacks 'num_heads'"),
        ({"config": []}, "config is not an object"),
    ],
)
def test_row_schema_names_what_is_wrong(change, problem):
    assert row_problem(_row(0, 1, True)) is None
    assert problem in row_problem({**_row(0, 1, True), **change})


def test_undecodable_bytes_are_skipped_not_fatal():
    content = parse_results(_line(_row(0, 5, True)).encode() + b"\xff\xfe\n")
    assert len(content.rows) == 1 and content.skipped[0].reason == "not UTF-8 text"


def test_final_rows_keep_one_row_per_run():
    rows = [_row(0, 1, False), _row(0, 2, True), _row(1, 2, True), _row(0, 2, True)]
    assert len(final_rows(rows)) == 2


def test_a_foreign_file_is_never_cut_or_appended_to(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("my notes, no newline")
    with pytest.raises(OutputRefused, match="holds no results rows"):
        ResultsWriter(path)
    assert path.read_text() == "my notes, no newline"


def test_a_second_writer_is_refused_while_the_first_holds_the_lock(tmp_path):
    path = tmp_path / "r.jsonl"
    with ResultsWriter(path) as first:
        first.append([_row(0, 5, True)])
        with pytest.raises(ValueError, match="another headlab sweep is writing"):
            ResultsWriter(path)
    with ResultsWriter(path) as again:  # released on close
        again.append([_row(1, 5, True)])
    assert len(read_rows(path)) == 2


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink"])
def test_the_writer_refuses_what_is_not_a_regular_file(tmp_path, kind):
    import os

    path = tmp_path / "r.jsonl"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        (tmp_path / "target").write_text(_line(_row(0, 5, True)))
        path.symlink_to(tmp_path / "target")
    with pytest.raises(OutputRefused, match="not a regular file"):
        ResultsWriter(path)


ROWS = [_line(_row(seed, 5, True)).encode() for seed in range(3)]


@given(
    junk=st.lists(st.binary(max_size=40), max_size=4),
    order=st.permutations(range(3)),
    cut=st.integers(min_value=0, max_value=len(ROWS[0])),
    merged=st.booleans(),
)
def test_reader_never_loses_a_complete_valid_run(junk, order, cut, merged):
    """Arbitrary bytes between complete rows, a torn tail, a merged file without final newline:
    every complete row is read back, and nothing but warnings-worthy skips happens."""
    complete = [ROWS[i] for i in order]
    parts = []
    for i, row in enumerate(complete):
        parts.append(row)
        if i < len(junk):
            parts.append(junk[i].replace(b"\n", b" ") + b"\n")
    data = b"".join(parts)
    if merged:
        data = data.rstrip(b"\n")  # "\n".join-style merge: the last row has no newline
    else:
        data += ROWS[0][: min(cut, len(ROWS[0]) - 2)]  # a torn write, never a whole row
    content = parse_results(data)
    seeds = [r["config"]["seed"] for r in content.rows]
    expected = [json.loads(r)["config"]["seed"] for r in complete]
    assert sorted(seeds) == sorted(expected)  # every complete run, nothing invented
    assert all(row_problem(r) is None for r in content.rows)


def test_read_results_of_a_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="not a results file"):
        read_results(tmp_path)
