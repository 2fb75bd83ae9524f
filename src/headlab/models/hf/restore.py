"""``unchanged_on_failure(model)``: a failed ``attach`` leaves the user's model as it was.

``attach`` changes the model it is given: its attention implementation (on the model's config,
every sub-config and every sub-model's config), each attention module's ``HFAttentionLayer``
attribute and the model's list of them (layer.py), and its training mode (the adapter puts it in
eval mode). Inside the block, any exception puts all of these back before it propagates; on
success they stay.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

from headlab.models.hf.layer import ATTR, MODEL_ATTR

_MISSING = object()


def _configs(model: nn.Module) -> list:
    """Every config object the model's attention implementation lives on (each once)."""
    found: dict[int, object] = {}
    pending = [m.config for m in model.modules() if hasattr(m, "config")]
    while pending:
        config = pending.pop()
        if id(config) in found or not hasattr(config, "_attn_implementation_internal"):
            continue
        found[id(config)] = config
        for key in getattr(config, "sub_configs", {}) or {}:
            sub = getattr(config, key, None)
            if sub is not None:
                pending.append(sub)
    return list(found.values())


@contextmanager
def unchanged_on_failure(model: nn.Module) -> Iterator[None]:
    """Within the block, an exception restores ``model`` (see the module docstring)."""
    implementations = [(c, c._attn_implementation_internal) for c in _configs(model)]
    modules = list(model.modules())
    training = [m.training for m in modules]
    kept = [m.__dict__.get(ATTR, _MISSING) for m in modules]
    listed = model.__dict__.get(MODEL_ATTR, _MISSING)
    try:
        yield
    except BaseException:
        for config, implementation in implementations:
            config._attn_implementation_internal = implementation
        for module, mode, layer in zip(modules, training, kept, strict=True):
            module.training = mode
            _put_back(module, ATTR, layer)
        _put_back(model, MODEL_ATTR, listed)
        raise


def _put_back(module: nn.Module, name: str, value: object) -> None:
    if value is _MISSING:
        module.__dict__.pop(name, None)
    else:
        object.__setattr__(module, name, value)
