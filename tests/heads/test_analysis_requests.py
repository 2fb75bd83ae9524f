"""The requests of ``head_importance``, ``ablation_effect`` and ``collapse_heads`` check their
bounds once, before any model loads: the library call with keywords and the CLI's flags say the
same refusal, and a request gives what the same keywords give."""

from __future__ import annotations

import math
import random
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from cli_run import run
from headlab.cli.parsing import as_flags
from headlab.heads import collapse_heads, head_importance
from headlab.heads.ablation import ablation_effect
from headlab.heads.requests import (
    AblationRequest,
    CollapseRequest,
    ImportanceRequest,
    analysis_request,
)

NUMBERS = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-5, 5)


@given(NUMBERS)
def test_the_temperature_is_any_finite_number_above_zero(temperature):
    if math.isfinite(temperature) and temperature > 0:
        assert ImportanceRequest(temperature=temperature).temperature == temperature
    else:
        with pytest.raises(ValueError, match=r"^temperature must be a finite number > 0, got"):
            ImportanceRequest(temperature=temperature)


@given(st.integers(-3, 40))
def test_each_batch_size_bound_is_the_request_own(size):
    """Importance and ablation pair texts within a batch (at least 2), collapse does not."""
    for kind, low, extra in (
        (ImportanceRequest, 2, {}),
        (CollapseRequest, 1, {}),
        (AblationRequest, 2, {"heads": ((0, 1),)}),
    ):
        if size >= low:
            assert kind(batch_size=size, **extra).batch_size == size
        else:
            with pytest.raises(ValueError, match=f"^batch_size must be between {low} and"):
                kind(batch_size=size, **extra)


@given(st.text(max_size=9) | st.sampled_from(["zero", "mean", "resample"]))
def test_the_ablation_mode_is_one_of_three(mode):
    if mode in ("zero", "mean", "resample"):
        assert AblationRequest(((0, 0),), mode=mode).mode == mode
    else:
        with pytest.raises(ValueError, match=r"^mode must be zero, mean or resample, got"):
            AblationRequest(((0, 0),), mode=mode)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: AblationRequest(), "name at least one head to ablate"),
        (lambda: AblationRequest(((0, -1),)), "heads must be between 0 and"),
        (lambda: AblationRequest(((0, 1, 2),)), "heads must be (layer, index) pairs"),
        (lambda: AblationRequest(kv_groups=((-1, 0),)), "heads must be between 0 and"),
        (lambda: CollapseRequest(head_counts=()), "head_counts must list at least one"),
        (lambda: CollapseRequest(head_counts=(2, 0)), "head_counts must be between 1 and"),
        (lambda: CollapseRequest(per_layer_heads=0), "per_layer_heads must be between 1"),
        (lambda: ImportanceRequest("a text"), "corpus must be a CorpusRequest or a list"),
    ],
)
def test_each_request_refuses_naming_its_field(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


@pytest.mark.parametrize(
    ("argv", "make", "flags"),
    [
        (
            ["importance", "--temperature", "0"],
            lambda: ImportanceRequest(temperature=0.0),
            {"temperature": "--temperature"},
        ),
        (
            ["ablate", "--ablate", "1.0", "--mode", "half"],
            lambda: AblationRequest(((1, 0),), mode="half"),
            {"mode": "--mode"},
        ),
        (
            ["collapse", "--heads", "3,0"],
            lambda: CollapseRequest(head_counts=(3, 0)),
            {"head_counts": "--heads"},
        ),
    ],
    ids=["importance", "ablate", "collapse"],
)
def test_the_cli_says_the_request_refusal_with_its_flags(argv, make, flags, capsys, tmp_path):
    """One bound, two doors, before any model loads (``nowhere`` is no model)."""
    with pytest.raises(ValueError) as refused:
        make()
    out = str(tmp_path / "o.json")
    code, printed, err = run(["model", *argv, "--model", "nowhere", "--out", out], capsys)
    assert code == 2 and printed == "" and err.count("\n") == 1
    assert err == f"headlab: error: {as_flags(str(refused.value), flags)}\n"


WORDS = [f"t{i}" for i in range(1, 97)]
LINES = [" ".join(random.Random(i).choices(WORDS, k=7 + i % 5)) for i in range(7)]

# (request, the same analysis with keywords, with defaults): each option away from its default
SAME = {
    "importance": (
        lambda m: head_importance(m, ImportanceRequest(LINES, 0.3, 3), max_length=11),
        lambda m: head_importance(m, LINES, temperature=0.3, batch_size=3, max_length=11),
        lambda m: head_importance(m, LINES, max_length=11),
    ),
    "ablation": (
        lambda m: ablation_effect(
            m, AblationRequest(((1, 2),), ((0, 1),), "mean", LINES, 3), max_length=11
        ),
        lambda m: ablation_effect(
            m, LINES, [(1, 2)], kv_groups=[(0, 1)], mode="mean", batch_size=3, max_length=11
        ),
        lambda m: ablation_effect(m, LINES, [(1, 2)], kv_groups=[(0, 1)], max_length=11),
    ),
    "collapse": (
        lambda m: collapse_heads(m, CollapseRequest(LINES, (3,), 3, 5), max_length=11),
        lambda m: collapse_heads(m, LINES, (3,), per_layer_heads=3, batch_size=5, max_length=11),
        lambda m: collapse_heads(m, LINES, (3,), max_length=11),
    ),
}


@pytest.mark.parametrize("name", list(SAME))
def test_a_request_gives_what_its_keywords_give(tiny_llama, name):
    requested, keywords, defaults = SAME[name]
    torch.manual_seed(0)
    expected = keywords(tiny_llama).to_dict()
    torch.manual_seed(0)
    assert requested(tiny_llama).to_dict() == expected
    torch.manual_seed(0)
    assert defaults(tiny_llama).to_dict() != expected  # the options reached the analysis


def test_an_option_beside_a_request_is_refused():
    request = ImportanceRequest(LINES)
    assert analysis_request(ImportanceRequest, request) is request
    with pytest.raises(ValueError, match=r"^temperature is the request's own: pass it in the"):
        analysis_request(ImportanceRequest, request, temperature=0.5)
    built = analysis_request(CollapseRequest, LINES, head_counts=[1, 3], batch_size=None)
    assert built == CollapseRequest(tuple(LINES), (1, 3))
