"""The results file: validated rows, torn and merged files, the lock, never a complete run lost."""

import json
import tracemalloc
import warnings

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from headlab.experiments.run_sizing import make_config
from headlab.results.jsonl_store import (
    SWEEP,
    SkippedLinesWarning,
    TornLineWarning,
    final_rows,
    finished_run_ids,
    parse_results,
    read_results,
    read_rows,
    row_problem,
)
from headlab.results.jsonl_writer import ResultsWriter, check_appendable
from headlab.results.output_policy import OutputRefused


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
    with pytest.raises(ValueError, match="is a directory, expected a regular file"):
        read_results(tmp_path)


def test_a_users_last_line_without_newline_is_kept_and_the_rows_go_after_it(tmp_path):
    """Only headlab's own interrupted row may be cut: a user's note without newline stays."""
    path = tmp_path / "r.jsonl"
    before = _line(_row(0, 5, True)) + "NOTE: 16-head runs are elsewhere"
    path.write_text(before)
    with pytest.warns(SkippedLinesWarning, match="line 2: not JSON"):
        check_appendable(path)
    with ResultsWriter(path) as writer:
        writer.append([_row(1, 5, True)])
    assert path.read_text() == before + "\n" + _line(_row(1, 5, True))


def test_a_fragment_of_a_row_is_torn_only_when_it_starts_as_headlab_writes_rows():
    start = SWEEP.start.decode()
    assert parse_results((_line(_row(0, 5, True)) + start + '"ab').encode()).torn_tail
    for tail in ("NOTE", '{"note": 1', " " + start, "x" + start):
        content = parse_results((_line(_row(0, 5, True)) + tail).encode())
        assert not content.torn_tail and len(content.skipped) == 1, tail


USER_TEXT = st.one_of(
    st.text(max_size=60), st.binary(max_size=60).map(lambda b: b.decode("latin-1"))
)


@given(
    before=st.lists(USER_TEXT, max_size=3),
    during=st.lists(USER_TEXT, max_size=2),
    newline=st.booleans(),
)
def test_the_writer_never_removes_a_line_the_user_wrote(tmp_path_factory, before, during, newline):
    """User text (any characters, with or without a last newline) after complete rows, before the
    writer opens and between its appends: the file only ever grows, and every row is read back."""
    path = tmp_path_factory.mktemp("w") / "r.jsonl"
    user = "\n".join(before) + ("\n" if newline else "")
    assume(not user.split("\n")[-1].encode().startswith(SWEEP.start))  # that is headlab's own
    data = _line(_row(0, 5, True)).encode() + user.encode()
    path.write_bytes(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedLinesWarning)
        with ResultsWriter(path) as writer:
            for seed, text in enumerate(during, start=1):
                writer.append([_row(seed, 5, True)])
                with path.open("ab") as f:  # the lock is advisory: a user may still write
                    f.write(text.encode())
                assert path.read_bytes().startswith(data)
                data = path.read_bytes()
            writer.append([_row(9, 5, True)])
        assert path.read_bytes().startswith(data)
        seeds = [r["config"]["seed"] for r in read_results(path).rows]
    assert seeds == [0, *range(1, len(during) + 1), 9]


def test_a_file_that_is_not_results_is_refused_from_its_first_line(tmp_path):
    """A large file that is not a results file is refused after reading its first bytes."""
    big = tmp_path / "big.dat"
    with big.open("wb") as f:
        f.write(b"PK\x03\x04 not results")
        f.truncate(64 * 2**20)  # sparse: 64 MiB of zeros cost no disk
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="not a results file: its first line"):
            read_results(big)
        with pytest.raises(OutputRefused, match="holds no results rows"):
            check_appendable(big)
        with pytest.raises(OutputRefused, match="holds no results rows"):
            ResultsWriter(big)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, peak
    assert big.stat().st_size == 64 * 2**20


def test_a_user_line_before_the_rows_makes_it_not_a_results_file(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("\n  \nmy header\n" + _line(_row(0, 5, True)))
    with pytest.raises(ValueError, match=r'does not start with \{"run_id":'):
        read_results(path)
    path.write_text("\n \n" + _line(_row(0, 5, True)))  # blank lines first are fine
    assert len(read_results(path).rows) == 1


def test_a_giant_line_is_skipped_unread_and_named(tmp_path, monkeypatch):
    """Issue 31: a single giant line was read whole. A line over MAX_LINE_BYTES is skipped with
    its number and length, the rows around it kept, and the reader never holds it: the peak of
    Python's allocations stays far below the line's size (tracemalloc, an outside measure)."""
    import tracemalloc

    from headlab.results import jsonl_store

    monkeypatch.setattr(jsonl_store, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(jsonl_store, "_SKIP_CHUNK", 1024)
    good = '{"run_id": "a"}\n'
    giant = 5 * 2**20 + 7  # bytes, a prime-ish size far over the bound
    path = tmp_path / "r.jsonl"
    with path.open("w") as handle:
        handle.write(good)
        handle.write('{"run_id": "' + "x" * giant + '"}\n')
        handle.write(good)
    kind = jsonl_store.RowKind(problem=lambda row: None)
    tracemalloc.start()
    try:
        result = jsonl_store.read_results(path, kind)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(result.rows) == 2
    assert [s.number for s in result.skipped] == [2]
    assert f"{giant + 15} bytes long, expected at most 4096" in result.skipped[0].reason
    assert peak < 2**20, peak
