"""Head sums of many documents: one document gives ``long_text_statistics``' statistics and
roles bit for bit; merged sums are the documents' sums added in order; the corpus means and
roles follow from them and agree with the documents' own means. The three hand-built documents
(a known repeat, the model's own greedy continuation, a short plain text) are described in
tests/corpus_documents.py.
"""

from __future__ import annotations

import json

import pytest
import torch

from corpus_documents import OPTIONS, documents
from headlab.heads.corpus_sums import corpus_result, document_sums, merge_sums
from headlab.heads.long_context import long_text_statistics
from headlab.heads.roles import role
from headlab.results.corpus_roles_result import CorpusRolesResult, DocumentSums, RoleRequest
from headlab.results.json_store import read_result, write_result


@pytest.fixture(scope="module")
def texts(tiny_llama):
    return documents(tiny_llama)


@pytest.fixture(scope="module")
def parts(tiny_llama, texts):
    return {name: document_sums(tiny_llama, text, OPTIONS) for name, text in texts.items()}


def long_text(model, text):
    return long_text_statistics(
        model, text, window=(OPTIONS.sinks, OPTIONS.window), min_match=OPTIONS.min_match
    )


@pytest.mark.parametrize("name", ["repeat", "greedy", "plain"])
def test_one_document_is_long_text_statistics_bit_for_bit(tiny_llama, texts, parts, name):
    one = corpus_result(merge_sums([parts[name]]), OPTIONS)
    expected = long_text(tiny_llama, texts[name])
    assert one.statistics == expected.statistics  # every mean, exactly
    for field in (
        "sinks",
        "window",
        "copy_positions",
        "retrieval",
        "copy_weight",
        "window_error",
        "group_window_error",
        "roles",
    ):
        assert getattr(one.roles, field) == getattr(expected.roles, field), field


def test_the_documents_have_the_repeats_they_were_built_with(parts):
    assert parts["repeat"].n_copy == 14 - OPTIONS.min_match
    greedy = parts["greedy"]
    assert greedy.n_copy > 0 and greedy.n_correct == greedy.n_copy  # its own predictions
    assert sum(map(sum, greedy.retrieval_hits)) > 0
    plain = parts["plain"]
    assert plain.n_copy == 0 and plain.n_window == 0 and "window_error" not in plain.sums
    assert parts["repeat"].n_window == parts["repeat"].n_queries == 52


def test_merged_sums_are_the_documents_sums_added_in_order(parts):
    a, b, c = parts["repeat"], parts["greedy"], parts["plain"]
    total = merge_sums([a, b, c])
    for name, grid in total.sums.items():
        for layer, row in enumerate(grid):
            for head, value in enumerate(row):
                added = [p.sums[name][layer][head] for p in (a, b, c) if name in p.sums]
                want = added[0]
                for v in added[1:]:
                    want = want + v
                assert value == want, (name, layer, head)  # the same float additions
    for count in ("n_queries", "n_prev", "n_window", "n_copy", "n_correct", "text_tokens"):
        assert getattr(total, count) == sum(getattr(p, count) for p in (a, b, c)), count
    assert total.documents == 3 and total.n_window == a.n_queries + b.n_queries
    rows = zip(a.retrieval_hits, b.retrieval_hits, c.retrieval_hits, strict=True)
    hits = [[x + y + z for x, y, z in zip(*row, strict=True)] for row in rows]
    assert total.retrieval_hits == hits


def test_corpus_means_and_roles_agree_with_each_documents_own(tiny_llama, texts, parts):
    order = ["repeat", "greedy", "plain"]
    total = merge_sums([parts[n] for n in order])
    corpus = corpus_result(total, OPTIONS)
    singles = {n: long_text(tiny_llama, texts[n]) for n in order}
    n_tokens = {n: parts[n].n_queries for n in order}
    entropy = torch.tensor(corpus.statistics.metrics["entropy"], dtype=torch.float64)
    weighted = (
        sum(
            torch.tensor(singles[n].statistics.metrics["entropy"], dtype=torch.float64)
            * n_tokens[n]
            for n in order
        )
        / total.n_queries
    )
    torch.testing.assert_close(entropy, weighted, rtol=1e-12, atol=1e-12)
    error = torch.tensor(corpus.roles.window_error, dtype=torch.float64)  # the 2 longer ones
    weighted = (
        sum(
            torch.tensor(singles[n].roles.window_error, dtype=torch.float64) * n_tokens[n]
            for n in order[:2]
        )
        / total.n_window
    )
    torch.testing.assert_close(error, weighted, rtol=1e-12, atol=1e-12)
    hits = sum(
        torch.tensor(singles[n].roles.retrieval, dtype=torch.float64) * parts[n].n_copy
        for n in order[:2]
    )
    torch.testing.assert_close(
        torch.tensor(corpus.roles.retrieval, dtype=torch.float64) * total.n_copy,
        hits,
        rtol=0,
        atol=1e-4,
    )
    copies = parts["repeat"].n_copy + parts["greedy"].n_copy
    assert corpus.roles.copy_positions == total.n_copy == copies
    first = corpus.statistics.metrics["first"]
    for layer, row in enumerate(corpus.roles.roles):
        for head, got in enumerate(row):
            want = role(
                corpus.roles.retrieval[layer][head],
                corpus.roles.copy_weight[layer][head],
                first[layer][head],
                corpus.roles.window_error[layer][head],
            )
            assert got == want
    assert f"(6 of {total.n_queries} tokens) add no window errors" in corpus.roles.note
    assert corpus.corpus.documents == 3 and corpus.statistics.n_texts == 3


def test_sums_survive_json_exactly_and_the_result_file_round_trips(parts, tmp_path):
    part = parts["greedy"]
    assert DocumentSums.from_dict(json.loads(json.dumps(part.to_dict()))) == part
    result = corpus_result(merge_sums(list(parts.values())), OPTIONS)
    write_result(tmp_path / "c.json", result)
    assert read_result(tmp_path / "c.json", CorpusRolesResult) == result


def test_merging_refuses_other_models_and_nothing(parts):
    other = DocumentSums(**{**parts["plain"].to_dict(), "model": "another"})
    with pytest.raises(ValueError, match="document 1: expected sums of"):
        merge_sums([parts["plain"], other])
    with pytest.raises(ValueError, match="at least one document"):
        merge_sums([])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"retrieval_hits": [[1, -1]]}, "retrieval_hits: expected rows of integers >= 0"),
        ({"n_copy": -1}, "sums.n_copy: expected an integer >= 0"),
        ({"first_token": "nothing"}, "sums.first_token: expected one of the names in sums"),
    ],
)
def test_broken_sums_name_their_field(parts, change, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        DocumentSums.from_dict({**parts["repeat"].to_dict(), **change})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (RoleRequest(window=0), "window must be between 1"),
        (RoleRequest(sinks=-1), "sinks must be between 0"),
        (RoleRequest(max_tokens=20, sinks=4, window=16), "not longer than sinks 4 \\+ window 16"),
    ],
)
def test_options_out_of_range_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        options.check()
