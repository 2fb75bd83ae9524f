"""``outline``: what a model gives, read from its config before any weight loads, equals what the
loaded model says of itself (``load`` is the reference), and ``require_next_token_logits``
refuses a model without a language-model head in one line naming what it lacks."""

from __future__ import annotations

import pytest

from headlab.models.interface import (
    ModelOutline,
    gives_next_token_logits,
    require_next_token_logits,
)
from headlab.models.outline import outline


def _weights_never_read(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("weights were read")

    monkeypatch.setattr("transformers.PreTrainedModel.from_pretrained", refuse)


@pytest.mark.parametrize("folder", ["tiny_dir", "tiny_llama_dir"])
def test_the_outline_is_what_the_loaded_model_says(request, monkeypatch, folder):
    from headlab.models import load

    path = request.getfixturevalue(folder)
    with monkeypatch.context() as patched:
        _weights_never_read(patched)
        found = outline(path)
    model = load(path)
    assert found == ModelOutline(model.name, model.causal, model.objective_kind)
    assert gives_next_token_logits(found) == gives_next_token_logits(model) == model.causal


@pytest.mark.model
def test_minilm_is_outlined_as_an_encoder_without_loading(monkeypatch):
    _weights_never_read(monkeypatch)
    found = outline("minilm")
    assert found == ModelOutline("all-MiniLM-L6-v2", False, "contrastive")
    assert outline(None) == found  # the default model of load
    with pytest.raises(ValueError) as refused:
        require_next_token_logits(found, "the induction task")
    assert str(refused.value) == (
        "all-MiniLM-L6-v2 is an encoder without a language-model head; "
        "the induction task needs next-token logits"
    )


def test_an_unknown_source_is_refused_as_load_refuses_it(tmp_path):
    from headlab.models import load

    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as by_load:
        load(missing)
    with pytest.raises(FileNotFoundError) as by_outline:
        outline(missing)
    assert str(by_outline.value) == str(by_load.value)


def test_a_language_model_passes(tiny_llama_dir):
    require_next_token_logits(outline(tiny_llama_dir), "the induction task")  # no error


def test_circuits_refuse_an_encoder_by_its_interface(tiny):
    from headlab.circuits.run import CircuitRequest, prepare
    from headlab.circuits.tasks import TaskRequest

    with pytest.raises(
        ValueError,
        match=r"is an encoder without a language-model head; the "
        r"copy task needs next-token logits$",
    ):
        prepare(tiny, CircuitRequest(TaskRequest("copy")))
