"""A GGUF converted once into a safetensors folder in the user's cache, so that loads take seconds.

De-quantising SmolLM2's Q4_1 GGUF takes transformers about 18 s on every load; reading the same
weights from safetensors takes about one. ``converted(gguf)`` returns a folder that transformers
reads like any checkpoint (``config.json``, ``model.safetensors`` in float32, the tokenizer's
files, ``generation_config.json``) plus ``headlab-manifest.json``; the first call writes it:

- where: ``$HEADLAB_CACHE`` if set, else the platform's cache folder (``$XDG_CACHE_HOME/headlab``
  or ``~/.cache/headlab`` on Linux, ``~/Library/Caches/headlab`` on macOS,
  ``%LOCALAPPDATA%/headlab/cache`` on Windows); one subfolder per GGUF (its file name).
- atomically: written into a temporary folder beside it, renamed into place only when complete;
  a crash leaves a ``.tmp-*`` folder (removed by the next conversion), never a partial cache.
- two processes at once: a lock file (``fcntl.flock`` where the platform has it) makes the second
  wait and then read what the first wrote; where there is no lock, both convert and the first
  rename wins (the other's copy is discarded), so either way both succeed with one result.
- checked at every load, keyed by content: the manifest records the GGUF's SHA-256 and stat and
  every written file's size, SHA-256 and stat (size, modification and change times, inode); a
  missing manifest, a file missing, cut short, changed or not listed, or a GGUF of another hash
  makes the folder stale, and it is converted again. The manifest is read by the bounded reader
  of every input (``results.input_files``) and checked field by field: a wrong type, a deep
  nesting or a name that is a path makes the folder stale, never a traceback. The GGUF is hashed
  when its stat differs from the recorded one (a ``cp -p`` of other weights keeps the size and
  modification time, never the inode and change time), once per change, as the files below.
  A file whose stat is the recorded one has not been written
  since it was hashed (any write moves its change time, which no one can set back), so it is not
  hashed again, as git trusts its index; a file whose stat differs (copied, touched, written) or
  changed within ``RACY_NS`` of when its stat was recorded (a second change could fall in the same
  timestamp tick: git's "racily clean" files) is hashed, and when it still matches its new stat
  is recorded (the manifest rewritten atomically; nothing when the cache is read-only). Hashing
  SmolLM2's 540 MB took 0.35-0.45 s of every load before.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from headlab.models.gguf_manifest import FORMAT, MANIFEST, read_manifest
from headlab.notices import CacheNotice
from headlab.results.cache_files import BadEntry, write_entry
from headlab.results.locations import CACHE_ENV, cache_root

#: headlab's mark in every folder it writes, first: a folder without it is never deleted
MARK = ".headlab-conversion"


def folder_name(gguf: Path) -> str:
    """The cache folder's name for ``gguf``: its file name without ``.gguf``, every character
    but letters, digits and ``._+-`` replaced by ``_``, no leading dot (never ``.``, ``..`` or a
    hidden name: a name is never a path), ``unnamed`` when nothing is left."""
    name = re.sub(r"[^A-Za-z0-9._+-]", "_", gguf.name.removesuffix(".gguf")).lstrip(".")
    return name[:120] or "unnamed"


def cache_folder(gguf: str | Path, root: Path | None = None) -> Path:
    """Where the conversion of ``gguf`` is kept (``root``: default ``cache_root()``)."""
    return (cache_root() if root is None else Path(root)) / folder_name(Path(gguf))


def _regular(path: Path) -> bool:
    """A regular file itself, not a link to one."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def ours(folder: Path) -> bool:
    """Whether headlab wrote ``folder``: a folder (not a link) holding headlab's ``MARK``, or
    the manifest of a conversion written before the mark existed."""
    try:
        if not stat.S_ISDIR(folder.lstat().st_mode):
            return False
    except OSError:
        return False
    return _regular(folder / MARK) or _regular(folder / MANIFEST)


def _refuse_foreign(target: Path, gguf: Path) -> None:
    """FileExistsError when ``target`` exists and headlab did not write it."""
    if os.path.lexists(target) and not ours(target):
        raise FileExistsError(
            f"{target} is in the way of the conversion of {gguf.name} and is not headlab's "
            f"(it holds no {MARK}); headlab never replaces it: move it, or set {CACHE_ENV} to "
            "another folder"
        )


def file_digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


#: A file changed this close to the recording of its stat is hashed at every check ("racy").
RACY_NS = 2_000_000_000


def _stat_facts(path: Path) -> list[int]:
    """What a write to ``path`` changes: size, modification and change times (ns), inode."""
    info = path.stat()
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]


def _unchanged(path: Path, facts: dict, stamped: int) -> bool:
    """Whether ``path``'s stat proves it unchanged since it was hashed: the recorded stat,
    recorded (at ``stamped``, ns) more than ``RACY_NS`` after its last change."""
    now = _stat_facts(path)
    return now == facts.get("stat") and max(now[1], now[2]) + RACY_NS < stamped


def _worth_recording(now: list[int], facts: dict) -> bool:
    """``now``, the stat of a file just hashed equal, becomes its recorded stat; worth writing
    when it is new, or when recorded now it is past the racy window (no hash next time)."""
    worth = now != facts.get("stat") or max(now[1], now[2]) + RACY_NS < time.time_ns()
    facts["stat"] = now
    return worth


def _write_manifest(folder: Path, manifest: dict) -> None:
    """``manifest`` (stamped now) written atomically into ``folder``; OSError propagates."""
    manifest["stat_ns"] = time.time_ns()
    write_entry(folder / MANIFEST, manifest)


def stale_reason(folder: Path, gguf: Path) -> str | None:
    """Why ``folder`` is not a complete conversion of ``gguf`` (None: it is)."""
    if not os.path.lexists(folder):
        return "not converted yet"
    if not ours(folder):
        return f"{folder} is not headlab's (it holds no {MARK})"
    try:
        manifest = read_manifest(folder)
    except (FileNotFoundError, BadEntry) as error:
        return f"{MANIFEST} is missing, unreadable or of another format ({error})"
    stamped, source, files = manifest["stat_ns"], manifest["source"], manifest["files"]
    now = _stat_facts(gguf)
    size = source["stat"][0] if "stat" in source else source.get("size", now[0])
    if size != now[0]:
        return f"{gguf} changed size"
    record = False
    if not _unchanged(gguf, source, stamped):  # hashed once per change of its stat
        if file_digest(gguf) != source["sha256"]:
            return f"{gguf} changed (its SHA-256 differs from the converted one's)"
        record = _worth_recording(now, source)
    listed = {*files, MANIFEST}
    unlisted = sorted(p.name for p in folder.iterdir() if p.name[0] != "." and p.name not in listed)
    if unlisted:
        return f"it holds files the manifest does not list ({', '.join(unlisted)[:200]})"
    for name, facts in files.items():
        path = folder / name
        if not _regular(path) or path.stat().st_size != facts["size"]:
            return f"{name} is missing or cut short"
        if _unchanged(path, facts, stamped):
            continue
        stat_now = _stat_facts(path)  # before hashing: a change meanwhile shows next time
        if file_digest(path) != facts["sha256"]:
            return f"{name} is damaged (its SHA-256 differs from the manifest's)"
        record |= _worth_recording(stat_now, facts)
    if record:  # the stats that now match the hashes: the next check needs no hash
        with contextlib.suppress(OSError):
            _write_manifest(folder, manifest)
    return None


def _write_conversion(gguf: Path, into: Path) -> None:
    """Load ``gguf`` with transformers (de-quantised to float32) and save it as safetensors,
    its tokenizer and the manifest (written last) into ``into``."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from headlab.models.quiet_loading import quiet_loading

    kwargs = {"gguf_file": gguf.name, "local_files_only": True}
    with quiet_loading(gguf=True):
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), dtype=torch.float32, **kwargs
        )
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), **kwargs)
    # save_pretrained refuses a model read from a GGUF (transformers marks it quantised): the
    # config without that mark, and the weights (tied ones once) as safetensors
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    (into / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    model.generation_config.save_pretrained(into)
    save_file(_distinct(model.state_dict()), str(into / "model.safetensors"), {"format": "pt"})
    tokenizer.save_pretrained(into)
    files = {
        p.name: {"size": p.stat().st_size, "stat": _stat_facts(p), "sha256": file_digest(p)}
        for p in sorted(into.iterdir())
        if p.is_file() and not p.name.startswith(".")
    }
    source = {"path": str(gguf), "stat": _stat_facts(gguf)}  # the stat before the hash
    source["sha256"] = file_digest(gguf)
    _write_manifest(into, {"format": FORMAT, "source": source, "files": files})


def _distinct(state: dict) -> dict:
    """``state`` with each tied tensor once, under its first name (the embedding, not the output
    head: the name every reader of a tied Llama checkpoint looks for)."""
    kept, seen = {}, set()
    for name, tensor in state.items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key not in seen:
            seen.add(key)
            kept[name] = tensor.contiguous()
    return kept


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` where the platform has ``fcntl`` (else none: the rename
    race in ``converted`` still leaves one complete folder)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _new_folder(root: Path, name: str) -> Path:
    """A new temporary folder for the conversion ``name``, holding headlab's mark."""
    folder = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-{os.getpid()}-", dir=root))
    (folder / MARK).write_bytes(b"")
    return folder


def _remove_leftovers(root: Path, name: str) -> None:
    """Temporary folders of conversions that died (their process is gone): those holding
    headlab's mark, and empty ones (a death before the mark); any other is left alone."""
    prefix = f".tmp-{name}-"
    for leftover in root.glob(f"{glob.escape(prefix)}*"):
        pid = leftover.name[len(prefix) :].split("-")[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        if ours(leftover):
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                leftover.rmdir()  # only when empty


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def converted(gguf: str | Path, root: Path | None = None) -> Path:
    """The cached safetensors folder of ``gguf`` (default place: ``cache_root()``), converted
    first when missing or stale. Emits ``CacheNotice`` (what was written, where, how big) after
    a conversion. Raises FileExistsError when a folder headlab did not write holds the place
    (it is never replaced), OSError in one line naming the cache folder when it cannot be
    written (a full disk: the cache is left as it was)."""
    gguf = Path(gguf)
    root = cache_root() if root is None else Path(root)
    target = cache_folder(gguf, root)
    if stale_reason(target, gguf) is None:
        return target
    _refuse_foreign(target, gguf)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OSError(
            f"{root}: cannot create headlab's cache folder ({error}); set "
            f"{CACHE_ENV} to a writable folder"
        ) from None
    with _lock(root / f".{target.name}.lock"):
        why = stale_reason(target, gguf)  # another process may have converted it meanwhile
        if why is None:
            return target
        _refuse_foreign(target, gguf)
        _remove_leftovers(root, target.name)
        _convert_into(gguf, root, target)
    warnings.warn(
        f"converted {gguf.name} once ({why}) into {target}: {_size(target) / 2**20:.0f} MiB of "
        f"float32 safetensors, config and tokenizer; later loads read it (set {CACHE_ENV} to "
        "move the cache, delete the folder to free the space)",
        CacheNotice,
        stacklevel=2,
    )
    return target


def _convert_into(gguf: Path, root: Path, target: Path) -> None:
    """The conversion written into a new temporary folder, then renamed to ``target``. A write
    that fails (OSError, or safetensors' own error, which is not one) is one OSError naming
    ``root``; the temporary folder is removed, so the cache is as it was."""
    from safetensors import SafetensorError

    temporary = None
    try:
        temporary = _new_folder(root, target.name)
        _write_conversion(gguf, temporary)
        _replace(temporary, target, gguf)
    except FileExistsError:
        raise
    except (OSError, SafetensorError) as error:
        why = " ".join(str(error).split())[:300]
        raise OSError(
            f"{root}: the conversion of {gguf.name} could not be written ({why}); the cache is "
            f"as it was: free some space there, or set {CACHE_ENV} to another folder"
        ) from None
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


def _replace(temporary: Path, target: Path, gguf: Path) -> None:
    """Rename the finished ``temporary`` to ``target``; a stale ``target`` headlab wrote is
    first renamed aside (atomic) and removed, any other is refused (FileExistsError). When
    another process renamed its copy in first, keep that one."""
    if os.path.lexists(target):
        if stale_reason(target, gguf) is None:
            return
        _refuse_foreign(target, gguf)
        aside = target.with_name(f"{temporary.name}-old")
        with contextlib.suppress(FileNotFoundError):
            target.rename(aside)
        shutil.rmtree(aside, ignore_errors=True)
    try:
        temporary.rename(target)
    except OSError:
        if stale_reason(target, gguf) is not None:
            raise
