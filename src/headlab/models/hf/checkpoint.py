"""Where a transformers checkpoint is, and whether headlab may load it: all before any weight.

``locate(source)`` turns what the user wrote into a ``Checkpoint``: a folder (``config.json``,
``*.safetensors``, tokenizer files), a ``.gguf`` file, or a hub id ``owner/name`` found in the
local Hugging Face cache (fetched only with ``download=True``: config first, weights after the
checks). ``read_config`` reads its configuration without running the checkpoint's own code
unless ``trust_remote_code=True`` (exactly ``True``: ``consent``). Every refusal is one line
(ValueError or FileNotFoundError) naming the checkpoint and what to do.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from headlab.results.input_files import check_model_folder, check_regular, read_json

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
PICKLES = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
#: Files fetched from the hub: configuration, safetensors weights, tokenizer; never pickles.
HUB_FILES = [
    "*.json",
    "*.safetensors",
    "tokenizer*",
    "vocab*",
    "merges.txt",
    "*.model",
    "*.tiktoken",
    "1_Pooling/*",
]
#: What transformers' config classes raise on a field they cannot use (besides ValueError).
CONFIG_ERRORS = (KeyError, TypeError, AttributeError, ArithmeticError, IndexError, RuntimeError)
LIST_HINT = "`headlab model families` (supported_families()) lists the families it can run"


@dataclass(frozen=True)
class Checkpoint:
    """A located checkpoint: ``folder`` holds config.json (or the GGUF file ``gguf``).
    ``to_fetch``: a hub id whose configuration is here and whose other files are fetched by
    ``fetch_rest`` once every check has passed."""

    name: str
    folder: Path
    gguf: str | None = None  # file name inside ``folder``
    to_fetch: str | None = None


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _from_hub(repo_id: str, download: bool) -> Checkpoint:
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    if not download:
        try:
            folder = huggingface_hub.snapshot_download(repo_id, local_files_only=True)
        except (LocalEntryNotFoundError, FileNotFoundError, ValueError):
            raise FileNotFoundError(
                f"{repo_id}: no such file or folder, and not in the local Hugging Face cache "
                f"({constants.HF_HUB_CACHE}); pass download=True to fetch it"
            ) from None
        return Checkpoint(repo_id, check_model_folder(folder))
    if constants.HF_HUB_OFFLINE:
        raise ValueError(
            f"{repo_id}: downloading needs the network, but HF_HUB_OFFLINE (or "
            "TRANSFORMERS_OFFLINE) is set; unset it to download"
        )
    try:  # the configuration only: the checks run before any weight is fetched
        folder = huggingface_hub.snapshot_download(repo_id, allow_patterns=["config.json"])
    except (OSError, huggingface_hub.errors.HfHubHTTPError) as error:
        raise ValueError(f"{repo_id}: download failed ({first_line(error)})") from None
    return Checkpoint(repo_id, Path(folder), to_fetch=repo_id)


def fetch_rest(checkpoint: Checkpoint, trust_remote_code: bool) -> Checkpoint:
    """The hub checkpoint with its weights and tokenizer fetched (safetensors, never pickles;
    Python files only with ``trust_remote_code``); any other checkpoint as it is."""
    if checkpoint.to_fetch is None:
        return checkpoint
    import huggingface_hub

    patterns = [*HUB_FILES, "*.py"] if consent(trust_remote_code) else HUB_FILES
    try:
        folder = huggingface_hub.snapshot_download(checkpoint.to_fetch, allow_patterns=patterns)
    except (OSError, huggingface_hub.errors.HfHubHTTPError) as error:
        raise ValueError(f"{checkpoint.name}: download failed ({first_line(error)})") from None
    return Checkpoint(checkpoint.name, check_model_folder(folder))


#: The longest path and the longest name in it that the file system takes (Linux's limits).
PATH_MAX, NAME_MAX = 4096, 255
SOURCES = "minilm, smollm2, a model folder, a .gguf file or a hub id owner/name"


def check_source(source: str | Path | None) -> None:
    """ValueError in one line for a model name or path that cannot name anything: an empty
    string (``Path("")`` is ".", the current folder) and a path longer than the file system
    takes (the OSError "File name too long" is not about the disk). None is the default model."""
    if source is None:
        return
    text = str(source)
    if not text.strip():
        raise ValueError(f"the model is an empty string; expected {SOURCES}")
    encoded = os.fsencode(text)
    longest = max(len(name) for name in encoded.split(b"/"))
    if len(encoded) > PATH_MAX or longest > NAME_MAX:
        raise ValueError(
            f"the model {text[:40]!r}... is {len(encoded):,} bytes long; a path holds at most "
            f"{PATH_MAX:,} bytes and {NAME_MAX} in one name; expected {SOURCES}"
        )


def locate(source: str | Path, *, download: bool = False) -> Checkpoint:
    """The ``Checkpoint`` that ``source`` names (a folder, a .gguf file, or a hub id); see
    ``check_source`` for what cannot name one."""
    check_source(source)
    path = Path(source)
    if os.path.lexists(path) and not path.is_dir():
        check_regular(path, "model file")  # a FIFO or a device: named, never opened
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"{path}: expected a .gguf file or a model folder")
        return Checkpoint(path.stem, path.parent, gguf=path.name)
    if path.is_dir():
        check_model_folder(path)  # every file regular, its JSON bounded, before transformers
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model folder {path}: config.json is missing")
        return Checkpoint(path.name, path)
    if isinstance(source, str) and HUB_ID.match(source):
        return _from_hub(source, download)
    raise FileNotFoundError(f"{source}: no such file or folder (nor a hub id owner/name)")


def missing_tokenizer(checkpoint: Checkpoint) -> str | None:
    """Why a local checkpoint has no tokenizer (its folder holds neither tokenizer file), or
    None: it has one, it is a GGUF file (which carries its own), or a hub id still to fetch."""
    if checkpoint.gguf is not None or checkpoint.to_fetch is not None:
        return None
    folder = checkpoint.folder
    if (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file():
        return None
    return f"its folder {folder} holds no tokenizer.json or tokenizer_config.json"


def check_reads_text(checkpoint: Checkpoint) -> None:
    """ValueError for a checkpoint without a tokenizer (``missing_tokenizer``), for a caller that
    reads text: said before its weights are read."""
    why = missing_tokenizer(checkpoint)
    if why is not None:
        raise ValueError(f"{checkpoint.name} has no tokenizer to read text with: {why}")


def consent(trust_remote_code: object) -> bool:
    """``trust_remote_code`` as a bool: only ``True`` lets a checkpoint's own Python code run,
    ``False`` refuses it, and anything else (``"no"``, ``1``, ``None``) is a TypeError rather than
    a truthy value taken as consent."""
    if trust_remote_code is True or trust_remote_code is False:
        return trust_remote_code
    raise TypeError(
        f"trust_remote_code must be True or False, got {trust_remote_code!r} "
        f"({type(trust_remote_code).__name__}); only True runs the checkpoint's own Python code"
    )


def raw_config(checkpoint: Checkpoint) -> dict:
    """config.json as a dict (a GGUF's is read by transformers from its metadata)."""
    return read_json(checkpoint.folder / "config.json", "")


def declared_config(source: str | Path | None) -> dict | None:
    """config.json of the checkpoint ``source`` names (``load``'s sources: None or "minilm",
    "smollm2", a folder, a hub id in the local cache), read bounded and without loading
    anything else; None where it is not at hand that way (a .gguf file, SmolLM2 not yet
    converted, a hub id not cached) or where ``source`` names nothing: the load says why."""
    from headlab.models import gguf_cache, packaged

    try:
        if source is None or source == "minilm":
            folder = packaged.default_model_dir()
        elif source == "smollm2":
            gguf = packaged.packaged_smollm2()
            folder = gguf_cache.cache_folder(gguf)
            if gguf_cache.stale_reason(folder, gguf) is not None:
                return None
        else:
            checkpoint = locate(source)
            if checkpoint.gguf is not None:
                return None
            folder = checkpoint.folder
        return read_json(folder / "config.json", "")
    except (OSError, ValueError):
        return None


def check_code(checkpoint: Checkpoint, trust_remote_code: bool) -> None:
    """Refuse a config.json whose family transformers does not know: the checkpoint's own code
    (``auto_map``) runs only with ``trust_remote_code``. A GGUF is checked by transformers."""
    from transformers import CONFIG_MAPPING

    if checkpoint.gguf is not None or consent(trust_remote_code):
        return
    family = raw_config(checkpoint).get("model_type")
    if family in CONFIG_MAPPING:
        return
    if raw_config(checkpoint).get("auto_map"):
        raise ValueError(
            f"{checkpoint.name}: model_type {family!r} is defined by the checkpoint's own Python "
            "code (auto_map), which headlab runs only with trust_remote_code=True"
        )
    import transformers

    raise ValueError(
        f"{checkpoint.name}: model_type {family!r} is not a family transformers "
        f"{transformers.__version__} knows; {LIST_HINT}"
    )


def check_weights(checkpoint: Checkpoint) -> None:
    """Refuse a folder without ``*.safetensors`` weights, naming any pickles found there."""
    if checkpoint.gguf is not None or any(checkpoint.folder.glob("*.safetensors")):
        return
    pickles = sorted(p.name for pattern in PICKLES for p in checkpoint.folder.glob(pattern))
    found = f" (found {', '.join(pickles)}: pickle, which headlab never loads)" if pickles else ""
    raise ValueError(f"{checkpoint.name}: no *.safetensors weights{found}")


def read_config(checkpoint: Checkpoint, trust_remote_code: bool = False):
    """transformers' config object of ``checkpoint`` (local files only). ValueError in one line
    naming the file: a config.json field that is malformed (config_fields.py, checked before
    transformers reads it), a GGUF file cut short, anything else transformers cannot read."""
    import struct

    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig

    from headlab.models.hf.config_fields import check_config_fields

    check_code(checkpoint, trust_remote_code)
    if checkpoint.gguf is None:
        check_config_fields(raw_config(checkpoint), checkpoint.folder / "config.json")
    try:
        return AutoConfig.from_pretrained(
            str(checkpoint.folder),
            gguf_file=checkpoint.gguf,
            trust_remote_code=trust_remote_code,
            local_files_only=True,
        )
    except (struct.error, EOFError) as error:  # the GGUF reader ran past the file's end
        raise ValueError(
            f"{checkpoint.folder / str(checkpoint.gguf)}: not a readable GGUF file (cut short: "
            f"{first_line(error)})"
        ) from None
    except (ValueError, OSError, StrictDataclassError, *CONFIG_ERRORS) as error:
        # StrictDataclassError: transformers' own validation of the config's fields, whose
        # first line names only the validator
        detail = (
            " ".join(str(error).split())
            if isinstance(error, StrictDataclassError)
            else f"{type(error).__name__}: {first_line(error)}"
        )
        if checkpoint.gguf is not None:
            where = f"{checkpoint.folder / checkpoint.gguf}: transformers cannot read its metadata"
        else:
            where = f"{checkpoint.name}: transformers cannot read its config"
        raise ValueError(f"{where} ({detail})") from None
