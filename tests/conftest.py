"""Shared fixtures: a GPU gate for `-m gpu` tests, and the nvcc gate for compile checks."""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(scope="session")
def gpu():
    """Skips the test without PyCUDA and a GPU; with them, returns the device context."""
    from rnncc.errors import DeviceUnavailable
    from rnncc.runtime import device_context

    try:
        return device_context(0)
    except DeviceUnavailable as exc:
        pytest.skip(f"no GPU: {exc}")


@pytest.fixture(autouse=True)
def _poison_outputs(request, monkeypatch):
    # GPU tests: every output and workspace buffer starts as NaN, so unwritten
    # elements fail the comparison instead of passing on leftover zeros.
    if request.node.get_closest_marker("gpu"):
        monkeypatch.setenv("RNNCC_DEBUG_POISON", "1")


@pytest.fixture(scope="session")
def nvcc():
    """The nvcc path; without one the test skips, or fails where RNNCC_REQUIRE_NVCC=1
    (set by .ci/run, so compile checks can never silently vanish in CI)."""
    from rnncc.build import nvcc_path

    path = nvcc_path()
    if path is None:
        if os.environ.get("RNNCC_REQUIRE_NVCC") == "1":
            pytest.fail("nvcc not found and RNNCC_REQUIRE_NVCC=1")
        pytest.skip("nvcc not found")
    return path


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="session")
def rnncc_tagger(torch):
    """make(I, H, H2): a tagger holding rnncc modules (a 2-layer batch-first LSTM of H, a
    GRU of H2 over its sequence, a linear head of 5) whose output uses every final state;
    the torch.compile tests trace it."""
    import rnncc.nn as rnn

    class Tagger(torch.nn.Module):
        def __init__(self, inputs: int, hidden: int, gru_hidden: int):
            super().__init__()
            self.lstm = rnn.LSTM(inputs, hidden, num_layers=2, batch_first=True)
            self.gru = rnn.GRU(hidden, gru_hidden)
            self.out = torch.nn.Linear(gru_hidden, 5)

        def forward(self, x):
            h, (h_n, c_n) = self.lstm(x)
            g, g_n = self.gru(h.transpose(0, 1))
            return self.out(g) + h_n.sum() + c_n.sum() + g_n.sum()
    return Tagger


def has_command(name: str) -> bool:
    return shutil.which(name) is not None
