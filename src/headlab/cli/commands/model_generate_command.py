"""``headlab model generate``: a decoder's greedy continuation, with heads ablated or not."""

from __future__ import annotations

from pathlib import Path

import typer

from headlab.cli import model_kinds as kinds
from headlab.cli.model_options import AS_JSON
from headlab.cli.model_source import (
    ModelChoice,
    model_source,
    open_model,
    require_next_token_logits,
)
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
        None,
        "--ablate",
        help="Heads zeroed in every step: LAYER.HEAD or a K/V group "
        "LAYER.gGROUP (LAYER.kvGROUP is read too).",
    ),
    as_json: bool = AS_JSON,
    audio: Path | None = kinds.AUDIO,
    source_text: list[str] | None = kinds.SOURCE_TEXT,
    attention: str | None = kinds.ATTENTION,
) -> None:
    """Greedy continuation of PROMPT by a decoder (no sampling: the same output every time).

    An encoder-decoder writes from its source (--source-text, or --audio for Whisper), PROMPT
    the start of its output ("" for none).
    """
    if kinds.asked(None, audio, source_text, None) or kinds.declared(source)[0] != "text":
        if chat:
            raise ValueError("--chat is for decoders with a chat template")
        inputs = kinds.read_inputs(None, audio, source_text, None, prompt)
        kinds.kind_generate(source, inputs, max_new_tokens, attention, heads, as_json)
        return
    from headlab.heads.ablation import group_heads, parse_ablation
    from headlab.heads.generation import generate_text
    from headlab.heads.requests import GenerationRequest

    with flags("max_new_tokens"):  # before the model loads (SmolLM2: seconds to load)
        request = GenerationRequest(prompt, max_new_tokens, chat)
    chosen, groups = [], []
    if heads is not None:
        with flags(heads="--ablate"):
            chosen, groups = parse_ablation(heads)
    require_next_token_logits(source, "generating text", quiet=as_json)
    loaded = open_model(source, quiet=as_json, kind_checked=True)
    with flags("model", heads="--ablate"):
        if groups:
            chosen = [*chosen, *group_heads(loaded, groups)]
        with progress("generating: tokens", max_new_tokens, quiet=as_json) as update:
            result = generate_text(loaded, request, chosen, on_token=update)
    if as_json:
        print_json(result.to_dict(), ensure_ascii=False)
        return
    print(result.text)  # and a newline: the shell's prompt starts on a line of its own


def register(group: typer.Typer) -> None:
    """Add this command to the ``model`` group (``headlab.cli.app``)."""
    group.command("generate")(generate)
