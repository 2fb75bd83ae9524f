"""The blocked loop on worker threads: the same results as in order, single-threaded workers, the
caller's thread count and every other thread's default left as they were; streamed statistics
merged in order in the caller.

The tests run with one torch thread (conftest: OMP_NUM_THREADS=1), where the blocks run in
order; here two threads are set for the duration of each test, and another process is taken to
compete for the cores, so that the workers serve.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import headlab.attention.chunked as chunked_path
import headlab.attention.kernel as kernel
import headlab.attention.workers as workers
from headlab import MultiHeadAttention
from headlab.attention.streaming_sums import StreamingSums
from headlab.attention.workers import run_blocks


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.setattr(workers, "competing", lambda: True)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_on_an_idle_machine_the_blocks_run_in_order_in_the_caller(two_threads, monkeypatch):
    monkeypatch.setattr(workers, "competing", lambda: False)
    seen = []
    run_blocks(range(8), lambda job: seen.append((job, threading.current_thread())))
    assert seen == [(job, threading.current_thread()) for job in range(8)]
    assert workers.usable() == 1


def test_another_runnable_process_is_seen_as_competing():
    if not Path("/proc/loadavg").exists():
        pytest.skip("reads /proc (Linux)")
    spin = "import time\nend = time.monotonic() + 20\nwhile time.monotonic() < end: pass"
    competitor = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.3)
        # a CPU-bound process is runnable at nearly every instant: one of ten readings suffices
        assert any(workers._running_elsewhere() for _ in range(10))
    finally:
        competitor.kill()
        competitor.wait()


def test_the_caller_merges_on_one_thread_and_gets_its_count_back(two_threads):
    counts = []
    run_blocks(range(8), lambda job: job, lambda _: counts.append(torch.get_num_threads()))
    assert counts == [1] * 8  # no parallel region waits for the cores the workers hold
    assert torch.get_num_threads() == 2


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
    monkeypatch.setattr(chunked_path, "MIN_ROWS", 3)
    monkeypatch.setattr(chunked_path, "BLOCK_ELEMENTS", 64)
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


def test_merge_gets_every_result_in_job_order_in_the_caller(two_threads):
    merged, started = [], []
    caller = threading.current_thread()
    lock = threading.Lock()

    def block(job: int) -> int:
        with lock:
            started.append(job)
        return job * job

    def merge(result: int) -> None:
        assert threading.current_thread() is caller
        # no block runs more than AHEAD per worker ahead of the oldest one not merged yet
        assert max(started) < len(merged) + workers.AHEAD * 2
        merged.append(result)

    run_blocks(range(40), block, merge)
    assert merged == [job * job for job in range(40)]
    merged.clear()
    run_blocks(range(3), lambda job: job + 1, merged.append)  # few: in order in the caller
    assert merged == [1, 2, 3]


def test_an_error_in_a_merged_block_reaches_the_caller_after_the_started_blocks(two_threads):
    finished = []

    def block(job: int) -> int:
        if job == 5:
            raise ValueError("block 5")
        finished.append(job)
        return job

    with pytest.raises(ValueError, match="block 5"):
        run_blocks(range(40), block, lambda _: None)
    count = len(finished)
    time.sleep(0.05)
    assert len(finished) == count  # nothing still running after the error came back
    assert count < 40 - 1  # blocks not yet started were cancelled


def _decoder_sums(model, batch, chunk_elements: int):
    from headlab.heads.model_head_sums import model_head_sums
    from headlab.heads.repeats import copy_sources

    sources = copy_sources(batch.input_ids[0], 3)[None]
    _, sums = model_head_sums(
        model, batch, chunk_elements=chunk_elements, window=(2, 5), copy_sources=sources, block=4
    )
    return sums


def _fields(sums) -> dict:
    return {
        "received": sums.received,
        "hits": sums.copy_hits,
        "blocks": sums.blocks,
        **{f"sums.{name}": value for name, value in sums.sums.items()},
    }


def test_streamed_statistics_on_workers_equal_the_chunks_in_order(two_threads, tiny_llama):
    """A decoder's statistics (window errors, copy positions, blocked maps included), chunk by
    chunk on two workers: merged in the caller in order, the same bit for bit from run to run
    whatever worker took which chunk, equal to the same chunks in order in one thread (up to
    the other ops' threading), and the received profile equals the full weights' (trace)."""
    passage = " ".join(f"t{(7 * i + 3) % 97}" for i in range(9))
    text = f"t0 {passage} " + " ".join(f"t{(5 * i + 2) % 89}" for i in range(20)) + f" {passage}"
    batch = tiny_llama.tokenize([text])
    n = batch.input_ids.shape[1]
    chunk = 2 * 6 * n * 4  # 4 rows of 6 heads per chunk, on each of 2 workers: n / 4 chunks
    threads = []
    chunk_of = StreamingSums.chunk

    def spying(self, *args, **kwargs):
        threads.append(threading.current_thread().name)
        return chunk_of(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(StreamingSums, "chunk", spying)
        on_workers = _decoder_sums(tiny_llama, batch, chunk)
    assert len(threads) == 3 * -(-n // 4) and all(t.startswith("headlab-block") for t in threads)
    again = _decoder_sums(tiny_llama, batch, chunk)
    torch.set_num_threads(1)
    in_order = _decoder_sums(tiny_llama, batch, chunk // 2)  # the same chunks (4 rows)
    with torch.no_grad():
        _, traces = tiny_llama.trace_batch(batch)
    for layer, (got, same, want) in enumerate(zip(on_workers, again, in_order, strict=True)):
        for name, value in _fields(got).items():
            assert torch.equal(value, _fields(same)[name]), (layer, name)
            if value.dtype == torch.bool:
                assert torch.equal(value, _fields(want)[name]), (layer, name)
            else:
                torch.testing.assert_close(value, _fields(want)[name], rtol=1e-6, atol=1e-9)
        received = traces[layer].weights[0].double().sum(1)  # (head, k_pos)
        torch.testing.assert_close(got.received, received, rtol=1e-5, atol=1e-6)
