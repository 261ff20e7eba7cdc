"""Fixtures of the reliability tests."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _single_intra_op_thread():
    """Tiny models gain nothing from intra-op parallelism, and on a busy 2-core machine (pytest-xdist workers, the
    spawned ranks of the synced_gpus test) the extra threads' synchronisation makes each test several times slower."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
