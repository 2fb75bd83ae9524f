"""A decoder's greedy continuation of a prompt, with heads ablated in every step or not."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from headlab.heads.ablation import ablated
from headlab.heads.requests import GenerationRequest
from headlab.models.interface import LanguageModel
from headlab.results.ablation_result import Head
from headlab.results.generation_result import GenerationResult


def generate_text(
    model: LanguageModel,
    request: GenerationRequest,
    heads: Sequence[Head] = (),
    on_token: Callable[[int], None] | None = None,
) -> GenerationResult:
    """``request.max_new_tokens`` greedy tokens after ``request.prompt`` (in the chat template
    when ``request.chat``), with ``heads`` zeroed before W_O in every step; ``on_token(done)``
    after each token. ValueError for a model that is not a language model or a head out of
    range."""
    if not isinstance(model, LanguageModel):
        raise ValueError(f"model must be a language model (it generates), got {model.name}")
    text = model.chat_prompt(request.prompt) if request.chat else request.prompt
    chosen = sorted(set(heads))
    with ablated(model, chosen) if chosen else contextlib.nullcontext():
        new = model.generate(text, request.max_new_tokens, on_token=on_token)
    shown = model.decode(new, skip_special=True)  # no <|im_end|>: new_ids keep every token
    return GenerationResult(model.name, request.prompt, list(new), shown, chosen)
