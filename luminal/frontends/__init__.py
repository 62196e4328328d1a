"""Frontends: PyTorch (torch.compile backend, torch.export) and ONNX models -> HLIR graphs."""
