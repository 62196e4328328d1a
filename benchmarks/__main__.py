"""`python -m benchmarks`: run every CPU benchmark, write results, update the README table.

    python -m benchmarks                 # everything (under 10 minutes on 2 cores)
    python -m benchmarks --quick         # tiny models only, no inductor (a smoke run)
    python -m benchmarks --models llama-tiny bert-tiny   # some models: results/cpu_<models>.json/.md
    python -m benchmarks --models llama-small-decode     # greedy generate() with the KV cache, per token
    python -m benchmarks --cold-start    # torch.compile first calls cold and warm (benchmarks/cold_start.py)
    python -m benchmarks --onnx          # ONNX models against onnxruntime (benchmarks/onnx_bench.py)
    python -m benchmarks --training      # training steps: eager, inductor, luminal (benchmarks/training.py;
                                         # about 6 minutes more, so not part of the full run)
    python -m benchmarks --distributed   # tensor-parallel llama-small on 2 ranks, eager against luminal cpu
                                         # (benchmarks/distributed.py; not part of the full run)
Writes benchmarks/results/cpu.json, cpu.md and cpu.png (the plot needs matplotlib).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from benchmarks import ort_isa
from benchmarks.cpu import bench_decode, bench_model, compile_scaling
from benchmarks.models import example_inputs, make
from benchmarks.timing import cpu_environment, describe_blas, describe_isa

RESULTS = Path(__file__).parent / "results"
README = Path(__file__).parent.parent / "README.md"
FULL = ["llama-tiny", "llama-small", "qwen3-tiny", "qwen3-small", "bert-tiny", "bert-small", "minilm", "bert-long",
        "resnet-ish", "mobilenet-ish", "llama-small-decode"]
DECODE_PROMPT, DECODE_NEW = 16, 48
QUICK = ["llama-tiny", "bert-tiny"]


def environment() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    import numpy

    import luminal

    try:
        egglog_version = version("egglog")
    except PackageNotFoundError:
        egglog_version = None
    return {"python": platform.python_version(), "machine": platform.machine(), "cpu_count": torch.get_num_threads(),
            "platform": platform.platform(), "torch": torch.__version__, "numpy": numpy.__version__,
            "luminal": luminal.__version__, "egglog": egglog_version, **cpu_environment(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def table(rows: list[dict]) -> str:
    def f(row, key, fmt="{:.2f}"):
        return fmt.format(row[key]) if key in row else "–"

    searched = any("cpu_search_ms" in r for r in rows)  # `--search`: one more column, the variant it chose
    lines = ["| model | tokens | eager ms | luminal cpu ms (×eager) | "
             + ("luminal cpu, search on, ms (×eager): chosen | " if searched else "") + "C build s | luminal numpy ms (×eager) | "
             "numpy float32 ms (×eager) | inductor ms (×eager) | onnxruntime ms (×eager) | luminal compile s (cpu) | "
             "inductor compile s | cpu max err | numpy max err |",
             "|---|---|---|---|" + ("---|" if searched else "") + "---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        search = (f"{f(r, 'cpu_search_ms')} ({f(r, 'cpu_search_vs_eager')}): {r.get('cpu_search_chosen', '–')} | "
                  if searched else "")
        lines.append(
            f"| {r['model']} | {r['tokens']} | {f(r, 'eager_ms')} | {f(r, 'cpu_ms')} ({f(r, 'cpu_vs_eager')}) | {search}"
            f"{f(r, 'cpu_build_s')} | {f(r, 'numpy_ms')} ({f(r, 'numpy_vs_eager')}) | "
            f"{f(r, 'numpy_f32_ms')} ({f(r, 'numpy_f32_vs_eager')}) | "
            f"{f(r, 'inductor_ms')} ({f(r, 'inductor_vs_eager')}) | {f(r, 'onnxruntime_ms')} ({f(r, 'onnxruntime_vs_eager')}) | "
            f"{f(r, 'cpu_compile_s')} | {f(r, 'inductor_compile_s')} | {f(r, 'cpu_max_err', '{:.1e}')} | "
            f"{f(r, 'numpy_max_err', '{:.1e}')} |")
    return "\n".join(lines)


def decode_table(rows: list[dict]) -> str:
    lines = ["| model | prompt + new tokens | eager ms/token | luminal cpu ms/token (×eager) | luminal first call s | "
             "tokens identical |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['prompt']} + {r['new_tokens']} | {r['eager_ms_per_token']:.2f} | "
                     f"{r['luminal_ms_per_token']:.2f} ({r['luminal_vs_eager']:.2f}) | {r['luminal_first_call_s']:.2f} | "
                     f"{'yes' if r['tokens_identical'] else 'NO'} |")
    return "\n".join(lines)


def scaling_table(rows: list[dict]) -> str:
    phases = list(dict.fromkeys(k for r in rows for k in r["phases_s"]))  # pipeline order
    lines = ["| layers | luminal.compile s | torch.compile first call s: backend='luminal' | backend='eager' (Dynamo alone) | "
             + " | ".join(phases) + " |", "|---" * (4 + len(phases)) + "|"]
    for r in rows:
        cells = " | ".join(f"{r['phases_s'].get(p, 0):.3f}" for p in phases)
        lines.append(f"| {r['layers']} | {r['luminal_compile_s']:.2f} | {r['torch_compile_luminal_first_call_s']:.2f} | "
                     f"{r.get('torch_compile_eager_first_call_s', float('nan')):.2f} | {cells} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    keys = [("eager_ms", "PyTorch eager"), ("cpu_ms", "luminal cpu (compiled C)"), ("numpy_ms", "luminal numpy"),
            ("numpy_f32_ms", "luminal numpy, float32"), ("inductor_ms", "inductor"), ("onnxruntime_ms", "onnxruntime")]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.14
    for i, (key, label) in enumerate(keys):
        ax.bar([j + i * width for j in range(len(rows))], [r.get(key, 0) for r in rows], width, label=label)
    ax.set_xticks([j + 2 * width for j in range(len(rows))], [r["model"] for r in rows], rotation=20)
    ax.set_ylabel("median latency (ms), lower is better")
    ax.set_yscale("log")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=5, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def update_readme(markdown: str) -> None:
    start, end = "<!-- benchmarks:start -->", "<!-- benchmarks:end -->"
    text = README.read_text()
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        README.write_text(head + start + "\n" + markdown + "\n" + end + tail)


def cold_inductor() -> None:
    """Make inductor compile as on first use: an empty cache directory for its generated C++
    and no FX-graph/autograd caches (warm, they cut its compile time to a few seconds)."""
    import tempfile

    import torch._functorch.config
    import torch._inductor.config

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="luminal-bench-inductor-")
    torch._inductor.config.fx_graph_cache = False
    torch._inductor.config.autotune_local_cache = False
    torch._functorch.config.enable_autograd_cache = False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="tiny models only, no inductor or ONNX")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--models", nargs="+", metavar="NAME", help=f"only these models (of {', '.join(FULL)}); "
                        "no compile-time scaling, README untouched")
    parser.add_argument("--search", type=float, metavar="SECONDS", help="also luminal with options={'search': SECONDS} "
                        "(luminal.search), timed in the same rounds; results in cpu_..._search.*, README untouched")
    parser.add_argument("--cold-start", action="store_true", help="only the cold-start table (benchmarks/cold_start.py; "
                        "the options after --cold-start are that script's)")
    parser.add_argument("--onnx", action="store_true", help="only the ONNX table (benchmarks/onnx_bench.py; "
                        "the options after --onnx are that script's)")
    parser.add_argument("--training", action="store_true", help="only the training-step table (benchmarks/training.py; "
                        "the other options are that script's)")
    parser.add_argument("--distributed", action="store_true", help="only the tensor-parallel table "
                        "(benchmarks/distributed.py; the options after --distributed are that script's)")
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--distributed" in argv:
        from benchmarks import distributed

        return distributed.main(argv[argv.index("--distributed") + 1:])
    if "--training" in argv:
        from benchmarks import training

        return training.main([a for a in argv if a != "--training"])
    if "--onnx" in argv:
        from benchmarks import onnx_bench

        return onnx_bench.main(argv[argv.index("--onnx") + 1:])
    if "--cold-start" in argv:
        from benchmarks import cold_start

        return cold_start.main(argv[argv.index("--cold-start") + 1:])
    opts = parser.parse_args(argv)
    ort_isa.apply()  # LUMINAL_ISA=avx2: onnxruntime's AVX2 kernels too, before it loads
    cold_inductor()
    RESULTS.mkdir(exist_ok=True)
    started = time.perf_counter()
    env = environment()
    print(f"luminal benchmarks on {env['platform']} ({env['cpu_count']} threads), torch {env['torch']}", flush=True)
    rows, decode = [], []
    for name in opts.models or (QUICK if opts.quick else FULL):
        print(f"- {name}", flush=True)
        if name.endswith("-decode"):
            base = name.removesuffix("-decode")
            decode.append(bench_decode(name, make(base), example_inputs(base, DECODE_PROMPT)[0], DECODE_NEW))
            print("  " + ", ".join(f"{k}={v}" for k, v in decode[-1].items()), flush=True)
            continue
        rows.append(bench_model(name, make(name), example_inputs(name), inductor=not opts.quick, onnx=not opts.quick,
                                search=opts.search))
        print("  " + ", ".join(f"{k}={v:.3g}" for k, v in rows[-1].items() if isinstance(v, float)), flush=True)
    if not opts.models:
        print("- compile-time scaling (Llama, hidden 64)", flush=True)
    scaling = [] if opts.models else compile_scaling((1, 2, 4) if opts.quick else (1, 2, 4, 8, 16, 32))
    elapsed = time.perf_counter() - started
    result = {"environment": env, "latency": rows, "decode": decode, "compile_scaling": scaling, "elapsed_s": elapsed}
    stem = "cpu_" + "_".join(opts.models) if opts.models else "cpu"  # a partial run keeps the full results
    if env["isa"] != "native":  # LUMINAL_ISA=avx2: results beside the native ones, the README table untouched
        stem += f"_{env['isa']}"
    if opts.search is not None:
        stem += "_search"
    (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=1))
    markdown = (f"Measured {env['date']} on {env['platform']} ({env['cpu_model']}), {env['cpu_count']} threads "
                f"(onnxruntime's intra-op threads too), ISA {describe_isa(env)}, "
                f"{describe_blas(env)}, torch {env['torch']}, onnxruntime {env['onnxruntime']}, "
                f"numpy {env['numpy']}, egglog {env['egglog']} (`python -m benchmarks`, {elapsed:.0f} s). "
                "Batch 1; medians." + (f" Search on: a budget of {opts.search:g} s per graph." if opts.search else "")
                + "\n\n" + (table(rows) if rows else "")
                + (("\n\nDecode: greedy `generate()` with the KV cache, eager against `luminal.compile_forward` "
                    "(device cpu); per new token, prefill included:\n\n" + decode_table(decode)) if decode else "")
                + "\n\nCompile time over depth (one process: from the second "
                "depth on, the repeated layer's optimized template comes from the cache, so encode/saturate/"
                "extract are paid once). Phases are `luminal.compile`'s: `export` is torch.export itself, "
                "`lower` the lowering to core ATen, the rest luminal; `backend='eager'` is Dynamo's tracing alone, "
                "the floor under any backend's first call:\n\n" + scaling_table(scaling))
    if opts.models:
        markdown = markdown.split("\n\nCompile time over depth")[0]  # no scaling in a partial run
    (RESULTS / f"{stem}.md").write_text(markdown + "\n")
    if not opts.models and env["isa"] == "native" and opts.search is None and plot(rows, RESULTS / "cpu.png"):
        markdown += "\n\n![latency](benchmarks/results/cpu.png)"
    if not opts.no_readme and not opts.quick and not opts.models and env["isa"] == "native" and opts.search is None:
        update_readme(markdown)
    print(markdown)
    print(f"wrote {RESULTS}/{stem}.json, {stem}.md{', cpu.png' if not opts.models else ''} in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
