"""The attention benchmark's guards: what it times is the computation it names."""

import mmap
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
bench_attention = pytest.importorskip("bench_attention")


def test_kernel_floor_computes_the_fast_paths_weight_gradients():
    # Distinct sizes (batch 3, pos 7, 5 heads of 4) so that a swapped axis fails.
    torch.manual_seed(3)
    size = bench_attention.Size("t", 3, 7, 20, 5)
    module = bench_attention.build_modules(size)["headlab"]
    x, g = torch.randn(3, 7, 20), torch.randn(3, 7, 20)
    d_w_in, d_w_o = bench_attention.kernel_floor_step(module, x, g)()
    module.train().zero_grad(set_to_none=True)
    (module(x, x, x, need_weights=False)[0] * g).sum().backward()
    torch.testing.assert_close(d_w_in, module.in_proj_weight.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(d_w_o, module.out_proj.weight.grad, rtol=1e-5, atol=1e-5)


def test_kernel_floor_guard_refuses_a_different_computation():
    torch.manual_seed(3)
    module = bench_attention.build_modules(bench_attention.Size("t", 2, 5, 12, 3))["headlab"]
    x, g = torch.randn(2, 5, 12), torch.randn(2, 5, 12)

    def wrong_step():
        return torch.zeros(36, 12), torch.zeros(12, 12)

    with pytest.raises(RuntimeError, match="kernel floor disagrees"):
        bench_attention.check_floor(module, x, g, wrong_step)


def test_the_statistics_floor_times_exact_causal_attention():
    # the floor's chunked product is the attention SDPA computes (3 K/V heads serve 6 query
    # heads; 13 positions in chunks of 2 rows, so that the chunks' causal masks differ)
    floor = pytest.importorskip("statistics_floor")
    torch.manual_seed(5)
    q = torch.randn(1, 6, 13, 4, dtype=torch.float64)
    k, v = (torch.randn(1, 3, 13, 4, dtype=torch.float64) for _ in range(2))
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True
    )
    torch.testing.assert_close(floor.weights_only(q, k, v, chunk_elements=6 * 13 * 2), expected)


@pytest.mark.parametrize("block_elements", [5 * 7 * 2, 10**6], ids=["rows in blocks", "one block"])
def test_the_default_path_floors_compute_torchs_default_forward(block_elements, monkeypatch):
    # batch 3, 7 positions, 5 heads of 4, float64: torch's need_weights=True forward (output,
    # weights averaged over heads); blocks of 2 rows, so that the last block is shorter
    floor = pytest.importorskip("default_path_floor")
    monkeypatch.setattr(floor, "MIN_ROWS", 2)
    torch.manual_seed(11)
    module = torch.nn.MultiheadAttention(20, 5, batch_first=True, dtype=torch.float64).eval()
    torch.nn.init.normal_(module.in_proj_bias)
    torch.nn.init.normal_(module.out_proj.bias)
    x = torch.randn(3, 7, 20, dtype=torch.float64)
    with torch.inference_mode():
        expected = module(x, x, x)
        blocks = floor.floor_blocks(x, module, block_elements)
        whole = floor.floor_whole(x, module)
    for got in (blocks, whole):
        torch.testing.assert_close(got[0], expected[0])
        torch.testing.assert_close(got[1], expected[1])


def test_the_default_path_floor_runs_and_prints_its_table(capsys):
    floor = pytest.importorskip("default_path_floor")
    argv = [
        "--batch",
        "2",
        "--seq",
        "5",
        "--embed",
        "12",
        "--heads",
        "3",
        "--repeats",
        "1",
        "--warmup",
        "0",
    ]
    assert floor.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [line.split(" | ")[0].lstrip("| ") for line in lines if line.startswith("| ")][2:]
    assert names == [
        "torch default",
        "headlab default",
        "floor, blocks",
        "floor, whole",
        "projections",
    ]
    assert lines[-1].startswith("torch / headlab ")


def test_interleaved_counts_the_page_faults_of_each_call():
    side_by_side = pytest.importorskip("side_by_side")
    pages = 97

    def touch_fresh_pages():
        with mmap.mmap(-1, pages * mmap.PAGESIZE) as fresh:
            for page in range(pages):
                fresh[page * mmap.PAGESIZE] = 1

    faults: dict[str, list[int]] = {}
    steps = {"fresh pages": touch_fresh_pages, "nothing": lambda: None}
    times = side_by_side.interleaved(steps, repeats=3, warmup=1, faults=faults)
    assert {name: len(t) for name, t in times.items()} == {"fresh pages": 3, "nothing": 3}
    assert min(faults["fresh pages"]) >= pages
    assert max(faults["nothing"]) < pages


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_steady_allocator_hands_freed_memory_back_to_the_next_call():
    # in a fresh process: 8 MiB malloc'ed, touched and freed twice; held steady, the second
    # time touches the pages the first one left, so it faults almost none of its 2048 pages
    code = "\n".join(
        [
            "import ctypes, ctypes.util, sys",
            f"sys.path.insert(0, {str(Path(__file__).parents[1] / 'benchmarks')!r})",
            "import allocator",
            "allocator.hold_steady()",
            "libc = ctypes.CDLL(ctypes.util.find_library('c'))",
            "libc.malloc.restype = ctypes.c_void_p",
            "size = 8 * 2**20",
            "for _ in range(2):",
            "    before = allocator.page_faults()",
            "    block = libc.malloc(size)",
            "    ctypes.memset(block, 1, size)",
            "    libc.free(ctypes.c_void_p(block))",
            "    print(allocator.page_faults() - before)",
        ]
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if "needs glibc" in done.stderr:
        pytest.skip("not glibc")
    first, second = map(int, done.stdout.split())
    assert first >= 2048 // 2 and second < 2048 // 8, (first, second)


def test_the_statistics_floor_runs_and_prints_its_table(capsys):
    floor = pytest.importorskip("statistics_floor")
    assert floor.main(["--length", "17", "--repeats", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[0].lstrip("| ") for row in rows[2:]] == [
        "sdpa",
        "weights",
        "statistics",
    ]
