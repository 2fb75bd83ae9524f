"""one_torch_thread: one thread inside, the caller's count back after, errors included."""

import pytest
import torch

from headlab.attention.one_thread import one_torch_thread


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_one_thread_inside_and_the_count_restored(two_threads):
    with one_torch_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def test_the_count_is_restored_after_an_error(two_threads):
    with pytest.raises(RuntimeError, match="inside"), one_torch_thread():
        raise RuntimeError("inside")
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("busy", [True, False])
def test_when_busy_takes_one_thread_only_while_another_process_competes(
    two_threads, monkeypatch, busy
):
    import headlab.attention.workers as workers

    monkeypatch.setattr(workers, "competing", lambda: busy)
    with one_torch_thread(when_busy=True):
        assert torch.get_num_threads() == (1 if busy else 2)
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("busy", [True, False])
def test_the_seed_scenarios_take_one_thread_when_busy_and_restore_the_count(
    two_threads, monkeypatch, busy
):
    import headlab.analysis.scenarios as scenarios
    import headlab.attention.workers as workers

    monkeypatch.setattr(workers, "competing", lambda: busy)
    seen = []
    original = scenarios.run_setup

    def spying(setup):
        seen.append(torch.get_num_threads())
        return original(setup)

    monkeypatch.setattr(scenarios, "run_setup", spying)
    scenarios.run_seed_scenarios(seed=0, draws=0)
    assert seen and set(seen) == {1 if busy else 2}
    assert torch.get_num_threads() == 2
