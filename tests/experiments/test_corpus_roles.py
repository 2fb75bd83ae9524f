"""Head roles over many documents on the executors: the same bits in one process and on the local
pool, resumable per document, the results file's lines (a user's included) never lost.

The documents are those of tests/corpus_documents.py (a known repeat, the model's own greedy
continuation, a short plain text) on the tiny random decoder, loaded by each worker from its
folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from corpus_documents import OPTIONS, documents
from headlab.experiments.corpus_roles import (
    Document,
    ModelSource,
    corpus_roles,
    corpus_summary,
    plan_corpus,
    read_documents,
    run_corpus,
)
from headlab.heads.corpus_sums import corpus_result, document_sums, merge_sums
from headlab.results.jsonl_store import SkippedLinesWarning, TornLineWarning
from headlab.results.output_policy import OutputRefused


@pytest.fixture(scope="module")
def corpus(tiny_llama):
    return [Document(f"{name}.txt", text) for name, text in documents(tiny_llama).items()]


@pytest.fixture(scope="module")
def source(tiny_llama_dir):
    return ModelSource.of(tiny_llama_dir)


@pytest.fixture(scope="module")
def inline(source, corpus, tmp_path_factory):
    """The corpus run in this process: (its result, its results file)."""
    out = tmp_path_factory.mktemp("inline") / "roles.jsonl"
    return corpus_roles(source, corpus, OPTIONS, out=out), out


def sums_by_document(path: Path) -> dict[str, dict]:
    return {row["document"]: row["sums"] for row in map(json.loads, path.read_text().splitlines())}


def test_one_process_merges_the_documents_sums_in_their_order(tiny_llama, corpus, inline):
    """Each document's pass runs on one torch thread wherever it runs: with two, a matmul may
    split its work otherwise and round otherwise (1e-6 on the short document here)."""
    result, out = inline
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        parts = [document_sums(tiny_llama, d.text, OPTIONS) for d in corpus]
    finally:
        torch.set_num_threads(threads)
    assert result == corpus_result(merge_sums(parts), OPTIONS)
    assert list(sums_by_document(out)) == [d.name for d in corpus]
    assert all(
        json.loads(line)["headlab"] == "corpus-roles-document"
        for line in out.read_text().splitlines()
    )


def test_the_local_pool_gives_the_same_bits_and_loads_the_model_once_per_worker(
    source, corpus, inline, tmp_path
):
    plan = plan_corpus(source, corpus, OPTIONS, tmp_path / "pool.jsonl")
    results = list(run_corpus(plan, workers=2))
    assert sorted(r.job.document.name for r in results) == sorted(d.name for d in corpus)
    pids = {r.pid for r in results}
    assert sum(r.loaded_model for r in results) == len(pids) <= 2  # not once per document
    assert corpus_summary(plan) == inline[0]
    assert sums_by_document(plan.out) == sums_by_document(inline[1])  # any order of lines


def test_an_interrupted_run_resumes_and_merges_the_same(source, corpus, inline, tmp_path):
    out = tmp_path / "roles.jsonl"
    plan = plan_corpus(source, corpus, OPTIONS, out)
    for _ in run_corpus(plan):
        break  # interrupted after the first document
    assert len(out.read_text().splitlines()) == 1
    again = plan_corpus(source, corpus, OPTIONS, out)
    assert again.skipped == 1
    assert [j.document.name for j in again.todo] == ["greedy.txt", "plain.txt"]
    done = [r.job.document.name for r in run_corpus(again)]
    assert done == ["greedy.txt", "plain.txt"]
    assert corpus_summary(again) == inline[0]
    assert list(run_corpus(plan_corpus(source, corpus, OPTIONS, out))) == []  # all finished


def test_a_torn_last_line_is_cut_and_its_document_runs_again(source, corpus, inline, tmp_path):
    out = tmp_path / "roles.jsonl"
    lines = inline[1].read_text().splitlines(keepends=True)
    out.write_text(lines[0] + lines[1][:100])  # the second document's write cut short
    with pytest.warns(TornLineWarning):
        plan = plan_corpus(source, corpus, OPTIONS, out)
    assert [j.document.name for j in plan.todo] == ["greedy.txt", "plain.txt"]
    list(run_corpus(plan))
    assert corpus_summary(plan) == inline[0]
    assert out.read_text().startswith(lines[0]) and len(out.read_text().splitlines()) == 3


def test_a_users_line_is_kept_and_a_foreign_file_refused(source, corpus, inline, tmp_path):
    out = tmp_path / "roles.jsonl"
    first = inline[1].read_text().splitlines(keepends=True)[0]
    note = "my note: the first document is the repeat\n"
    out.write_text(first + note)
    with pytest.warns(SkippedLinesWarning, match="line 2: not JSON"):
        plan = plan_corpus(source, corpus, OPTIONS, out)
    list(run_corpus(plan))
    assert out.read_text().startswith(first + note)
    assert corpus_summary(plan) == inline[0]
    foreign = tmp_path / "notes.jsonl"
    foreign.write_text(note)
    with pytest.raises(OutputRefused, match="holds no results rows"):
        plan_corpus(source, corpus, OPTIONS, foreign)
    assert foreign.read_text() == note


def test_a_changed_document_runs_again_and_only_it(source, corpus, inline, tmp_path):
    out = tmp_path / "roles.jsonl"
    out.write_text(inline[1].read_text())
    changed = [*corpus[:2], Document("plain.txt", "t9 t8 t7 t6 t5")]
    plan = plan_corpus(source, changed, OPTIONS, out)
    assert [j.document.name for j in plan.todo] == ["plain.txt"]
    list(run_corpus(plan))
    result = corpus_summary(plan)
    assert result.corpus.tokens == inline[0].corpus.tokens - 1  # the new text, not the old
    assert len(out.read_text().splitlines()) == 4  # the old line is kept, not merged


def test_a_pass_that_fails_is_an_error_of_the_run(source, corpus, tmp_path):
    options = type(OPTIONS)(max_tokens=100, sinks=2, window=8, min_match=4)
    plan = plan_corpus(source, corpus, options, tmp_path / "roles.jsonl")
    with pytest.raises(ValueError, match="max_tokens must be between 2 and 64, got 100"):
        list(run_corpus(plan))
    with pytest.raises(ValueError, match="3 of 3 documents are not finished"):
        corpus_summary(plan)


def test_documents_of_a_folder(tmp_path):
    (tmp_path / "b.txt").write_text("t2 t3")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("t1 t2")
    (tmp_path / ".hidden.txt").write_text("t5")
    (tmp_path / "notes.md").write_text("t6")
    assert [d.name for d in read_documents(tmp_path)] == ["b.txt", "sub/a.txt"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_documents(tmp_path / "missing")
    with pytest.raises(ValueError, match="is not a folder"):
        read_documents(tmp_path / "b.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"holds no \.txt files"):
        read_documents(tmp_path / "empty")
    (tmp_path / "sub" / "blank.txt").write_text(" \n")
    with pytest.raises(ValueError, match=r"blank\.txt: expected text, got an empty file"):
        read_documents(tmp_path)


def test_the_plan_refuses_bad_input_before_any_model_loads(corpus, tmp_path, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("headlab.models.load", no_loading)
    out = tmp_path / "roles.jsonl"
    with pytest.raises(FileNotFoundError, match="model must be one of"):
        plan_corpus(ModelSource.of(tmp_path / "no-model"), corpus, OPTIONS, out)
    source = ModelSource.of("smollm2")
    with pytest.raises(ValueError, match="window must be between 1"):
        plan_corpus(source, corpus, type(OPTIONS)(window=0), out)
    with pytest.raises(ValueError, match="at least one document"):
        plan_corpus(source, [], OPTIONS, out)
    with pytest.raises(ValueError, match=r"unique, got plain\.txt twice"):
        plan_corpus(source, [*corpus, corpus[-1]], OPTIONS, out)
