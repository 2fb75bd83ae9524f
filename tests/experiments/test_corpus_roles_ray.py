"""Corpus roles on a local Ray instance started (and shut down) by the test: the same bits as one
process, the model loaded once per Ray worker process, and a failing document's own error."""

import pytest

pytest.importorskip("ray")

from corpus_documents import OPTIONS, documents
from headlab.experiments.corpus_roles import (
    Document,
    ModelSource,
    corpus_summary,
    plan_corpus,
    run_corpus,
)
from headlab.results.corpus_roles_result import RoleRequest

pytestmark = [
    pytest.mark.slow,
    # Ray's own start-up chatter, nothing of ours.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*"),
    pytest.mark.filterwarnings("ignore::FutureWarning:ray.*"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


def test_ray_gives_the_bits_of_one_process(tiny_llama, tiny_llama_dir, tmp_path, local_ray):
    corpus = [Document(f"{name}.txt", text) for name, text in documents(tiny_llama).items()]
    corpus += [Document(f"again/{d.name}", d.text) for d in corpus]  # more documents than CPUs
    source = ModelSource.of(tiny_llama_dir)
    here = plan_corpus(source, corpus, OPTIONS, tmp_path / "here.jsonl")
    list(run_corpus(here))
    on_ray = plan_corpus(source, corpus, OPTIONS, tmp_path / "ray.jsonl")
    results = list(run_corpus(on_ray, executor="ray"))
    assert sorted(r.job.document.name for r in results) == sorted(d.name for d in corpus)
    pids = {r.pid for r in results}
    assert sum(r.loaded_model for r in results) == len(pids) < len(corpus)  # once per worker
    assert corpus_summary(on_ray) == corpus_summary(here)
    assert plan_corpus(source, corpus, OPTIONS, on_ray.out).skipped == len(corpus)


def test_a_failing_document_raises_its_own_error_on_ray(tiny_llama_dir, tmp_path, local_ray):
    options = RoleRequest(max_tokens=100, sinks=2, window=8)
    plan = plan_corpus(
        ModelSource.of(tiny_llama_dir), [Document("a.txt", "t1 t2 t3")], options, tmp_path / "r"
    )
    with pytest.raises(ValueError, match="max_tokens must be between 2 and 64, got 100") as error:
        list(run_corpus(plan, executor="ray"))
    assert "Traceback" not in str(error.value)
