"""Whether a model calls the attention function transformers' registry holds: seen, not assumed.

A family runs on headlab's attention when its model calls ``ALL_ATTENTION_FUNCTIONS[name]`` for
the name in its config (``AttentionInterface``). The class flag ``_supports_attention_backend``
says so for most families, but not for all: in transformers 5.24, 36 model types call the
interface without the flag (StableLM, and the hybrids that mix attention with state-space or
linear-attention layers: Jamba, Bamba, Zamba2, Falcon-H1, Qwen3-Next, ...). So headlab watches:

    model = build_observed(auto_class, config)   the family's class on the meta device (no
                                                  memory), attention set to ``OBSERVER``
    observe(model) -> Observation                 one forward of three tokens under torch's
                                                  FakeTensorMode (shapes only, no arithmetic);
                                                  ``OBSERVER``, registered in AttentionInterface,
                                                  stops it at its first call

Fake tensors carry shapes without values, so the forward costs no memory and little time at any
size (a 7B config in under a second), and transformers skips its checks that read values for
them. Two settings make the forward independent of values: mixtures of experts use transformers'
``batched_mm`` experts (every token through its chosen experts, no ``nonzero``), and a symbolic
shape environment lets a router's data-dependent sizes pass. A forward that ends without a call
means the family computes its attention itself (BLOOM, Falcon, DeBERTa, Mamba, ...); a forward
that fails before any call cannot tell (``Observation.error``), and the caller refuses it.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

#: The ``attn_implementation`` of a model being observed: never one that computes anything.
OBSERVER = "headlab_observe"


class _Called(Exception):
    """Raised by the observer at the first call: the forward has shown what it had to."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__(type(module).__name__)
        self.module = module


def _observer(module: nn.Module, query, key, value, attention_mask, *args, **kwargs):
    raise _Called(module)


def register_observer() -> str:
    """Register ``OBSERVER`` in AttentionInterface and in AttentionMaskInterface (transformers'
    own eager mask: a family that builds its mask through the registry and computes its
    attention itself, as MPT, needs a tensor there); return it. Calling it again is a no-op."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    pairs = ((AttentionInterface, _observer), (AttentionMaskInterface, eager_mask))
    for interface, function in pairs:
        if interface._global_mapping.get(OBSERVER) is not function:
            interface.register(OBSERVER, function)
    return OBSERVER


def picks_its_own_attention(error: BaseException) -> bool:
    """Whether building failed because the family looks the implementation's name up in a
    table of its own attention classes (Falcon, GPT-Neo, GIT): it never calls the registry."""
    return isinstance(error, KeyError) and error.args == (OBSERVER,)


@dataclass(frozen=True)
class Observation:
    """What one observed forward showed: ``module``, the class name of the first module that
    called the attention function (None: none did), or ``error``, the first line of what stopped
    the forward before any call (then nothing is known)."""

    module: str | None = None
    error: str | None = None

    @property
    def calls(self) -> bool:
        return self.module is not None


def build_observed(auto_class, config, trust_remote_code: bool = False) -> nn.Module:
    """``auto_class`` (an Auto class or a model class) built from a copy of ``config`` on the
    meta device, its attention set to ``OBSERVER``. Raises what transformers raises."""
    config = copy.deepcopy(config)  # from_config writes the implementations into the config
    kwargs = {"attn_implementation": register_observer(), "experts_implementation": "batched_mm"}
    if hasattr(auto_class, "_from_config"):  # a model class
        with torch.device("meta"):
            return auto_class._from_config(config, **kwargs)
    with torch.device("meta"):
        return auto_class.from_config(config, trust_remote_code=trust_remote_code, **kwargs)


def observe(model: nn.Module, tokens: int = 3) -> Observation:
    """One forward of ``tokens`` tokens of ``model`` (built by ``build_observed``) on fake
    tensors, stopped at the first attention call."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with (
        FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()),
        torch.no_grad(),
        _quiet("torch._subclasses.fake_tensor"),  # it logs each op it cannot fake
    ):
        ids = torch.ones(1, tokens, dtype=torch.long, device="meta")
        try:
            model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
        except _Called as called:
            return Observation(module=str(called))
        except Exception as error:
            lines = str(error).strip().splitlines()
            return Observation(error=f"{type(error).__name__}: {lines[0] if lines else ''}")
    return Observation()


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
