"""What observing every family showed (``families.family_support``), kept in headlab's cache
once per transformers version: listing the families observes each one's forward (about a minute
on 2 cores), and the answer changes only with the code that runs.

    key = SHA-256 of (FORMAT, transformers' and torch's versions, the source of the code that
          observes: families.py, observe.py)

in ``<headlab's cache>/families/<key>.json`` (``gguf_cache.cache_root``: ``$HEADLAB_CACHE`` or the
platform's cache folder; about 10 kB, written atomically). An entry is an input like any file:
it is read by the bounded reader of every input file (``results.input_files.read_json``: size
and nesting bounded), its document typed by ``FamilySupport.from_dict``, and it must cover
exactly the text families of the installed transformers (``families.text_families``) under the
key it is filed as. An entry that fails any of these is observed again and rewritten; a cache
that cannot be written costs only the observation at each call.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from headlab.results.family_support import FamilySupport

FORMAT = 1  # bump it when what an entry holds changes
FOLDER = "families"
#: The modules whose code decides what the observation finds: their source is in every key.
OBSERVING_CODE = ("families.py", "observe.py")
#: An entry of every family is about 10 kB; anything near this bound is not one of headlab's.
MAX_ENTRY_BYTES = 2**20


def families_key() -> str:
    """The cache key of this installation (see the module docstring)."""
    import torch
    import transformers

    facts = {
        "format": FORMAT,
        "versions": [transformers.__version__, torch.__version__],
        "code": _observing_code(),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


@functools.cache
def _observing_code() -> str:
    digest = hashlib.sha256()
    for name in OBSERVING_CODE:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()


def entry_path(root: Path | None = None) -> Path:
    """Where this installation's entry is (``root``: the cache folder, default
    ``gguf_cache.cache_root()``)."""
    from headlab.models.gguf_cache import cache_root

    return (cache_root() if root is None else Path(root)) / FOLDER / f"{families_key()}.json"


def kept_family_support(root: Path | None = None) -> FamilySupport | None:
    """The kept observation of this installation, or None where there is none or it is wrong
    (unreadable, over its bound, mistyped, filed under another key, or not covering exactly
    this transformers' text families)."""
    from headlab.models.hf.families import text_families
    from headlab.results.input_files import read_json

    path = entry_path(root)
    try:
        document = read_json(path, "families cache entry", max_bytes=MAX_ENTRY_BYTES)
        if document.get("format") != FORMAT or document.get("key") != path.stem:
            return None
        observed = document.get("observed")
        support = FamilySupport.from_dict(document.get("support"), "families cache entry")
    except (OSError, ValueError):
        return None
    families = text_families()
    if observed != families:
        return None
    named = {*support.families, *support.not_observed}
    if not named <= set(families) or len(set(support.families)) != len(support.families):
        return None
    return support


def observe_and_keep(
    on_step: Callable[[int, int, str], None] | None = None, root: Path | None = None
) -> FamilySupport:
    """``family_support(on_step)`` observed now, and kept for the next calls (nothing kept
    where the cache cannot be written)."""
    from headlab.models.hf.families import family_support, text_families
    from headlab.results.atomic_files import atomic_write_text

    families = text_families()
    support = family_support(on_step)
    path = entry_path(root)
    document = {"format": FORMAT, "key": path.stem, "observed": families,
                "support": support.to_dict()}  # fmt: skip
    with contextlib.suppress(OSError):  # a cache that cannot be written: observed each time
        atomic_write_text(path, json.dumps(document, separators=(",", ":")))
    return support


def cached_family_support(
    on_step: Callable[[int, int, str], None] | None = None, root: Path | None = None
) -> FamilySupport:
    """The kept observation where there is a right one, else ``observe_and_keep``."""
    return kept_family_support(root) or observe_and_keep(on_step, root)


__all__ = ["cached_family_support", "entry_path", "kept_family_support", "observe_and_keep"]
