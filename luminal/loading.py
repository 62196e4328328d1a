"""`luminal.load`: a saved `.lum` file (`luminal.saving`) bound to a runtime of this machine.

Reading is `archive.read_archive` (untrusted data, every node verified); this module only puts
the pieces together: the device registry's runtime, a `CompiledGraph`, and for a model saved by
the torch frontend its `LoadedModel`, called like the model. It sits above `saving` and
`compiler` so that neither imports the other's callers.
"""

from __future__ import annotations

import hashlib

from luminal import devices
from luminal.archive import read_archive, saved_cubins
from luminal.compiler import CompiledGraph, Report
from luminal.hlir.constants import RNG_SEED_INPUT


def load(path, device: str = "cpu", trust_binaries: bool = False, precision: str | None = None):
    """Load a compiled model saved with `.save()`; runs with NumPy (CuPy on a GPU) only.
    An unknown `device`, or one this machine cannot run, raises DeviceError before any reading.

    A file saved with `archs=` carries cubins: machine code, which no check of the file can
    make safe to run. By default they are ignored and the CUDA source rendered here from the
    verified graph is compiled; `trust_binaries=True` (for files from a source you trust) runs
    the stored cubins when they were built from exactly that source and match their sha256.
    `precision`: the loaded model's, as `luminal.compile`'s (None: `set_precision`'s at each call)."""
    entry = devices.resolve(device, precision)
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
        binaries = saved_cubins(path, meta, plan.source) if trust_binaries else None  # this source's, bytes checked
        if binaries:
            options["binaries"] = binaries
        elif meta.get("cubins") and not trust_binaries:
            report.notes.append("the file's cubins were not used (compiled from source): pass trust_binaries=True "
                                "to run a trusted file's binaries")
    runtime = entry.runtime(outputs, **options)
    compiled = CompiledGraph(inputs, outputs, meta["output_names"], runtime, report, device=entry,
                             frontend_meta=meta.get("frontend", {}), rng_seed=by_name.get(RNG_SEED_INPUT),
                             weight_mode="seeded" if meta.get("weight_specs") else "embed")
    compiled.pack_weights()  # the weights are the file's, read-only: linear layers' packed once
    if compiled.frontend_meta.get("frontend") == "torch.export":  # called like the model it came from
        from luminal.frontends.torch.saved import LoadedModel

        return LoadedModel(compiled)
    return compiled
