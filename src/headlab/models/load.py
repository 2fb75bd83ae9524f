"""``load``: any trained model behind ``HeadModel``, through the one production route.

Every model (the packaged MiniLM and SmolLM2, checkpoint folders, GGUF files, hub ids) is
transformers' own model class with headlab's attention registered inside (``models/hf/``), behind
one adapter, ``TransformersModel``. The hand-built BERT and Llama that were a second route are
now short references (``headlab.models.handbuilt``), checked against this one in the tests.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from headlab.models.hf.requirements import require_transformers
from headlab.models.packaged import (
    MINILM_NAME,
    SMOLLM2_NAME,
    default_model_dir,
    packaged_smollm2,
)
from headlab.notices import HeadlabWarning

MODEL_NAMES = ("minilm", "smollm2")
#: What ``backend=`` / ``--backend`` accepted; it no longer chooses anything (docs/transformers.md).
BACKENDS = ("headlab", "transformers")


class RetiredOption(HeadlabWarning):
    """An option that is still accepted but no longer changes anything."""


def check_backend(backend: str | None, *, warn: bool = True) -> None:
    """ValueError for a value ``backend`` never took; a one-line ``RetiredOption`` warning (with
    ``warn``) for one it took: every model now runs through the one route."""
    if backend is None:
        return
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if warn:
        warnings.warn(
            f"backend {backend!r} no longer chooses anything: every model runs as a "
            "transformers model on headlab's attention (docs/transformers.md)",
            RetiredOption,
            stacklevel=3,
        )


def check_source(name_or_path: str | Path | None) -> None:
    """FileNotFoundError, before anything loads, unless ``name_or_path`` is None, a packaged
    model's name, an existing path or a hub id ``owner/name``."""
    from headlab.models.hf.checkpoint import HUB_ID

    if name_or_path is None or name_or_path in MODEL_NAMES or Path(name_or_path).exists():
        return
    if isinstance(name_or_path, str) and HUB_ID.match(name_or_path):
        return
    raise FileNotFoundError(
        f"model must be one of {', '.join(MODEL_NAMES)} or a path, got {str(name_or_path)!r}"
        " (no such file or folder, nor a hub id owner/name)"
    )


def opened_paths(name_or_path: str | Path | None) -> tuple[tuple[Path, bool], ...]:
    """What loading ``name_or_path`` reads from disk, as (path, is_folder) pairs: the folder or
    file given, the packaged model's folder or file, the hub cache's folder of a hub id, and
    headlab's cache of GGUF conversions (``models/gguf_cache.py``) for a GGUF. The output policy
    treats them as the command's inputs (``headlab.results.output_policy.declare_input``): no
    output replaces them or is written inside one of the folders. Nothing is loaded; a packaged
    model that is not installed names nothing (its load says why)."""
    from headlab.models.gguf_cache import cache_root
    from headlab.models.hf.checkpoint import HUB_ID

    paths: list[tuple[Path, bool]] = []
    source = "minilm" if name_or_path is None else name_or_path
    try:
        if source == "minilm":
            paths.append((default_model_dir(), True))
        elif source == "smollm2":
            paths += [(packaged_smollm2(), False), (cache_root(), True)]
        elif Path(source).exists():
            folder = Path(source).is_dir()
            paths.append((Path(source), folder))
            if not folder and Path(source).suffix == ".gguf":
                paths.append((cache_root(), True))
        elif isinstance(source, str) and HUB_ID.match(source):
            from huggingface_hub import constants

            repo = "models--" + source.replace("/", "--")
            paths.append((Path(constants.HF_HUB_CACHE) / repo, True))
    except (OSError, ValueError):  # a packaged model not installed, a name no path can be
        pass
    return tuple(paths)


def load(
    name_or_path: str | Path | None = None,
    *,
    backend: str | None = None,
    download: bool = False,
    trust_remote_code: bool = False,
    reads_text: bool = False,
):
    """A model behind ``HeadModel``: "minilm" (default; the packaged all-MiniLM-L6-v2 encoder),
    "smollm2" (the packaged SmolLM2-135M-Instruct decoder, read from its one-time safetensors
    conversion in the user's cache: ``models/gguf_cache.py``), a path (a ``.gguf`` file or a
    transformers checkpoint folder), or a hub id ``owner/name`` from the local Hugging Face
    cache (fetched only with ``download=True``). Each is a ``TransformersModel``.

    backend: accepted for old callers, with a one-line warning that it no longer chooses
    anything. trust_remote_code: run the checkpoint's own Python code (never by default).
    reads_text: refuse a checkpoint without a tokenizer before its weights are read (without
    it such a checkpoint loads and runs on token ids).

    Raises FileNotFoundError for a missing path, ValueError naming the file for anything else
    (``models/hf/loader.py`` lists the refusals, all before any weight is read).
    """
    from headlab.models.hf.checkpoint import check_source as check_path
    from headlab.models.hf.checkpoint import consent

    check_path(name_or_path)  # "" and a path too long for the file system: one line
    consent(trust_remote_code)  # only True runs a checkpoint's code; "no" is a TypeError
    check_backend(backend, warn=False)
    check_source(name_or_path)
    if name_or_path not in (None, *MODEL_NAMES) and Path(name_or_path).exists():
        from headlab.models.hf.checkpoint import locate

        locate(name_or_path)  # a FIFO, a JSON nested without end: named before any import
    require_transformers(str(name_or_path or "minilm"))
    check_backend(backend)  # the warning after every refusal: a refused load says one line
    from headlab.models.hf import load_transformers

    if name_or_path is None or name_or_path == "minilm":
        model = load_transformers(default_model_dir())
        model.name = MINILM_NAME
        return model
    if name_or_path == "smollm2":
        from headlab.models.gguf_cache import converted

        model = load_transformers(converted(packaged_smollm2()))
        model.name = SMOLLM2_NAME
        return model
    model = load_transformers(
        name_or_path,
        download=download,
        trust_remote_code=trust_remote_code,
        reads_text=reads_text,
    )
    check_token_ids(model)
    return model


def check_token_ids(model) -> None:
    """ValueError naming the model when its tokenizer's vocabulary (tokens added by
    transformers' readers left out) holds ids its embedding does not have: they would fail
    inside torch at the first text that holds one."""
    backend = getattr(model.tokenizer, "backend_tokenizer", None)
    if backend is None:
        return
    top = max(backend.get_vocab(with_added_tokens=False).values(), default=-1)
    vocab = int(getattr(model.config, "vocab_size", None) or top + 1)
    if top >= vocab:
        raise ValueError(
            f"{model.name}: its tokenizer's ids go up to {top}, beyond the model's vocabulary "
            f"(vocab_size={vocab}: ids 0 to {vocab - 1})"
        )
