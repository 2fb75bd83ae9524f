"""A tokenizer the tokenizers library cannot build is one line naming the file, before the weights.

The tokenizers library raises a bare ``Exception`` for a BPE whose merges name a token that is
not in its vocabulary, from a folder's ``tokenizer.json`` (read by ``PreTrainedTokenizerFast``
or, with a ``tokenizer_config.json``, by ``AutoTokenizer``) and from a GGUF's
``tokenizer.ggml.merges`` (which transformers turns into the same BPE). Each is a ValueError in
one line naming the file and the token, raised before any weight is read; the CLI says it in one
line and exits 2.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from gguf_files import MERGES, write_llama_gguf
from hf_families import write_family

from headlab.models.hf import load_transformers


def _bpe_with_a_merge_outside_its_vocabulary(folder: Path) -> None:
    from tokenizers import Tokenizer, models

    vocab = {"w0": 0, "a": 1, "b": 2, "ab": 3}
    Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b")], unk_token="w0")).save(
        str(folder / "tokenizer.json")
    )
    document = json.loads((folder / "tokenizer.json").read_text())
    document["model"]["merges"].append(["zz", "qq"])  # neither is in the vocabulary
    (folder / "tokenizer.json").write_text(json.dumps(document))


@pytest.fixture(scope="module")
def bad_sources(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad-merges")
    plain = write_family("llama", root / "plain")
    _bpe_with_a_merge_outside_its_vocabulary(plain)
    configured = shutil.copytree(plain, root / "configured")
    (configured / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"})
    )
    gguf = write_llama_gguf(
        root / "merges.gguf", metadata={"tokenizer.ggml.merges": [*MERGES, "zz qq"]}
    )
    return {"plain": plain, "configured": configured, "gguf": gguf}


def _no_weights(*args, **kwargs):
    raise AssertionError("the weights were read before the tokenizer was refused")


@pytest.mark.parametrize("kind", ["plain", "configured", "gguf"])
def test_merges_outside_the_vocabulary_are_one_line_before_the_weights(
    kind, bad_sources, monkeypatch
):
    from transformers import PreTrainedModel

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(_no_weights))
    source = bad_sources[kind]
    with pytest.raises(ValueError) as caught:
        load_transformers(source)
    message = str(caught.value)
    assert "\n" not in message and "zz" in message
    named = source if kind == "gguf" else source / "tokenizer.json"
    assert str(named) in message


def test_the_cli_says_it_in_one_line(bad_sources, capsys):
    from cli_run import run

    code, _, err = run(["model", "heads", "--model", str(bad_sources["gguf"])], capsys)
    assert code == 2
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("headlab: error")]
    assert "tokenizer" in line and "zz" in line
