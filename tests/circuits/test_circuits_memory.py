"""circuits' memory estimate: a run that would not fit is refused before the model loads, with
the estimate and what lowers it (as compare refuses its set-ups); the estimate covers the peak
resident growth that a run really adds in a fresh process (Linux), and is not far above it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import run


@pytest.fixture(scope="module")
def long_llama_dir(tmp_path_factory) -> Path:
    """A small random Llama of 8192 positions (3 layers, 8 heads on 2 K/V heads, width 256,
    MLP 704, vocabulary 4099) with a word tokenizer t0..t4098 (no BOS)."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = tmp_path_factory.mktemp("llama-8192")
    config = transformers.LlamaConfig(
        vocab_size=4099,
        hidden_size=256,
        num_attention_heads=8,
        num_key_value_heads=2,
        intermediate_size=704,
        num_hidden_layers=3,
        max_position_embeddings=8192,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    vocab = {f"t{i}": i for i in range(4099)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


@pytest.mark.parametrize("method", ["eap", "path-patching", "eap-ig"])
def test_a_run_that_cannot_fit_is_refused_before_the_load(
    long_llama_dir, tmp_path, capsys, monkeypatch, method
):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("headlab.models.load", refuse)
    code, _, err = run(
        [
            "circuits",
            "--model",
            str(long_llama_dir),
            "--n-pairs",
            "4096",
            "--length",
            "4000",
            "--method",
            method,
            "--out",
            str(tmp_path / "c.json"),
        ],
        capsys,
    )
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"circuits --method {method} on 4096 pairs of 8000 tokens needs about " in err
    assert "more than half of this machine's" in err and "lower --n-pairs 4096" in err


def test_composition_reads_no_task_and_fits(long_llama_dir):
    from headlab.circuits.fits import memory_terms
    from headlab.circuits.run import CircuitRequest
    from headlab.circuits.tasks import TaskRequest
    from headlab.models.outline import outline

    request = CircuitRequest(
        TaskRequest("induction", n_pairs=4096, length=4000, equal_lengths=False),
        method="composition",
    )
    assert sum(memory_terms(request, outline(long_llama_dir).config, 4096, 8000).values()) < 2**30


PROBE = """
import json, re, sys
import torch
from headlab.circuits.fits import memory_terms
from headlab.circuits.run import CircuitRequest, needs_equal_lengths, prepare, run_circuits
from headlab.circuits.tasks import TaskRequest
from headlab.models import load

def status(key):
    text = open("/proc/self/status").read()
    return int(re.search(key + r":\\s+(\\d+)", text).group(1)) * 1024

folder, method, n, length = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
model = load(folder)
request = CircuitRequest(TaskRequest("induction", n_pairs=n, length=length,
                                     equal_lengths=needs_equal_lengths(method)),
                         method=method, top=5, steps=2)
prepared = prepare(model, request)
terms = memory_terms(request, model.config, n, prepared.pairs.clean.shape[1])
base = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the present
run_circuits(model, prepared)
print(status("VmHWM") - base, sum(terms.values()))
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="/proc")
@pytest.mark.parametrize(("method", "n", "length"), [("eap", 8, 256), ("eap", 2, 1024)])
def test_the_estimate_covers_the_measured_peak(long_llama_dir, method, n, length):
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(long_llama_dir), method, str(n), str(length)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    measured, estimate = map(int, out.split())
    assert measured <= estimate <= 2 * measured, (measured, estimate)
