"""The transformers route: headlab's attention registered in transformers, inside any model whose
family calls its attention through ``AttentionInterface``.

``attach(model, tokenizer=None)`` wraps a ``PreTrainedModel`` already in memory;
``load_transformers(source)`` loads a checkpoint folder, a GGUF file or a cached hub id. Both give
a ``TransformersModel``. See docs/transformers.md.
"""

from __future__ import annotations

import torch

from headlab.models.hf.adapter import TransformersModel
from headlab.models.hf.families import supported_families
from headlab.models.hf.registry import NAME, register
from headlab.models.hf.requirements import require_transformers

__all__ = [
    "NAME",
    "TransformersModel",
    "attach",
    "load_transformers",
    "register",
    "supported_families",
]


def _causal(model: torch.nn.Module) -> bool:
    return any(getattr(m, "is_causal", False) is True for m in model.modules())


def attach(
    model, tokenizer=None, name: str | None = None, *, announce: bool = True
) -> TransformersModel:
    """Wrap a transformers ``PreTrainedModel`` in memory: its attention switches to headlab's
    (``model.set_attn_implementation("headlab")``, on this model object only; weights are not
    copied; the same outputs as eager attention) and each attention module gets its
    ``HFAttentionLayer`` (one short observed forward). The switch is said once per model object
    with an ``AttentionSwitched`` notice (``headlab.notices``) naming the implementation it
    replaced and how to switch back; ``announce=False`` leaves it unsaid (a model headlab built
    itself). Attaching the same model again gives a second handle on the same layers: an
    intervention set through one acts in the other. Raises ValueError for a family whose
    attention does not go through the interface, an encoder-decoder or a model that does not
    read text (runnable.py), and (one line naming what to install) without transformers. When
    attaching fails at any point, the model is left as it was (restore.py)."""
    require_transformers("headlab.attach")
    from transformers import PreTrainedModel

    from headlab.models.hf.restore import unchanged_on_failure
    from headlab.models.hf.runnable import refuse_unrunnable

    if not isinstance(model, PreTrainedModel):
        raise ValueError(f"expected a transformers PreTrainedModel, got {type(model).__name__}")
    refuse_unrunnable(type(model), model.config, name or type(model).__name__)
    label = name or getattr(model.config, "name_or_path", "") or type(model).__name__
    before = getattr(model.config, "_attn_implementation", None)
    with unchanged_on_failure(model):  # a failed attach leaves the user's model as it was
        model.set_attn_implementation(register())
        wrapped = TransformersModel(label, model, tokenizer, causal=_causal(model))
    if announce and before != NAME:
        _announce(label, before)
    return wrapped


def _announce(label: str, before: str | None) -> None:
    import warnings

    from headlab.notices import AttentionSwitched

    back = f'model.set_attn_implementation("{before}")' if before else "reload the model"
    warnings.warn(
        f"headlab.attach switched {label}'s attention from {before or 'its default'} to "
        f"headlab's (same outputs as eager attention; needed for the head analyses); {back} "
        "switches it back",
        AttentionSwitched,
        stacklevel=3,
    )


def load_transformers(
    source,
    *,
    download: bool = False,
    trust_remote_code: bool = False,
    dtype: torch.dtype = torch.float32,
    reads_text: bool = False,
) -> TransformersModel:
    """A checkpoint (folder, .gguf file, or hub id in the local cache; fetched only with
    ``download=True``) loaded by transformers on headlab's attention. See loader.py for what is
    refused, before any weight is read; without transformers, one line naming what to install."""
    require_transformers()
    from headlab.models.hf.checkpoint import missing_tokenizer
    from headlab.models.hf.layer import keep_all
    from headlab.models.hf.loader import load_pretrained
    from headlab.models.hf.probe_cache import probed_layers
    from headlab.models.hf.runnable import model_family
    from headlab.models.pooling import read_pooling_config

    model, tokenizer, checkpoint = load_pretrained(
        source,
        download=download,
        trust_remote_code=trust_remote_code,
        dtype=dtype,
        reads_text=reads_text,
    )
    causal = _causal(model)
    keep_all(model, probed_layers(model, model_family(model)))  # the adapter finds them there
    wrapped = TransformersModel(checkpoint.name, model, tokenizer, causal=causal)
    if tokenizer is None:  # said in the words of a command too, which has no attach
        wrapped.no_tokenizer = missing_tokenizer(checkpoint) or "its checkpoint has none"
    if not causal and checkpoint.gguf is None:
        wrapped.pooling = read_pooling_config(checkpoint.folder, wrapped.max_positions)
    return wrapped
