"""The typed requests check themselves before any model loads, each bound written once; the CLI
says the same refusal with its flags in place of the fields (``cli.parsing.as_flags``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_run import run
from headlab.analysis.expressivity import ExpressivityRequest
from headlab.cli.parsing import as_flags
from headlab.experiments.specialisation import SpecialisationRequest
from headlab.heads.kv_budget import MAX_SEEDS, MIN_SEEDS, KVBudgetRequest
from headlab.heads.requests import MAX_NEW_TOKENS, MAX_TEXTS, CorpusRequest, GenerationRequest
from headlab.limits import check_sizes
from headlab.results.corpus_roles_result import RoleRequest


@given(st.integers(min_value=-3, max_value=MAX_TEXTS + 3))
def test_corpus_request_accepts_exactly_the_counts_in_range(n):
    if 1 <= n <= MAX_TEXTS:
        assert CorpusRequest(n_texts=n).n_texts == n
    else:
        with pytest.raises(ValueError, match=f"n_texts must be between 1 and {MAX_TEXTS}, got {n}"):
            CorpusRequest(n_texts=n)


@given(st.integers(min_value=2, max_value=4000), st.integers(min_value=2, max_value=600))
def test_the_length_is_the_default_or_the_asked_within_the_positions(positions, asked):
    assert CorpusRequest().length_for(positions) == min(128, positions)
    request = CorpusRequest(max_length=asked)
    if asked <= positions:
        assert request.length_for(positions) == asked
    else:
        message = f"max_length must be between 2 and {positions}, got {asked}"
        with pytest.raises(ValueError, match=message):
            request.length_for(positions)


@given(st.integers(min_value=2, max_value=5000), st.none() | st.integers(2, 6000))
def test_the_long_texts_length_is_the_asked_or_the_whole_context(positions, asked):
    """One bound (the model's positions) for ``model heads --max-tokens`` and ``kv-budget``."""
    options = RoleRequest(asked, sinks=0, window=1)
    request = KVBudgetRequest(n_tokens=asked, sinks=0, window=1)
    if asked is not None and asked > positions:
        for name, call in (
            ("max_tokens", lambda: options.tokens_for(positions)),
            ("n_tokens", lambda: request.length_for(positions)),
        ):
            with pytest.raises(ValueError, match=f"{name} must be between 2 and {positions}"):
                call()
    else:
        expected = positions if asked is None else asked
        assert options.tokens_for(positions) == request.length_for(positions) == expected


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (lambda: CorpusRequest(max_length=1), "max_length must be between 2"),
        (lambda: GenerationRequest("a", MAX_NEW_TOKENS + 1), "max_new_tokens must be between 1"),
        (lambda: GenerationRequest("", 3), "PROMPT must be a text to continue"),
        (lambda: KVBudgetRequest(seeds=MAX_SEEDS + 1), f"seeds must be between 3 and {MAX_SEEDS}"),
        (lambda: KVBudgetRequest(seeds=MIN_SEEDS - 1), "seeds must be between 3"),
        (lambda: KVBudgetRequest(budgets=(1.5,)), "budgets must be shares in"),
        (lambda: KVBudgetRequest(n_tokens=9, sinks=4, window=8), "n_tokens=9 is not longer"),
        (lambda: KVBudgetRequest(kv_saved=(9,), n_tokens=40, window=8), "out of reach"),
        (lambda: KVBudgetRequest(retrieval_k=0), "retrieval_k must be between 1"),
        (lambda: ExpressivityRequest(seq_lens=(513,)), "seq_lens must be between 1 and 512"),
        (lambda: ExpressivityRequest(targets=1001), "targets must be between 1 and 1000"),
        (lambda: ExpressivityRequest(heads=33), "heads must be between 1 and 32"),
        (lambda: SpecialisationRequest(heads=(128,)), "heads must be between 1 and 64"),
        (lambda: SpecialisationRequest(eval_every=0), "eval_every must be between 1"),
    ],
)
def test_each_request_refuses_naming_its_field(request_, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        request_()


def test_the_edges_of_each_bound_are_accepted():
    GenerationRequest("", MAX_NEW_TOKENS, chat=True)
    KVBudgetRequest(seeds=MAX_SEEDS, n_tokens=13, sinks=4, window=8, retrieval_k=1)
    ExpressivityRequest(seq_lens=(512,), head_dims=(1, 512), targets=1000, heads=32)
    SpecialisationRequest(heads=(64,), d_model=64)
    assert check_sizes("x", [1, 2]) == (1, 2)
    with pytest.raises(ValueError, match="x must list at least one integer, got none"):
        check_sizes("x", [])


@pytest.mark.parametrize(
    ("argv", "make", "flags"),
    [
        (
            ["model", "kv-budget", "--model", "nowhere", "--seeds", str(MAX_SEEDS + 1)],
            lambda: KVBudgetRequest(seeds=MAX_SEEDS + 1),
            {"seeds": "--seeds"},
        ),
        (
            ["model", "generate", "x", "--max-new-tokens", "0"],
            lambda: GenerationRequest("x", 0),
            {"max_new_tokens": "--max-new-tokens"},
        ),
        (
            ["model", "heads", "--model", "nowhere", "--n-texts", "0"],
            lambda: CorpusRequest(n_texts=0),
            {"n_texts": "--n-texts"},
        ),
        (
            ["expressivity", "--model", "none", "--targets", "1001"],
            lambda: ExpressivityRequest(targets=1001),
            {"targets": "--targets"},
        ),
        (
            ["specialisation", "--steps", str(10**6 + 1)],
            lambda: SpecialisationRequest(steps=10**6 + 1),
            {"steps": "--steps"},
        ),
    ],
    ids=["kv-budget seeds", "generate", "heads", "expressivity", "specialisation"],
)
def test_the_cli_says_the_library_refusal_with_its_flags(argv, make, flags, capsys, tmp_path):
    """One bound, two doors: the same refusal, before any model loads (``nowhere`` is no
    model: loading it would be another error)."""
    with pytest.raises(ValueError) as refused:
        make()
    code, out, err = run(
        [*argv, "--out", str(tmp_path / "o.json")]
        if argv[0] != "model" or argv[1] != "generate"
        else argv,
        capsys,
    )
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err == f"headlab: error: {as_flags(str(refused.value), flags)}\n"
