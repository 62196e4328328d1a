"""Two ranks on localhost over Gloo, each a fresh process, bounded in time: `spawn(scenario)` runs
`scenario(rank, world, *args)` on every rank and returns what each returned (or the exception it
raised, as `Raised`). A rank still running at the deadline is killed and the spawn fails: a
hang is a failure, never a stalled suite. The scenarios live here so the children can import them."""

from __future__ import annotations

import datetime
import multiprocessing
import os
import pickle
import socket
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Raised:
    type: str
    message: str
    traceback: str


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, scenario: str, args: tuple, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    # a spawned child inherits the parent's sys.path: after the vision tests it holds the private
    # torchvision folder (tests/torch/vision_models.py), whose import fails here without the ops
    # library the parent loaded, and `import transformers` imports torchvision when it finds it
    import sys

    sys.path[:] = [p for p in sys.path if Path(p).parts[-2:] != (".venv", "torchvision")]
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # two ranks on two cores
    # the last resort against a hang: the design is that ranks agree first (luminal's CollectiveError)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        result = globals()[scenario](rank, world, *args)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which asserts on it
        result = Raised(type(exc).__name__, str(exc), traceback.format_exc())
    Path(out).write_bytes(pickle.dumps(result))
    dist.destroy_process_group()


def spawn(scenario: str, *args, world: int = 2, timeout: float = 150.0) -> list:
    """What `scenario` returned on each rank, in rank order; AssertionError if a rank hung or died."""
    ctx = multiprocessing.get_context("spawn")
    port = _port()
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"rank{r}.pkl") for r in range(world)]
        procs = [ctx.Process(target=_rank_main, args=(r, world, port, scenario, args, outs[r])) for r in range(world)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for r in hung:
            procs[r].kill()
            procs[r].join()
        assert not hung, f"{scenario}: rank(s) {hung} still running after {timeout:.0f} s: killed"
        missing = [r for r in range(world) if not os.path.exists(outs[r])]
        assert not missing, f"{scenario}: rank(s) {missing} died (exit codes {[procs[r].exitcode for r in missing]})"
        return [pickle.loads(Path(o).read_bytes()) for o in outs]


# --- scenarios -------------------------------------------------------------------------------
def tiny_llama():
    import torch
    import transformers as T

    torch.manual_seed(0)
    cfg = T.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=128, max_position_embeddings=64)
    return T.LlamaForCausalLM(cfg).eval()


def megatron_plan(layers: int) -> dict:
    """The usual tensor-parallel plan: q/k/v/gate/up split by columns, o/down by rows."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {}
    for i in range(layers):
        p = f"model.layers.{i}."
        plan.update({p + f"self_attn.{n}": ColwiseParallel() for n in ("q_proj", "k_proj", "v_proj")})
        plan[p + "self_attn.o_proj"] = RowwiseParallel()
        plan.update({p + f"mlp.{n}": ColwiseParallel() for n in ("gate_proj", "up_proj")})
        plan[p + "mlp.down_proj"] = RowwiseParallel()
    return plan


def sharded_llama(world: int):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    model = tiny_llama()
    parallelize_module(model, init_device_mesh("cpu", (world,)), megatron_plan(model.config.num_hidden_layers))
    return model


def tp_llama(rank: int, world: int, devices: tuple[str, ...], new_tokens: int = 4) -> dict:
    """Per device: the sharded model's logits and greedy tokens under torch.compile (strict), the
    unsharded eager model's, and the collectives of the compiled graphs (`compiled.collectives`)."""
    import torch

    from luminal.compiler import STATS
    from luminal.frontends.torch import compile_forward

    ref = tiny_llama()
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = {"want_logits": ref(ids).logits, "want_tokens": ref.generate(ids, max_new_tokens=new_tokens,
                                                                          do_sample=False).tolist()}
    for device in devices:
        t0 = time.monotonic()
        model = compile_forward(sharded_llama(world), strict=True, device=device)
        before = len(STATS.compiled)
        with torch.no_grad():
            logits = model(ids).logits
            tokens = model.generate(ids, max_new_tokens=new_tokens, do_sample=False).tolist()
        graphs = [g for g in STATS.compiled[before:] if hasattr(g, "collectives")]
        out[device] = {"logits": logits, "tokens": tokens, "collectives": [g.collectives for g in graphs],
                       "report": str(graphs[0].report()) if graphs else "", "graphs": len(graphs),
                       "seconds": time.monotonic() - t0, "phases": [dict(g._report.phases) for g in graphs]}
    return out


def tp_mlp(world: int):
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8))
    ref.load_state_dict(m.state_dict())
    parallelize_module(m, init_device_mesh("cpu", (world,)), {"0": ColwiseParallel(), "2": RowwiseParallel()})
    return m, ref


def failures(rank: int, world: int, device: str) -> dict:
    """A compile that fails on rank 1 only, and collectives that differ on rank 1 only: what each
    rank raised (strict), and what a non-strict compile that fails on rank 1 returns."""
    import torch

    from luminal.frontends.torch import collectives as fc
    from luminal.runtime import collectives as rc

    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    out = {}
    real_schedule, real_signature = rc.schedule, fc.signature

    def broken(*a, **k):
        raise rc.UnsupportedError("injected: this rank cannot schedule the graph")

    def other(nodes):
        groups, digest, lines = real_signature(nodes)
        return groups, digest + "-rank1", lines

    for case in ("compile", "mismatch", "eager"):
        m, ref = tp_mlp(world)
        if rank == 1:
            rc.schedule = broken if case in ("compile", "eager") else real_schedule
            fc.signature = other if case == "mismatch" else real_signature
        f = torch.compile(m, backend="luminal", options={"strict": case != "eager", "device": device})
        t0 = time.monotonic()
        try:
            with torch.no_grad():
                y = f(x)
            out[case] = {"close": bool(torch.allclose(y, ref(x), atol=1e-5))}
        except Exception as exc:  # noqa: BLE001 - the test asserts on its type and message
            out[case] = {"raised": type(exc).__name__, "message": str(exc)}
        out[case]["seconds"] = time.monotonic() - t0
        rc.schedule, fc.signature = real_schedule, real_signature
        torch._dynamo.reset()
    out["funcol"] = functional_collectives(rank, world, device)
    return out


def functional_collectives(rank: int, world: int, device: str) -> dict:
    """torch.distributed._functional_collectives called in a compiled function (Dynamo's graph
    holds them directly): results against eager, and where the collectives were placed."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    from luminal.compiler import STATS

    def fn(x):
        summed = funcol.all_reduce(x * 2, "sum", dist.group.WORLD)
        gathered = funcol.all_gather_tensor(x + 1, 0, dist.group.WORLD)
        return summed.sin() + 1, gathered * 3, torch.exp(x) * 2  # the exp needs no collective
    x = torch.arange(6.0).reshape(2, 3) + rank
    before = len(STATS.compiled)
    got = torch.compile(fn, backend="luminal", options={"strict": True, "device": device})(x)
    graphs = [g for g in STATS.compiled[before:] if hasattr(g, "collectives")]
    return {"equal": [bool(torch.allclose(a, b)) for a, b in zip(got, fn(x))],
            "collectives": graphs[0].collectives if graphs else None}


def _regression():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.GELU(),
                               torch.nn.Linear(32, 4))


def _batches():
    import torch

    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)) for _ in range(3)]


def eager_losses() -> list[float]:
    """Single-process eager SGD on the global batches."""
    import torch

    m = _regression()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    losses = []
    for x, y in _batches():
        loss = torch.nn.functional.mse_loss(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _train(rank: int, world: int, model, compiled) -> list[float]:
    import torch
    import torch.distributed as dist

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in _batches():  # each rank its half of the global batch
        loss = torch.nn.functional.mse_loss(compiled(x.chunk(world)[rank]), y.chunk(world)[rank])
        opt.zero_grad()
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / world)
    return losses


def data_parallel(rank: int, world: int, device: str) -> dict:
    """DDP (tiny buckets: Dynamo's DDPOptimizer splits the graph) and FSDP2 (`fully_shard` per
    Linear, each Linear's forward compiled) training on luminal: the mean loss over the ranks
    per step, and the names of the graphs luminal compiled (forward and backward)."""
    import torch
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    from luminal.frontends.torch.dynamo import backend

    out = {}
    graphs: list = []
    options = {"strict": True, "device": device}

    def luminal(gm, example_inputs):
        return backend(gm, example_inputs, options, graphs=graphs)

    torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = 1024  # DDPOptimizer: the first bucket no larger than the others
    model = _regression()
    ddp = DistributedDataParallel(torch.compile(model, backend=luminal), bucket_cap_mb=0.002)
    out["ddp"] = {"losses": _train(rank, world, ddp, ddp), "graphs": [g.name for g in graphs]}
    graphs.clear()
    torch._dynamo.reset()
    model = _regression()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):  # FSDP's hooks run eagerly around the compiled forward
            layer.forward = torch.compile(layer.forward, backend=luminal)
            fully_shard(layer)
    fully_shard(model)
    out["fsdp"] = {"losses": _train(rank, world, model, model), "graphs": [g.name for g in graphs]}
    return out
