"""Shared fixtures of the kernel toolchain tests: the hand-written CUDA C they run."""

from pathlib import Path

import pytest

KERNELS_DIR = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def sample_source() -> str:
    return (KERNELS_DIR / "sample_kernels.cu").read_text()


@pytest.fixture(scope="session")
def broken_source() -> str:
    return (KERNELS_DIR / "broken_kernels.cu").read_text()
