"""Results file: whole lines, a torn last line survived with a warning and cut before appending."""

import json

import pytest

from headlab.experiments.results import (
    ResultsWriter,
    TornLineWarning,
    final_rows,
    finished_run_ids,
    read_rows,
)


def _row(run_id, step, final):
    return {"run_id": run_id, "config": {"task": "t"}, "step": step, "final": final, "loss": 1.0}


def test_missing_file_reads_as_empty(tmp_path):
    assert read_rows(tmp_path / "none.jsonl") == []


def test_appended_rows_read_back_in_order(tmp_path):
    path = tmp_path / "r.jsonl"
    writer = ResultsWriter(path)
    writer.append([_row("a", 1, False), _row("a", 2, True)])
    writer.append([_row("b", 2, True)])
    rows = read_rows(path)
    assert [(r["run_id"], r["step"]) for r in rows] == [("a", 1), ("a", 2), ("b", 2)]
    assert finished_run_ids(rows) == {"a", "b"}
    assert path.read_text().endswith("\n") and len(path.read_text().splitlines()) == 3


def test_torn_last_line_is_ignored_with_a_warning_and_cut_before_the_next_append(tmp_path):
    path = tmp_path / "r.jsonl"
    whole = json.dumps(_row("a", 5, True)) + "\n"
    path.write_text(whole + json.dumps(_row("b", 5, True))[:17])  # a write cut short
    with pytest.warns(TornLineWarning, match="torn last line"):
        assert [r["run_id"] for r in read_rows(path)] == ["a"]
    ResultsWriter(path).append([_row("c", 5, True)])
    assert path.read_text() == whole + json.dumps(_row("c", 5, True), separators=(",", ":")) + "\n"
    assert [r["run_id"] for r in read_rows(path)] == ["a", "c"]  # no warning any more


def test_a_bad_line_in_the_middle_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(_row("a", 1, True)) + "\nnot json\n" + json.dumps(_row("b", 1, 1)))
    with pytest.raises(ValueError, match=r"r.jsonl:2: expected a JSON results row"):
        read_rows(path)


def test_final_rows_keep_one_row_per_run():
    rows = [_row("a", 1, False), _row("a", 2, True), _row("b", 2, True), _row("a", 2, True)]
    assert sorted(r["run_id"] for r in final_rows(rows)) == ["a", "b"]


def test_a_foreign_file_is_never_cut_or_appended_to(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("my notes, no newline")
    with pytest.raises(ValueError, match=r"notes.txt:1: expected a JSON results row"):
        read_rows(path)
    with pytest.raises(ValueError, match="does not end like a results file"):
        ResultsWriter(path)
    assert path.read_text() == "my notes, no newline"
