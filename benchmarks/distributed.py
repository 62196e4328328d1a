"""`python -m benchmarks --distributed`: tensor-parallel llama-small on 2 ranks (Gloo, localhost).

    python -m benchmarks --distributed [--ranks 2] [--tokens 128] [--new-tokens 32] [--rounds 5]

Each rank holds half of every attention and MLP projection (the Megatron plan of
`parallelize_module`: q/k/v/gate/up by columns, o/down by rows; one all-reduce after each o and
down projection). Measured in the same run, on the same sharded weights: eager, and
`luminal.compile_forward` on device cpu (every forward through `torch.compile(backend="luminal")`):
- forward: one call on `--tokens` tokens, median over `--rounds` alternating rounds;
- decode: greedy `generate()` with the KV cache, prompt 16 tokens, per new token (prefill included);
- the share of luminal's call time spent starting and waiting for collectives
  (`DistributedRuntime`'s counters). Both ranks run the same number of calls (a collective needs
  every rank), so timing uses fixed repeat counts, not time budgets.
Writes benchmarks/results/distributed.json and .md (rank 0); the README table is not touched.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket
import statistics
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).parent / "results"


def _median(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _distributed_runtimes():
    from luminal.compiler import STATS

    return [g.runtime for g in STATS.compiled if hasattr(g, "collectives")]


def _collective_share(fn, rounds: int) -> float:
    runtimes = _distributed_runtimes()
    for r in runtimes:
        r.seconds = r.collective_seconds = 0.0
    t0 = time.perf_counter()
    for _ in range(rounds):
        fn()
    wall = time.perf_counter() - t0
    return sum(r.collective_seconds for r in _distributed_runtimes()) / wall


def rank_main(rank: int, world: int, port: int, opts: dict, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    import luminal
    from benchmarks.models import example_inputs, make
    from benchmarks.timing import wait_for_builds

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    base = make("llama-small")
    plan = {}
    for i in range(base.config.num_hidden_layers):
        p = f"model.layers.{i}."
        plan.update({p + f"self_attn.{n}": ColwiseParallel() for n in ("q_proj", "k_proj", "v_proj")})
        plan[p + "self_attn.o_proj"] = RowwiseParallel()
        plan.update({p + f"mlp.{n}": ColwiseParallel() for n in ("gate_proj", "up_proj")})
        plan[p + "mlp.down_proj"] = RowwiseParallel()
    eager = parallelize_module(copy.deepcopy(base), mesh, plan)
    fast = luminal.compile_forward(parallelize_module(copy.deepcopy(base), mesh, plan), device="cpu")
    ids = example_inputs("llama-small", opts["tokens"])[0]
    prompt = ids[:, :16]
    kw = dict(max_new_tokens=opts["new_tokens"], min_new_tokens=opts["new_tokens"], do_sample=False, pad_token_id=0)
    row = {"model": "llama-small", "ranks": world, "tokens": opts["tokens"], "new_tokens": opts["new_tokens"],
           "threads_per_rank": torch.get_num_threads()}
    with torch.no_grad():
        t0 = time.perf_counter()
        got = fast(ids).logits
        row["luminal_first_forward_s"] = time.perf_counter() - t0
        wait_for_builds()  # what is timed next is the compiled C (a cold library builds in the background)
        want = eager(ids).logits
        row["forward_max_err"] = float((got - want).abs().max())
        forward = {"eager": lambda: eager(ids), "luminal": lambda: fast(ids)}
        times = {k: [] for k in forward}
        for _ in range(opts["rounds"]):  # alternating rounds, the same calls on every rank
            for k, fn in forward.items():
                times[k].append(_median(fn, 1))
        row.update({f"forward_{k}_ms": statistics.median(v) * 1e3 for k, v in times.items()})
        row["forward_collective_share"] = _collective_share(forward["luminal"], opts["rounds"])
        t0 = time.perf_counter()
        tokens = fast.generate(prompt, **kw)
        row["luminal_first_generate_s"] = time.perf_counter() - t0
        wait_for_builds()
        row["tokens_identical"] = bool(torch.equal(tokens, eager.generate(prompt, **kw)))
        decode = {"eager": lambda: eager.generate(prompt, **kw), "luminal": lambda: fast.generate(prompt, **kw)}
        times = {k: [] for k in decode}
        for _ in range(max(1, opts["rounds"] // 2)):
            for k, fn in decode.items():
                times[k].append(_median(fn, 1))
        row.update({f"decode_{k}_ms_per_token": statistics.median(v) * 1e3 / opts["new_tokens"]
                    for k, v in times.items()})
        row["decode_collective_share"] = _collective_share(decode["luminal"], 1)
    row["forward_luminal_vs_eager"] = row["forward_luminal_ms"] / row["forward_eager_ms"]
    row["decode_luminal_vs_eager"] = row["decode_luminal_ms_per_token"] / row["decode_eager_ms_per_token"]
    Path(out).write_text(json.dumps(row))
    dist.destroy_process_group()


def table(rows: list[dict]) -> str:
    lines = ["| rank | forward eager ms | forward luminal cpu ms (×eager) | in collectives | decode eager ms/token | "
             "decode luminal ms/token (×eager) | in collectives | tokens identical | forward max err |",
             "|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows):
        lines.append(f"| {i} | {r['forward_eager_ms']:.1f} | {r['forward_luminal_ms']:.1f} ({r['forward_luminal_vs_eager']:.2f}) "
                     f"| {r['forward_collective_share']:.0%} | {r['decode_eager_ms_per_token']:.2f} | "
                     f"{r['decode_luminal_ms_per_token']:.2f} ({r['decode_luminal_vs_eager']:.2f}) | "
                     f"{r['decode_collective_share']:.0%} | {'yes' if r['tokens_identical'] else 'NO'} | "
                     f"{r['forward_max_err']:.1e} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    import tempfile

    import torch.multiprocessing as mp

    parser = argparse.ArgumentParser(prog="python -m benchmarks --distributed")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128, help="forward: tokens per call")
    parser.add_argument("--new-tokens", type=int, default=32, help="decode: tokens generated after a 16-token prompt")
    parser.add_argument("--rounds", type=int, default=5)
    opts = vars(parser.parse_args(argv))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"{r}.json") for r in range(opts["ranks"])]
        mp.start_processes(_spawned, args=(opts["ranks"], port, opts, outs), nprocs=opts["ranks"], start_method="spawn")
        rows = [json.loads(Path(o).read_text()) for o in outs]
    elapsed = time.perf_counter() - started
    markdown = (f"Tensor-parallel llama-small (hidden 512, 4 layers) on {opts['ranks']} ranks over Gloo on one machine, "
                f"{rows[0]['threads_per_rank']} thread(s) per rank, torch {torch.__version__} "
                f"(`python -m benchmarks --distributed`, {elapsed:.0f} s): forward on {opts['tokens']} tokens, "
                f"decode per token (prompt 16 + {opts['new_tokens']} new), eager against luminal cpu with the same "
                "sharding; 'in collectives': the share of luminal's time spent starting and waiting for "
                "all-reduces.\n\n" + table(rows))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "distributed.json").write_text(json.dumps({"rows": rows, "elapsed_s": elapsed}, indent=1))
    (RESULTS / "distributed.md").write_text(markdown + "\n")
    print(markdown)
    return 0


def _spawned(rank: int, world: int, port: int, opts: dict, outs: list[str]) -> None:
    rank_main(rank, world, port, opts, outs[rank])
