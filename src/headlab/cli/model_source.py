"""The one group of model-source options (``--model``, ``--model-dir``, ``--backend``,
``--download``, ``--trust-remote-code``), written once and added to a command by a decorator.

A command that takes a model declares one parameter ``source: ModelChoice`` and is decorated
with ``model_source(...)``: typer sees the options in its place, and the command receives them
as one ``ModelChoice``, which ``open_model`` loads (``headlab.models.load``). The options differ
between commands only where the decorator's arguments say so: the default model, its help,
whether a folder may be given as ``--model-dir``, and whether ``--backend`` (retired, accepted
for old scripts) is there.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import typer

from headlab.cli.parsing import flags
from headlab.cli.progress import progress

MODEL_HELP = (
    "minilm (default), smollm2, a path (.gguf, a transformers checkpoint folder) or a hub id."
)


@dataclass(frozen=True)
class ModelChoice:
    """The model-source options as one value: ``model`` or ``model_dir`` (at most one),
    ``backend`` (retired: a one-line notice), ``download``, ``trust_remote_code``."""

    model: str | None = None
    model_dir: Path | None = None
    backend: str | None = None
    download: bool = False
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        if self.model is not None and self.model_dir is not None:
            raise ValueError("pass --model or --model-dir, not both")

    @property
    def name_or_path(self) -> str | Path | None:
        """What ``headlab.models.load`` takes (None: its default model)."""
        return self.model if self.model_dir is None else self.model_dir


def hub_access(download: bool) -> None:
    """The Hugging Face hub stays offline unless --download (before anything loads)."""
    if not download:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")


def declare_model_inputs(choice: ModelChoice) -> None:
    """The model's files and folders (the folder or file given, a packaged model's, a hub id's
    folder in the hub cache, headlab's cache of GGUF conversions) are the command's inputs: no
    output replaces one or is written inside one, not even with --force. Found only when an
    output is checked (``headlab.models.load.opened_paths``), so a refusal of another option
    imports nothing."""
    from headlab.results.output_policy import declare_inputs

    def opened() -> tuple[tuple[Path, bool], ...]:
        from headlab.models.load import opened_paths

        return opened_paths(choice.name_or_path)

    declare_inputs(opened)


def open_model(source: ModelChoice, *, quiet: bool = False, kind_checked: bool = False):
    """``headlab.models.load`` with the command's options, under a progress pulse (none when
    ``quiet``, --json); offline unless --download. ``kind_checked``: the command has read the
    model's kind already (its outline, ``require_next_token_logits``, or ``model_kinds.declared``
    said "text"), so config.json is not read again for it. Its errors name the flags."""
    hub_access(source.download)
    from headlab.models import load
    from headlab.models.hf.kinds_loader import refuse_other_kinds

    if not kind_checked:
        with flags("model"):  # from the config alone, before any weight is read
            refuse_other_kinds(source.name_or_path)
    names = ("model", "backend", "download", "trust_remote_code")
    with flags(*names), progress("loading the model", None, quiet=quiet):
        return load(
            source.name_or_path,
            backend=source.backend,
            download=source.download,
            trust_remote_code=source.trust_remote_code,
            reads_text=True,  # every command that opens a model reads text
        )


def model_outline(
    source: ModelChoice, *, quiet: bool = False, tokenizer: bool = False, kind_checked: bool = True
):
    """The model's ``ModelOutline`` (``headlab.models.outline``: its config, read once before
    the load, and with ``tokenizer`` its tokenizer). ``kind_checked`` False: an image or
    encoder-decoder model is refused first, as ``open_model`` does. Its errors name the flags."""
    hub_access(source.download)
    from headlab.models.hf.kinds_loader import refuse_other_kinds
    from headlab.models.load import check_backend
    from headlab.models.outline import outline

    with flags("backend"):  # in the load's order: a retired or unknown backend first
        check_backend(source.backend, warn=False)
    if not kind_checked:
        with flags("model"):
            refuse_other_kinds(source.name_or_path)
    names = ("model", "download", "trust_remote_code")
    with flags(*names), progress("reading the model's config", None, quiet=quiet):
        return outline(
            source.name_or_path,
            download=source.download,
            trust_remote_code=source.trust_remote_code,
            tokenizer=tokenizer,
        )


def require_next_token_logits(
    source: ModelChoice, needed_by: str, *, quiet: bool = False, tokenizer: bool = False
):
    """The model's ``ModelOutline`` (``model_outline``), once it is known to give next-token
    logits; ValueError naming what the chosen model lacks otherwise (``needed_by``: "the
    induction task"). Its errors name the flags."""
    from headlab.models.interface import require_next_token_logits as require

    found = model_outline(source, quiet=quiet, tokenizer=tokenizer)
    try:
        require(found, needed_by)
    except ValueError as error:
        raise ValueError(f"{error}: use --model smollm2 or another language model") from None
    return found


def _options(default: str | None, help: str, folder: bool, backend: bool) -> list:
    """(name, annotation, typer option) of each option of the group, in the order shown."""
    # with --model-dir, the default model is taken only when neither option is given
    shown = None if folder else default
    options = [("model", str | None, typer.Option(shown, "--model", help=help))]
    if folder:
        options.append(
            (
                "model_dir",
                Path | None,
                typer.Option(
                    None,
                    "--model-dir",
                    help="A model folder (same as --model PATH).",
                ),
            )
        )
    if backend:
        options.append(
            (
                "backend",
                str | None,
                typer.Option(
                    None,
                    "--backend",
                    help="Accepted for old scripts; it no longer chooses anything: "
                    "every model runs as a transformers model on headlab's attention "
                    "(docs/transformers.md).",
                ),
            )
        )
    options.append(
        (
            "download",
            bool,
            typer.Option(
                False,
                "--download",
                help="Fetch a hub id that is not in the local cache (needs the network).",
            ),
        )
    )
    options.append(
        (
            "trust_remote_code",
            bool,
            typer.Option(
                False,
                "--trust-remote-code",
                help="Run the checkpoint's own Python code (its "
                "auto_map): only for checkpoints you trust.",
            ),
        )
    )
    return options


def model_source(
    *,
    default: str | None = None,
    help: str = MODEL_HELP,
    folder: bool = False,
    backend: bool = True,
) -> Callable[[Callable], Callable]:
    """Decorate a command whose parameter ``source: ModelChoice`` stands for the group: typer
    sees the group's options where ``source`` is, and the command gets them as one value."""

    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command, eval_str=True)
        options = _options(default, help, folder, backend)
        names = [name for name, _, _ in options]
        added = [
            inspect.Parameter(
                name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=option, annotation=annotation
            )
            for name, annotation, option in options
        ]
        parameters = []
        for parameter in signature.parameters.values():
            parameters.extend(added if parameter.name == "source" else [parameter])
        if len(parameters) == len(signature.parameters):
            raise TypeError(f"{command.__name__} has no parameter 'source' for the model options")

        @functools.wraps(command)
        def run(**kwargs):
            chosen = {name: kwargs.pop(name) for name in names}
            if chosen["model"] is None and chosen.get("model_dir") is None:
                chosen["model"] = default
            choice = ModelChoice(**chosen)
            declare_model_inputs(choice)
            return command(**kwargs, source=choice)

        run.__signature__ = signature.replace(parameters=parameters)
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        return run

    return decorate
