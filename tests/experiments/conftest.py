"""The Ray tests' local Ray instance: started for a test module and shut down after it."""

import os

import pytest


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.path.abspath(src), "HF_HUB_OFFLINE": "1"}},
    )
    yield
    ray.shutdown()
