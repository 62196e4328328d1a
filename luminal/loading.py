"""`luminal.load`: a saved `.lum` file (`luminal.saving`) bound to a runtime of this machine.

Reading is `saving.read_archive` (untrusted data, every node verified); this module only puts
the pieces together: the device registry's runtime, a `CompiledGraph`, and for a model saved by
the torch frontend its `LoadedModel`, called like the model. It sits above `saving` and
`compiler` so that neither imports the other's callers.
"""

from __future__ import annotations

import hashlib

from luminal import devices
from luminal.compiler import CompiledGraph, Report
from luminal.hlir.constants import RNG_SEED_INPUT
from luminal.saving import read_archive, saved_cubins


def load(path, device: str = "cpu"):
    """Load a compiled model saved with `.save()`; runs with NumPy (CuPy on a GPU) only.
    An unknown `device`, or one this machine cannot run, raises DeviceError before any reading."""
    entry = devices.require(device)
    meta, outputs, by_name = read_archive(path)
    inputs = [by_name[i["name"]] for i in meta["inputs"] if i["name"] in by_name]
    report = Report(name=meta.get("name", "graph"), notes=[f"loaded from {path}"])
    options = {}
    if entry.runs_kernels:
        from luminal.kernels.plan import KernelPlan

        plan = KernelPlan.build(outputs)
        if meta.get("kernels_sha1") and meta["kernels_sha1"] != hashlib.sha1(plan.source.encode()).hexdigest():
            report.notes.append("the CUDA source rendered here differs from the saved kernels.cu (another luminal version)")
        options = {"plan": plan}
        binaries = saved_cubins(path, meta, plan.source)  # of exactly this source, bytes checked
        if binaries:
            options["binaries"] = binaries
    runtime = entry.runtime(outputs, **options)
    compiled = CompiledGraph(inputs, outputs, meta["output_names"], runtime, report, device=device,
                             frontend_meta=meta.get("frontend", {}), rng_seed=by_name.get(RNG_SEED_INPUT),
                             weight_mode="seeded" if meta.get("weight_specs") else "embed")
    if compiled.frontend_meta.get("frontend") == "torch.export":  # called like the model it came from
        from luminal.frontends.torch.saved import LoadedModel

        return LoadedModel(compiled)
    return compiled
