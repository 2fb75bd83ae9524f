"""GenerationResult and FamilySupport: the documents ``model generate --json`` and ``model
families --json`` print, read back field by field (a hand-edited document names what is wrong)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headlab.results.family_support import FamilySupport
from headlab.results.generation_result import GenerationResult

heads = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=5)


@given(
    st.text(max_size=20), st.lists(st.integers(0, 50_000), max_size=9), st.text(max_size=20), heads
)
def test_a_generation_survives_json(prompt, ids, text, ablated):
    result = GenerationResult("m", prompt, ids, text, ablated)
    document = json.loads(json.dumps(result.to_dict()))
    assert ("ablated" in document) == bool(ablated)
    assert GenerationResult.from_dict(document) == result


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"new_ids": [3, -1]}, r"model-generate.new_ids\[1\]: expected a token id"),
        ({"new_ids": [3, True]}, r"new_ids\[1\]: expected a token id"),
        ({"ablated": [[1]]}, r"model-generate.ablated\[0\]: expected \[layer, head\], got \[1\]"),
        ({"text": 5}, r"model-generate.text: expected a string, got 5"),
    ],
)
def test_a_hand_edited_generation_is_named(edit, message):
    document = {**GenerationResult("m", "p", [1, 2], "t", [(0, 1)]).to_dict(), **edit}
    with pytest.raises(ValueError, match=message):
        GenerationResult.from_dict(document)


def test_family_support_survives_json_and_names_what_is_wrong():
    support = FamilySupport(["llama", "stablelm"], {"t5": "encoder-decoder"})
    assert FamilySupport.from_dict(json.loads(json.dumps(support.to_dict()))) == support
    with pytest.raises(ValueError, match=r"model-families.families\[1\]: expected a family name"):
        FamilySupport.from_dict({"families": ["llama", ""], "not_observed": {}})
    with pytest.raises(ValueError, match=r"model-families.not_observed.t5: expected a reason"):
        FamilySupport.from_dict({"families": [], "not_observed": {"t5": 3}})
