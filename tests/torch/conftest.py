"""tests/torch: the PyTorch frontend. zoo.py, hf_models.py and torch_helpers.py are shared helpers."""

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
