"""What headlab's attention does with the keywords a model's ``**kwargs`` carry down: training
calls (``labels``, ``shift_labels``, the ``Trainer``'s ``num_items_in_batch``) run as with
transformers' own attention; only a keyword that would change the math and that headlab does not
implement is refused, by name; and every keyword transformers' sources pass or read is decided."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
from hf_families import FAMILIES, VOCAB, build, padded

from headlab.models.hf import attach
from headlab.models.hf.attention_function import IMPLEMENTED, PASSIVE, REFUSED, headlab_attention

DECODERS = [name for name, family in FAMILIES.items() if family.causal]


def _shifted(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(labels, shift_labels) (batch, pos): padding ignored (-100); shift_labels[:, i] is the
    token after position i (the last position has none)."""
    labels = ids.masked_fill(mask == 0, -100)
    shift = torch.full_like(labels, -100)
    shift[:, :-1] = labels[:, 1:]
    return labels, shift


@pytest.mark.parametrize("name", DECODERS)
def test_a_training_call_runs_in_every_causal_family_with_eagers_loss(name, hf_loaded, hf_eager):
    """labels with shift_labels, and num_items_in_batch: the loss equals transformers' eager
    attention's on the same checkpoint (a right-padded batch)."""
    ids, mask = padded(4)
    labels, shift = _shifted(ids, mask)
    count = torch.tensor(int((shift != -100).sum()) + 3)  # as a Trainer accumulating steps
    calls = [
        {"labels": labels, "shift_labels": shift},
        {"labels": labels, "num_items_in_batch": count},
    ]
    for extra in calls:
        with torch.no_grad():
            expected = hf_eager(name)(input_ids=ids, attention_mask=mask, **extra).loss
            got = hf_loaded(name).model(input_ids=ids, attention_mask=mask, **extra).loss
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def _losses_after_training(attention: str, folder: Path) -> tuple[list[float], dict]:
    """A tiny Llama fine-tuned for 4 steps (2 batches of 3 accumulated per step, so that the
    Trainer passes num_items_in_batch) by transformers' Trainer on CPU: (each batch's loss, the
    weights after training)."""
    from transformers import Trainer, TrainingArguments

    model = build("llama", seed=11)
    if attention == "headlab":
        model = attach(model).model
    else:
        model.set_attn_implementation(attention)
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(1, VOCAB, (4, 9), generator=generator).repeat(6, 1)  # learnable
    rows = [
        {"input_ids": row, "labels": row, "attention_mask": torch.ones_like(row)} for row in ids
    ]
    losses: list[float] = []

    class Recording(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            losses.append(float(loss.detach()))
            return loss

    arguments = TrainingArguments(
        output_dir=str(folder),
        per_device_train_batch_size=3,
        gradient_accumulation_steps=2,
        max_steps=4,
        learning_rate=2e-2,
        seed=0,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        log_level="error",
        dataloader_num_workers=0,
    )
    Recording(model=model, args=arguments, train_dataset=rows).train()
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_fine_tuning_with_the_trainer_gives_sdpas_losses(tmp_path):
    """Training through headlab's attention follows the same path as through SDPA: the same
    loss at every step (1e-5), the same weights after the last."""
    expected, expected_weights = _losses_after_training("sdpa", tmp_path / "sdpa")
    got, got_weights = _losses_after_training("headlab", tmp_path / "headlab")
    assert len(got) == len(expected) == 8
    assert expected[-1] < expected[0]  # it trained
    torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), atol=1e-5, rtol=1e-5)
    assert list(tmp_path.rglob("*.safetensors")) == []  # nothing saved
    for key, value in expected_weights.items():
        torch.testing.assert_close(got_weights[key], value, atol=1e-5, rtol=1e-4)


class _Module(torch.nn.Module):
    is_causal = True


@pytest.mark.parametrize("keyword", sorted(REFUSED))
def test_a_keyword_that_would_change_the_math_is_refused_by_name(keyword):
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match=rf"_Module passed {keyword} .*does not implement"):
        headlab_attention(_Module(), q, q, q, None, **{keyword: torch.zeros(1)})
    out, _ = headlab_attention(_Module(), q, q, q, None, **{keyword: None})  # absent: runs
    assert out.shape == (1, 3, 2, 4)


def test_keywords_that_cannot_change_the_attention_change_nothing():
    """Any other keyword (a loss's, the Trainer's, a made-up one) leaves the output as it is."""
    generator = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=generator) for _ in range(3))
    plain, _ = headlab_attention(_Module(), q, k, v, None, scaling=0.3)
    extra = {
        "labels": torch.ones(2, 5, dtype=torch.long),
        "shift_labels": torch.ones(2, 5, dtype=torch.long),
        "num_items_in_batch": torch.tensor(9),
        "something_new": "x",
        **{name: torch.ones(1) for name in PASSIVE},
    }
    loaded, _ = headlab_attention(_Module(), q, k, v, None, scaling=0.3, **extra)
    torch.testing.assert_close(loaded, plain, atol=0, rtol=0)


# ---------------------------------------------------------------- transformers' sources
def _call_text(source: str, start: int) -> str:
    """The text of the call whose "(" is at ``start`` (parentheses matched; strings in calls of
    attention functions hold no parentheses)."""
    depth = 0
    for end in range(start, len(source)):
        depth += {"(": 1, ")": -1}.get(source[end], 0)
        if depth == 0:
            return source[start : end + 1]
    raise AssertionError("unbalanced call")


def _transformers_keywords() -> dict[str, set[str]]:
    """keyword -> where transformers passes it to an attention function (each family's call
    ``attention_interface(...)``) or where an attention function reads it (a parameter of a
    registered function or of a family's ``*_attention_forward``, or ``kwargs.get(...)``)."""
    import inspect

    import transformers
    from transformers import AttentionInterface

    found: dict[str, set[str]] = {}
    root = Path(transformers.__file__).parent
    calls = re.compile(r"attention_interface\(")
    defs = re.compile(r"^def (\w*attention_forward)\(", re.M)
    top_level = re.compile(r"\n(?=\S)")
    reads = re.compile(r"\bkwargs(?:\.get\(|\[)\s*[\"'](\w+)[\"']")
    sources = [(p.parent.name, p.read_text()) for p in root.glob("models/*/modeling_*.py")]
    for fn in AttentionInterface._global_mapping.values():
        sources.append((fn.__module__, inspect.getsource(fn)))
    for where, source in sources:
        for match in calls.finditer(source):
            call = ast.parse(_call_text(source, match.end() - 1).join(["f", ""]), mode="eval")
            for keyword in call.body.keywords:
                if keyword.arg is not None:
                    found.setdefault(keyword.arg, set()).add(where)
        for match in defs.finditer(source):
            header = _call_text(source, match.end() - 1)
            names = re.findall(r"(?:^|[(,])\s*(\w+)\s*(?=[:=,)])", header)
            start = match.end() + len(header)
            end = top_level.search(source, start)  # the next unindented line ends the body
            body = source[start : end.start() if end else len(source)]
            for name in names[5:] + reads.findall(body):
                found.setdefault(name, set()).add(where)
    return found


def test_every_keyword_in_transformers_sources_is_decided():
    """A keyword a family passes to its attention, or one transformers' attention functions
    read, is implemented, passive (with a reason) or refused: a new transformers with a new
    keyword fails here until it is decided."""
    found = _transformers_keywords()
    assert {"scaling", "dropout", "softcap", "s_aux", "sliding_window"} <= found.keys()
    positional = {"module", "query", "key", "value", "attention_mask", "kwargs"}
    undecided = {
        k: sorted(w)[:3]
        for k, w in found.items()
        if k not in IMPLEMENTED | PASSIVE.keys() | REFUSED.keys() | positional
    }
    assert undecided == {}
    assert not IMPLEMENTED & (PASSIVE.keys() | REFUSED.keys())
    assert not PASSIVE.keys() & REFUSED.keys()
