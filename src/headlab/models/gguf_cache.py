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
- checked at every load: the manifest records the GGUF's size, modification time and SHA-256 and
  every written file's size, SHA-256 and stat (size, modification and change times, inode); a
  missing manifest, a file missing, cut short or changed, or a different GGUF makes the folder
  stale, and it is converted again. A file whose stat is the recorded one has not been written
  since it was hashed (any write moves its change time, which no one can set back), so it is not
  hashed again, as git trusts its index; a file whose stat differs (copied, touched, written) or
  changed within ``RACY_NS`` of when its stat was recorded (a second change could fall in the same
  timestamp tick: git's "racily clean" files) is hashed, and when it still matches its new stat
  is recorded (the manifest rewritten atomically; nothing when the cache is read-only). Hashing
  SmolLM2's 540 MB took 0.35-0.45 s of every load before.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from headlab.notices import CacheNotice
from headlab.results.locations import CACHE_ENV, cache_root

MANIFEST = "headlab-manifest.json"
FORMAT = 2  # bump it when what a converted folder holds changes: older folders are rebuilt


def file_digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _source_facts(gguf: Path) -> dict:
    stat = gguf.stat()
    return {"path": str(gguf), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


#: A file changed this close to the recording of its stat is hashed at every check ("racy").
RACY_NS = 2_000_000_000


def _stat_facts(path: Path) -> list[int]:
    """What a write to ``path`` changes: size, modification and change times (ns), inode."""
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def _unchanged(path: Path, facts: dict, stamped: object) -> bool:
    """Whether ``path``'s stat proves it unchanged since it was hashed: the recorded stat,
    recorded (at ``stamped``, ns) more than ``RACY_NS`` after its last change."""
    recorded = facts.get("stat")
    if not isinstance(recorded, list) or not isinstance(stamped, int):
        return False
    now = _stat_facts(path)
    return now == recorded and max(now[1], now[2]) + RACY_NS < stamped


def _write_manifest(folder: Path, manifest: dict) -> None:
    """``manifest`` (stamped now) written atomically into ``folder``; OSError propagates."""
    manifest["stat_ns"] = time.time_ns()
    handle, temporary = tempfile.mkstemp(prefix=f".{MANIFEST}-", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(json.dumps(manifest, indent=1))
        os.replace(temporary, folder / MANIFEST)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def _read_manifest(folder: Path) -> dict | None:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def stale_reason(folder: Path, gguf: Path) -> str | None:
    """Why ``folder`` is not a complete conversion of ``gguf`` (None: it is)."""
    if not folder.is_dir():
        return "not converted yet"
    manifest = _read_manifest(folder)
    if manifest is None or manifest.get("format") != FORMAT:
        return f"{MANIFEST} is missing, unreadable or of another format"
    source, now = manifest.get("source") or {}, _source_facts(gguf)
    if source.get("size") != now["size"]:
        return f"{gguf} changed size"
    if source.get("mtime_ns") != now["mtime_ns"] and source.get("sha256") != file_digest(gguf):
        return f"{gguf} changed"
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return f"{MANIFEST} lists no files"
    record = False
    for name, facts in files.items():
        path = folder / name
        if not isinstance(facts, dict) or not path.is_file():
            return f"{name} is missing or cut short"
        if path.stat().st_size != facts.get("size"):
            return f"{name} is missing or cut short"
        if _unchanged(path, facts, manifest.get("stat_ns")):
            continue
        stat = _stat_facts(path)  # before hashing: a change meanwhile shows next time
        if file_digest(path) != facts.get("sha256"):
            return f"{name} is damaged (its SHA-256 differs from the manifest's)"
        # worth recording: a new stat, or one that recorded now is past the racy window
        record |= stat != facts.get("stat") or max(stat[1], stat[2]) + RACY_NS < time.time_ns()
        facts["stat"] = stat
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

    from headlab.models.hf.loader import _quiet_loading

    kwargs = {"gguf_file": gguf.name, "local_files_only": True}
    with _quiet_loading():
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
        if p.is_file()
    }
    source = {**_source_facts(gguf), "sha256": file_digest(gguf)}
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


def _remove_leftovers(root: Path, stem: str) -> None:
    """Temporary folders of conversions that died (their process is gone)."""
    for leftover in root.glob(f".tmp-{stem}-*"):
        pid = leftover.name.rsplit("-", 2)[-2]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(leftover, ignore_errors=True)


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
    a conversion. Raises OSError naming the folder when the cache cannot be written."""
    gguf = Path(gguf)
    root = cache_root() if root is None else Path(root)
    stem = gguf.name.removesuffix(".gguf")
    target = root / stem
    if stale_reason(target, gguf) is None:
        return target
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OSError(f"{root}: cannot create headlab's cache folder ({error}); set "
                      f"{CACHE_ENV} to a writable folder") from None  # fmt: skip
    with _lock(root / f".{stem}.lock"):
        why = stale_reason(target, gguf)  # another process may have converted it meanwhile
        if why is None:
            return target
        _remove_leftovers(root, stem)
        temporary = Path(tempfile.mkdtemp(prefix=f".tmp-{stem}-{os.getpid()}-", dir=root))
        try:
            _write_conversion(gguf, temporary)
            _replace(temporary, target, gguf)
        finally:
            shutil.rmtree(temporary, ignore_errors=True)
    warnings.warn(
        f"converted {gguf.name} once ({why}) into {target}: {_size(target) / 2**20:.0f} MiB of "
        f"float32 safetensors, config and tokenizer; later loads read it (set {CACHE_ENV} to "
        "move the cache, delete the folder to free the space)",
        CacheNotice,
        stacklevel=2,
    )
    return target


def _replace(temporary: Path, target: Path, gguf: Path) -> None:
    """Rename the finished ``temporary`` to ``target``; a stale ``target`` is first renamed
    aside (atomic) and removed. When another process renamed its copy in first, keep that one."""
    if target.exists():
        if stale_reason(target, gguf) is None:
            return
        aside = target.with_name(f"{temporary.name}-old")
        with contextlib.suppress(FileNotFoundError):
            target.rename(aside)
        shutil.rmtree(aside, ignore_errors=True)
    try:
        temporary.rename(target)
    except OSError:
        if stale_reason(target, gguf) is not None:
            raise
