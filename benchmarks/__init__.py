"""Benchmarks: `python -m benchmarks` (or `make bench`) measures luminal against PyTorch eager,
torch.compile (inductor) and onnxruntime side by side, and writes JSON, a PNG plot and a
Markdown table (which it also puts into the README)."""
