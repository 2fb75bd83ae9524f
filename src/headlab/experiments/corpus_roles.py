"""Head roles over many documents: one streaming pass per document, on the sweep's executors,
resumable per document, merged exactly.

A document is a job (``DocumentJob``: the model's source, the document, the options) and
``run_document`` its pure function: it loads the model (once per process: a worker keeps it for
the next document), runs ``heads.corpus_sums.document_sums`` on one torch thread and returns the
document's sums. ``run_corpus`` runs the jobs not finished yet on the local pool or Ray
(``experiments.executors.run_jobs``) and appends one line per finished document to a JSONL
results file (``experiments.results``: locked, torn last line cut, other lines skipped and kept);
``corpus_summary`` reads that file back and merges the plan's documents in the plan's order, so
the merged sums are the same bits however and wherever the documents ran.

Row schema (one JSON object per line):
    {"headlab": "corpus-roles-document", "job_id": str (16 hex: sha256 of the model, backend,
     options, document name and the document's sha256), "document": str, "sha256": str,
     "model": str, "options": {RoleRequest}, "sums": {DocumentSums}, "seconds": float >= 0}
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from headlab.attention.one_thread import one_torch_thread
from headlab.experiments.executors import run_jobs
from headlab.heads.corpus_sums import corpus_result, document_sums, merge_sums
from headlab.models.interface import HeadModel
from headlab.results.corpus_roles_result import CorpusRolesResult, DocumentSums, RoleRequest
from headlab.results.jsonl_store import RowKind, read_results
from headlab.results.jsonl_writer import ResultsWriter, check_appendable
from headlab.results.schema import Fields

ROW_TAG = "corpus-roles-document"
DOCUMENT_SUFFIX = ".txt"


@dataclass(frozen=True)
class ModelSource:
    """What ``headlab.models.load`` takes, so that each worker loads the model itself:
    ``name_or_path`` ("smollm2", "minilm", a path made absolute, a hub id) and its options."""

    name_or_path: str
    backend: str | None = None
    download: bool = False
    trust_remote_code: bool = False

    @classmethod
    def of(cls, name_or_path: str | Path, **options) -> ModelSource:
        """A source whose path (when it names one here) is absolute: a worker's working
        directory may be another (Ray)."""
        path = Path(name_or_path)
        text = str(path.absolute()) if path.exists() else str(name_or_path)
        return cls(text, **options)

    def check(self) -> ModelSource:
        """FileNotFoundError, before any model loads, unless the source is a packaged model's
        name, an existing path or a hub id (owner/name); ValueError for a backend value
        ``load`` never took or without transformers, and the one-line warning for a backend
        (``models.load``'s own checks).
        """
        from headlab.models.hf.requirements import require_transformers
        from headlab.models.load import check_backend, check_source

        check_backend(self.backend, warn=False)
        check_source(self.name_or_path)
        require_transformers(self.name_or_path)
        check_backend(self.backend)  # said here once: the workers' loads pass no backend
        return self

    def load(self) -> HeadModel:
        from headlab.models import load

        return load(
            self.name_or_path, download=self.download, trust_remote_code=self.trust_remote_code
        )


@dataclass(frozen=True)
class Document:
    """One document: its name (unique in a corpus; a file's path relative to its folder) and
    its text."""

    name: str
    text: str = field(repr=False)

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def read_documents(folder: str | Path) -> list[Document]:
    """The ``*.txt`` files under ``folder`` (recursively, hidden ones left out), sorted by their
    path relative to it, as documents named by that path.

    FileNotFoundError for a missing folder, ValueError for a file instead of a folder, a folder
    without such files, an empty file, or one that is not UTF-8 (naming it)."""
    from headlab.results.input_files import read_text_file

    folder = Path(folder)
    if not folder.exists():
        raise FileNotFoundError(f"documents folder {folder} does not exist")
    if not folder.is_dir():
        raise ValueError(f"documents={folder} is not a folder of {DOCUMENT_SUFFIX} files")

    def hidden(p: Path) -> bool:
        return any(part.startswith(".") for part in p.relative_to(folder).parts)

    # Not only regular files: a FIFO named *.txt is refused by the reader, never skipped.
    paths = sorted(
        (p for p in folder.rglob(f"*{DOCUMENT_SUFFIX}") if not p.is_dir() and not hidden(p)),
        key=lambda p: p.relative_to(folder).as_posix(),
    )
    if not paths:
        raise ValueError(f"documents folder {folder} holds no {DOCUMENT_SUFFIX} files")
    documents = []
    for path in paths:
        text = read_text_file(path, "document")
        documents.append(Document(path.relative_to(folder).as_posix(), text))
    return documents


@dataclass(frozen=True)
class DocumentJob:
    """One document's pass: what ``run_document`` needs, and nothing that depends on where it
    runs."""

    source: ModelSource
    document: Document
    options: RoleRequest

    @cached_property
    def job_id(self) -> str:
        """The same job gives the same id: a changed document, model or option is a new job."""
        key = {
            "model": self.source.name_or_path,
            "backend": self.source.backend,
            "options": self.options.to_dict(),
            "document": self.document.name,
            "sha256": self.document.sha256,
        }
        canonical = json.dumps(key, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class DocumentResult:
    """One finished document: its sums, the seconds its pass took, and where it ran (the
    worker's process id; whether this job loaded the model or found it loaded)."""

    job: DocumentJob
    sums: DocumentSums
    seconds: float
    pid: int
    loaded_model: bool

    def row(self) -> dict:
        """Its line of the results file (schema in the module docstring)."""
        return {
            "headlab": ROW_TAG,
            "job_id": self.job.job_id,
            "document": self.job.document.name,
            "sha256": self.job.document.sha256,
            "model": self.job.source.name_or_path,
            "options": self.job.options.to_dict(),
            "sums": self.sums.to_dict(),
            "seconds": self.seconds,
        }


_LOADED: dict[ModelSource, HeadModel] = {}  # this process's model, kept between jobs


def _model(source: ModelSource) -> tuple[HeadModel, bool]:
    """(the model of ``source``, whether it was loaded now): one model per process."""
    if source not in _LOADED:
        _LOADED.clear()  # another source: let the previous model go first
        _LOADED[source] = source.load()
        return _LOADED[source], True
    return _LOADED[source], False


def run_document(job: DocumentJob, report: object = None) -> DocumentResult:
    """The executor's job function: one document's sums (``report`` is unused: a pass has no
    events). One torch thread, wherever it runs: a reduction split across threads may add in
    another order, and the sums must not depend on where the document ran."""
    with one_torch_thread():
        model, loaded = _model(job.source)
        start = time.perf_counter()
        sums = document_sums(model, job.document.text, job.options)
        seconds = time.perf_counter() - start
    return DocumentResult(job, sums, seconds, os.getpid(), loaded)


def row_problem(row: object) -> str | None:
    """Why ``row`` is not a line of a corpus-roles results file, or None when it is."""
    if not isinstance(row, dict):
        return "not a JSON object"
    if row.get("headlab") != ROW_TAG:
        return f"'headlab' must be {ROW_TAG!r}"
    for key in ("job_id", "document", "sha256", "model"):
        if not isinstance(row.get(key), str) or not row[key]:
            return f"{key!r} must be a non-empty string"
    seconds = row.get("seconds")
    if not (
        isinstance(seconds, int | float)
        and not isinstance(seconds, bool)
        and math.isfinite(seconds)
        and seconds >= 0
    ):
        return "'seconds' must be a finite number >= 0"
    try:
        RoleRequest.from_dict(Fields(row.get("options"), "options"))
        DocumentSums.from_dict(row.get("sums"), "sums")
    except ValueError as error:
        return str(error)
    return None


ROWS = RowKind(row_problem, first="headlab", writer="corpus-roles run")


@dataclass
class CorpusPlan:
    """Every document's job in the corpus' order, those still to run (not finished in
    ``out``), and the results file."""

    jobs: list[DocumentJob]
    todo: list[DocumentJob]
    out: Path

    @property
    def skipped(self) -> int:
        return len(self.jobs) - len(self.todo)


def _unfinished(jobs: list[DocumentJob], rows: list[dict]) -> list[DocumentJob]:
    done = {row["job_id"] for row in rows}
    return [job for job in jobs if job.job_id not in done]


def plan_corpus(
    source: ModelSource, documents: list[Document], options: RoleRequest, out: str | Path
) -> CorpusPlan:
    """Check everything that can be checked before a model loads (the source, the options, the
    documents, ``out``) and find the documents finished in ``out`` (resume).

    ValueError (FileNotFoundError for a missing model path, OutputRefused for ``out``), one
    line, naming the input."""
    source.check()
    options.check()
    if not documents:
        raise ValueError("expected at least one document, got none")
    names = [d.name for d in documents]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"document names must be unique, got {', '.join(twice)} twice")
    for document in documents:
        if not document.text.strip():
            raise ValueError(f"document {document.name}: expected text, got an empty text")
    out = Path(out)
    content = check_appendable(out, ROWS)
    jobs = [DocumentJob(source, document, options) for document in documents]
    return CorpusPlan(jobs, _unfinished(jobs, content.rows), out)


def run_corpus(
    plan: CorpusPlan, *, executor: str = "local", workers: int = 1, address: str | None = None
) -> Iterator[DocumentResult]:
    """Run the plan's unfinished documents; each result's line is appended as it arrives.

    A generator: iterate it to drive the run. Interrupting it (Ctrl-C, a dead worker, a consumer
    that stops) loses only the documents in flight; the file holds a whole line of every
    finished one. An error a document's pass raises (a model that does not load, max_tokens
    beyond its context) is raised here."""
    with ResultsWriter(plan.out, ROWS) as writer:  # locked: a second run into it is refused
        todo = _unfinished(plan.todo, writer.read().rows)  # finished since planning: not again
        for result in run_jobs(
            run_document,
            todo,
            executor=executor,
            workers=workers,
            address=address,
            describe=lambda job: f"document {job.document.name}",
        ):
            writer.append([result.row()])
            yield result


def corpus_sums(plan: CorpusPlan) -> DocumentSums:
    """The merged sums of the plan's documents from its results file, added in the plan's order
    (the last line of a document wins). ValueError naming the documents not finished."""
    by_id = {row["job_id"]: row for row in read_results(plan.out, ROWS).rows}  # warned: plan
    missing = [job.document.name for job in plan.jobs if job.job_id not in by_id]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        shown = ", ".join(missing[:5]) + more
        raise ValueError(
            f"{len(missing)} of {len(plan.jobs)} documents are not finished in {plan.out}: "
            f"{shown}; run again to finish them"
        )
    return merge_sums([DocumentSums.from_dict(by_id[job.job_id]["sums"]) for job in plan.jobs])


def corpus_summary(plan: CorpusPlan) -> CorpusRolesResult:
    """The corpus means and every head's role from the plan's finished documents."""
    return corpus_result(corpus_sums(plan), plan.jobs[0].options)


def corpus_roles(
    source: ModelSource | str | Path,
    documents: list[Document],
    options: RoleRequest = RoleRequest(),  # noqa: B008 (frozen)
    *,
    out: str | Path,
    executor: str = "local",
    workers: int = 1,
    address: str | None = None,
) -> CorpusRolesResult:
    """Every head's statistics and role over ``documents``: plan (resume from ``out``), run the
    rest on ``executor``, merge. See ``plan_corpus`` and ``run_corpus`` for the errors."""
    if not isinstance(source, ModelSource):
        source = ModelSource.of(source)
    plan = plan_corpus(source, documents, options, out)
    for _ in run_corpus(plan, executor=executor, workers=workers, address=address):
        pass
    return corpus_summary(plan)
