"""Benchmarks: `python -m benchmarks` (or `make bench`) measures luminal against PyTorch eager,
torch.compile (inductor) and onnxruntime side by side, and writes JSON, a PNG plot and a
Markdown table (which it also puts into the README)."""

import luminal  # noqa: F401,E402 - first: LUMINAL_ISA=avx2 sets torch's and the BLAS's variables before they load
