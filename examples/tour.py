# %% [markdown]
# # A tour of luminal: three ways in
# Cells run top to bottom (`# %%` markers: VS Code, Jupytext and PyCharm open this as a
# notebook). The test suite executes this file, so every cell here works as shown.

# %% 1. Build HLIR directly with the builder, run it on the NumPy runtime
import numpy as np
import torch

import luminal as lm

g = lm.Graph("mlp")
x = g.input("x", ("batch", 16))  # a symbolic batch dim
w1 = g.constant(np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32), name="w1")
w2 = g.constant(np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32), name="w2")
g.output(x.linear(w1).gelu().linear(w2).softmax(-1), "probs")
print(g.op_counts())  # every op is one of the ~15 primitives (plus views)
(probs,) = g.run({"x": np.ones((3, 16), np.float32)})
print(probs.shape, probs.sum(-1))

# %% Compile it: egglog rewrites recover Exp, Softmax, MatMul, fused regions; read the kernels
compiled = g.compile()
print(compiled.report())
print(compiled.cuda_source()[:600])  # the CUDA C, even on a machine without a GPU
np.testing.assert_allclose(compiled(np.ones((5, 16), np.float32))[0], g.run(x=np.ones((5, 16), np.float32))[0], rtol=1e-5, atol=1e-6)

# %% 2. A Hugging Face model through luminal.compile (torch.export underneath)
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, use_cache=False)
model = LlamaForCausalLM(config).eval()
ids = torch.randint(0, 256, (1, 12))
cm = lm.compile(model, (ids,))
with torch.no_grad():
    expected = model(ids).logits
out = cm(ids)  # the same structure as the model returns
print(type(out).__name__, float((out.logits - expected).abs().max()))
print(cm.report())

# %% ... or as a torch.compile backend
fast = torch.compile(model, backend="luminal")
with torch.no_grad():
    print(float((fast(ids).logits - expected).abs().max()))

# %% 3. ONNX: a model file in, NumPy in and out
import tempfile
from pathlib import Path

import onnx
from onnx import TensorProto, helper

node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1)
graph = helper.make_graph([node], "gemm", [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 8]),
                                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 8]),
                                           helper.make_tensor_value_info("c", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
path = Path(tempfile.mkdtemp()) / "gemm.onnx"
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
session = lm.onnx.compile(path)
a, b, c = (np.random.default_rng(i).standard_normal(s).astype(np.float32) for i, s in enumerate([(3, 8), (4, 8), (4,)]))
(y,) = session(a, b, c)
np.testing.assert_allclose(y, a @ b.T + c, rtol=1e-5, atol=1e-5)
print("ONNX Gemm ok:", y.shape)
