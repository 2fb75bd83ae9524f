"""What observing every transformers family showed (``FamilySupport``), kept in headlab's cache
once per transformers version, and read back without importing torch or transformers: listing
the families observes each one's forward (about a minute on 2 cores), and the answer changes only
with the code that runs.

    key = SHA-256 of (FORMAT, the installed transformers' and torch's versions, the source of
          the code that observes: models/hf/families.py and observe.py)

in ``<headlab's cache>/families/<key>.json`` (``locations.cache_root``: ``$HEADLAB_CACHE`` or the
platform's cache folder; about 7 kB, written atomically by ``cache_files.write_entry``). An entry
is an input like any file: it is read by the reader of every cache entry (``cache_files``: size
and nesting bounded), its document typed by ``FamilySupport.from_dict``, and it must be filed
under its own key and name only families it observed. An entry that fails any of these is
discarded (one ``CacheNotice``), observed again and rewritten (``models.hf.families_cache``); a
cache that cannot be written costs only the observation at each call.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from importlib import metadata
from pathlib import Path

from headlab.results.family_support import FamilySupport

FORMAT = 1  # bump it when what an entry holds changes
FOLDER = "families"
#: The modules whose code decides what the observation finds (inside the package): their source
#: is in every key.
OBSERVING_CODE = ("models/hf/families.py", "models/hf/observe.py")
#: An entry of every family is about 7 kB; anything near this bound is not one of headlab's.
MAX_ENTRY_BYTES = 2**20
WHAT = "families cache entry"


def versions() -> list[str] | None:
    """The installed transformers' and torch's versions (None: one is not installed)."""
    try:
        return [metadata.version("transformers"), metadata.version("torch")]
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def _observing_code() -> str:
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for name in OBSERVING_CODE:
        digest.update((package / name).read_bytes())
    return digest.hexdigest()


def entry_path(root: Path | None = None) -> Path | None:
    """Where this installation's entry is (``root``: the cache folder, default
    ``locations.cache_root()``); None without transformers or torch."""
    from headlab.results.locations import cache_root

    found = versions()
    if found is None:
        return None
    facts = {"format": FORMAT, "versions": found, "code": _observing_code()}
    key = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()
    return (cache_root() if root is None else Path(root)) / FOLDER / f"{key}.json"


def kept_family_support(root: Path | None = None) -> FamilySupport | None:
    """The kept observation of this installation, or None where there is none or it is wrong
    (unreadable, over its bound, mistyped, filed under another key, naming a family it did not
    observe)."""
    from headlab.results.cache_files import BadEntry, discarded, expect, read_entry

    path = entry_path(root)
    if path is None:
        return None
    try:
        document = read_entry(path, max_bytes=MAX_ENTRY_BYTES)
        if expect(document, "format", int) != FORMAT or expect(document, "key", str) != path.stem:
            raise BadEntry("written by another format or filed under another key")
        support = FamilySupport.from_dict(expect(document, "support", dict), WHAT)
        observed = expect(document, "observed", list)
        if observed != sorted(set(map(str, observed))):
            raise BadEntry("'observed' is not a sorted list of distinct names")
        named = [*support.families, *support.not_observed]
        if len(set(support.families)) != len(support.families) or not set(named) <= set(observed):
            raise BadEntry("it names families twice, or families it did not observe")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:  # BadEntry, FamilySupport's own refusals
        discarded(WHAT, path, str(error))
        return None
    return support


def keep_family_support(
    support: FamilySupport, observed: list[str], root: Path | None = None
) -> None:
    """Keep ``support``, observed on the families ``observed``, for this installation (nothing
    where the cache cannot be written: the next call observes again)."""
    from headlab.results.cache_files import write_entry

    path = entry_path(root)
    if path is None:
        return
    document = {
        "format": FORMAT,
        "key": path.stem,
        "observed": sorted(observed),
        "support": support.to_dict(),
    }
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_entry(path, document)


__all__ = ["entry_path", "keep_family_support", "kept_family_support"]
