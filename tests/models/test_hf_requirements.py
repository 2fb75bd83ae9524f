"""Without transformers (installed by the extra ``models``), every way to a model says in one line
what to install (exit code 2 in the CLI), before anything loads. transformers (and accelerate) are
hidden in this process by ``sys.modules[name] = None``, which makes every ``import`` of them
fail, and restored after each test."""

from __future__ import annotations

import sys

import pytest

from cli_run import run

INSTALL = "pip install 'headlab[models]'"


@pytest.fixture
def without_transformers(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.setitem(sys.modules, "accelerate", None)


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    folder = tmp_path_factory.mktemp("documents")
    (folder / "a.txt").write_text("w1 w2 w3 w4 w5 w6 w7 w8 w9 w10", encoding="utf-8")
    return folder


def test_every_way_to_the_route_names_the_extra(
    hf_dirs, documents, tmp_path, capsys, without_transformers
):
    roles = [
        "model",
        "roles",
        "--model",
        str(hf_dirs["gpt_oss"]),
        "--documents",
        str(documents),
        "--out",
        str(tmp_path / "r.jsonl"),
        "--summary",
        str(tmp_path / "r.json"),
    ]
    cases = {
        "a folder": (
            ["model", "generate", "w1", "--model", str(hf_dirs["gpt_oss"])],
            f"{hf_dirs['gpt_oss']} needs transformers >= 5.4, which is not installed",
        ),
        "--backend, which chooses nothing": (
            ["model", "heads", "--model", str(hf_dirs["llama"]), "--backend", "headlab"],
            f"{hf_dirs['llama']} needs transformers >= 5.4, which is not installed",
        ),
        "a hub id": (
            ["model", "generate", "w1", "--model", "nobody/absent"],
            "nobody/absent needs transformers >= 5.4",
        ),
        "a packaged model": (["model", "heads"], "minilm needs transformers >= 5.4"),
        "the families": (["model", "families"], "needs transformers >= 5.4"),
        "corpus roles, before the plan is printed": (
            roles,
            f"{hf_dirs['gpt_oss']} needs transformers",
        ),
        "a KV budget": (
            ["model", "kv-budget", "--backend", "transformers", "--out", str(tmp_path / "k.json")],
            "smollm2 needs transformers >= 5.4",  # kv-budget's default model
        ),
    }
    for case, (argv, message) in cases.items():
        code, out, err = run(argv, capsys)
        assert code == 2 and out == "", case
        assert err.count("\n") == 1 and message in err and INSTALL in err, (case, err)
    assert not (tmp_path / "r.jsonl").exists() and not (tmp_path / "k.json").exists()


def test_the_library_entries_name_the_extra(tmp_path, without_transformers):
    import headlab
    from headlab.models import load
    from headlab.models.hf import load_transformers, supported_families

    for call in (
        lambda: headlab.attach(object()),
        lambda: load_transformers(tmp_path),
        lambda: load("smollm2"),
        supported_families,
    ):
        with pytest.raises(
            ValueError,
            match=r"needs transformers >= 5\.4, which is not "
            r"installed: pip install 'headlab\[models\]'",
        ):
            call()


def test_a_gguf_file_needs_accelerate(tmp_path, monkeypatch):
    from gguf_files import write_llama_gguf

    from headlab.models.hf import load_transformers

    path = tmp_path / "tiny.gguf"
    write_llama_gguf(path)
    monkeypatch.setitem(sys.modules, "accelerate", None)
    with pytest.raises(
        ValueError,
        match=r"^tiny: transformers reads a GGUF file only with "
        r"accelerate, which is not installed: pip install",
    ):
        load_transformers(path)


def test_a_transformers_too_old_is_named(monkeypatch):
    import transformers

    from headlab.models.hf.requirements import require_transformers

    monkeypatch.setattr(transformers, "__version__", "5.3.1")
    with pytest.raises(
        ValueError,
        match=r"needs transformers >= 5\.4, found 5\.3\.1: pip install "
        r"'transformers>=5\.4'",
    ):
        require_transformers()
    monkeypatch.setattr(transformers, "__version__", "5.10.0.dev0")  # 10 > 4, not "1" < "4"
    require_transformers()
