"""``prune`` and ``kv-budget`` take one request, built once: ``PruneRequest`` checks its bounds
before any model loads, the library call with keywords builds the same request, and a keyword
beside a request is refused rather than one silently winning."""

from __future__ import annotations

import pytest

from headlab.heads.kv_budget import KVBudgetRequest, kv_budget
from headlab.heads.pruning import prune_by_importance
from headlab.heads.requests import PruneRequest, analysis_request


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"by": "half"}, r"^by must be removal or mask, got 'half'"),
        ({"seed": -1}, r"^seed must be between 0"),
        ({"fractions": (0.5, 1.5)}, r"^fractions must be shares in \[0, 1\]"),
        ({"fractions": ()}, r"^fractions must be shares in \[0, 1\]"),
    ],
)
def test_a_bad_prune_request_is_refused_before_any_model(options, message):
    with pytest.raises(ValueError, match=message):
        PruneRequest(("a b", "c d"), **options)


def test_keywords_build_the_request_a_caller_would():
    made = analysis_request(PruneRequest, ["a b", "c d"], seed=7, by="mask", fractions=None)
    assert made == PruneRequest(("a b", "c d"), seed=7, by="mask")


def test_a_keyword_beside_a_request_is_refused():
    request = PruneRequest(("a b", "c d"))
    with pytest.raises(ValueError, match=r"^seed is the request.s own: pass it in the Prune"):
        prune_by_importance(None, request, seed=3)
    with pytest.raises(ValueError, match=r"^sinks is the request's own: pass it in the KVBudget"):
        kv_budget(None, KVBudgetRequest(), sinks=2)
