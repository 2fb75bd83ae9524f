"""``headlab model generate``: a decoder's greedy continuation, with heads ablated or not."""

from __future__ import annotations

import contextlib

import typer

from headlab.cli.model_options import AS_JSON
from headlab.cli.model_source import ModelChoice, model_source, open_model
from headlab.cli.outputs import print_json
from headlab.cli.parsing import flags
from headlab.cli.progress import progress


@model_source(default="smollm2", help="smollm2 (default), a decoder's path or a hub id.")
def generate(
    prompt: str = typer.Argument(..., help="The text to continue."),
    source: ModelChoice = None,  # the model-source options (``model_source``)
    max_new_tokens: int = typer.Option(32, "--max-new-tokens", help="Tokens to generate."),
    chat: bool = typer.Option(False, "--chat", help="Wrap the prompt in the chat template."),
    heads: str | None = typer.Option(
        None, "--ablate", help="Heads zeroed in every step: LAYER.HEAD or LAYER.kvGROUP."
    ),
    as_json: bool = AS_JSON,
) -> None:
    """Greedy continuation of PROMPT by a decoder (no sampling: the same output every time)."""
    from headlab.heads.ablation import ablated, check_heads, group_heads, parse_ablation
    from headlab.heads.requests import GenerationRequest

    with flags("max_new_tokens"):  # before the model loads (SmolLM2: seconds to load)
        request = GenerationRequest(prompt, max_new_tokens, chat)
    chosen, groups = [], []
    if heads is not None:
        with flags(heads="--ablate"):
            chosen, groups = parse_ablation(heads)
    from headlab.models import LanguageModel

    loaded = open_model(source, quiet=as_json)
    if not isinstance(loaded, LanguageModel):
        raise ValueError(f"--model must be a language model (it generates), got {loaded.name}")
    text = loaded.chat_prompt(prompt) if request.chat else prompt
    if heads is not None:
        with flags(heads="--ablate"):
            chosen = sorted({*chosen, *group_heads(loaded, groups)})
            check_heads(loaded, chosen)
    with (
        ablated(loaded, chosen) if chosen else contextlib.nullcontext(),
        progress("generating: tokens", max_new_tokens, quiet=as_json) as update,
    ):
        new = loaded.generate(text, request.max_new_tokens, on_token=update)
    shown = loaded.decode(new, skip_special=True)  # no <|im_end|>: new_ids keep every token
    if as_json:
        doc = {"model": loaded.name, "prompt": prompt, "new_ids": new, "text": shown}
        if chosen:
            doc["ablated"] = [list(h) for h in chosen]
        print_json(doc, ensure_ascii=False)
        return
    print(shown)  # and a newline: the shell's prompt starts on a line of its own


def register(group: typer.Typer) -> None:
    """Add this command to the ``model`` group (``headlab.cli.app``)."""
    group.command("generate")(generate)
