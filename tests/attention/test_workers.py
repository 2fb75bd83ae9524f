"""The blocked loop on worker threads: the same results as in order, single-threaded workers, the
caller's thread count and every other thread's default left as they were.

The tests run with one torch thread (conftest: OMP_NUM_THREADS=1), where the blocks run in
order; here two threads are set for the duration of each test, so that the workers serve.
"""

from __future__ import annotations

import threading

import pytest
import torch

import headlab.attention.kernel as kernel
from headlab import MultiHeadAttention
from headlab.attention.workers import run_blocks


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_blocks_run_on_single_threaded_workers(two_threads):
    seen = []

    def block(job: int) -> None:
        seen.append((job, threading.current_thread().name, torch.get_num_threads()))

    run_blocks(range(8), block)
    assert sorted(job for job, _, _ in seen) == list(range(8))
    assert all(name.startswith("headlab-block") and n == 1 for _, name, n in seen)
    assert torch.get_num_threads() == 2  # the caller's count is untouched
    later = []
    thread = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    assert later == [2]  # a thread that starts using torch now gets the default, not 1


def test_few_blocks_run_in_order_in_the_caller(two_threads):
    seen = []
    run_blocks(range(3), lambda job: seen.append((job, threading.current_thread())))
    assert seen == [(job, threading.current_thread()) for job in range(3)]


def test_an_error_in_a_block_reaches_the_caller(two_threads):
    def block(job: int) -> None:
        if job == 5:
            raise ValueError("block 5")

    with pytest.raises(ValueError, match="block 5"):
        run_blocks(range(8), block)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_the_default_forward_on_workers_equals_the_blocks_in_order(two_threads, mode, monkeypatch):
    """Many blocks (masks, GQA, batch first); the workers run under the caller's mode (in-place
    writes into inference tensors need inference mode in the worker too)."""
    monkeypatch.setattr(kernel, "MIN_BLOCKED", 1)
    monkeypatch.setattr(kernel, "MIN_ROWS", 3)
    monkeypatch.setattr(kernel, "BLOCK_ELEMENTS", 64)
    torch.manual_seed(0)
    m = MultiHeadAttention(24, 6, num_kv_heads=2, batch_first=True, causal=True).eval()
    x = torch.randn(3, 17, 24)
    padding = torch.zeros(3, 17, dtype=torch.bool)
    padding[1, 11:] = True
    context = torch.no_grad() if mode == "no_grad" else torch.inference_mode()
    with context:
        out, weights = m(x, x, x, key_padding_mask=padding)
        torch.set_num_threads(1)  # the same blocks, in order in this thread
        want_out, want_weights = m(x, x, x, key_padding_mask=padding)
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(weights, want_weights)
    trace = m.trace(x, key_padding_mask=padding)  # the explicit path, for the weights
    torch.testing.assert_close(weights, trace.weights.mean(1))
