"""What a `luminal.compile`d model checks of the model's weights at each call (`export.py`).

torch.export's semantics: the compiled model reads the weights it was compiled with in place, so
an in-place update is seen without a check, but a weight the runtime holds a packed copy of
(`CpuRuntime.pack_weights`) must be packed anew after one: torch's version counters say when.
Only the weights with packed copies are watched per call (the pack table counts its claimed
entries, so a call sees when that set may have grown and then compares every weight with the
last full comparison); a call's Python runs after its kernels have pushed these objects out of
the caches, so it reads as few as it can. A weight rebound in its module (`m.weight =
nn.Parameter(...)`, `m.double()`) is not seen, by the same semantics, and is warned of once.
"""

from __future__ import annotations

import bisect
import warnings

import torch

REBOUND_CHECK_EVERY = 16  # calls between two checks for weights rebound after the compile (`check_rebound`)


def state_owners(model, ep) -> list[tuple]:
    """(name, owning dict, key, tensor, data_ptr) of every parameter and buffer the program reads."""
    modules = dict(model.named_modules())
    owners = []
    for name, t in ep.state_dict.items():
        prefix, _, key = name.rpartition(".")
        owner = modules.get(prefix)
        for table in (getattr(owner, "_parameters", None), getattr(owner, "_buffers", None)):
            if table is not None and table.get(key) is t:
                owners.append((name, table, key, t, t.data_ptr()))
    return owners


class WeightWatch:
    """The weights of one compiled model: `owners` (`state_owners`: where the module holds them),
    `versioned` (the tensors the graph reads in place) and `compiled` (its `CompiledGraph`)."""

    def __init__(self, name: str, owners: list[tuple], versioned: tuple, compiled):
        self.name, self.owners, self.compiled = name, owners, compiled
        self.owner_tensors = tuple(t for _, _, _, t, _ in owners)
        self.owner_ptrs = [ptr for *_, ptr in owners]
        self.rebound_warned = False
        self.until_rebound_check = 0  # calls to go before the next `rebound` check
        self.versioned = versioned
        self.versions = [t._version for t in versioned]  # every weight's, at the last full comparison
        self.generation = object()  # the packed set's when `watched` was found
        self.watched: tuple[int, ...] = ()  # positions in `versioned` of the weights with packed copies

    def check_rebound(self) -> None:
        """Warn once of a weight rebound since the compile. It changes no result (the compiled
        model keeps its tensors), so it is looked for at one call in REBOUND_CHECK_EVERY: it reads
        every weight's module entry and data pointer."""
        self.until_rebound_check -= 1
        if self.until_rebound_check >= 0:
            return
        self.until_rebound_check = REBOUND_CHECK_EVERY - 1
        if not self.rebound_warned and self.rebound():
            rebound = [n for n, table, key, t, ptr in self.owners if table.get(key) is not t or t.data_ptr() != ptr]
            self.rebound_warned = True
            warnings.warn(f"luminal: {self.name}: {', '.join(rebound[:5])} replaced or converted after "
                          "luminal.compile; the compiled model keeps the tensors it was compiled with "
                          "(torch.export's semantics; in-place updates are seen): compile again to use the new ones",
                          UserWarning, stacklevel=4)

    def rebound(self) -> bool:
        """Whether a weight or buffer was replaced in its module, or its data swapped (`.to()`,
        `.data = `), since the compile."""
        return (list(map(torch.Tensor.data_ptr, self.owner_tensors)) != self.owner_ptrs
                or any(table.get(key) is not t for _, table, key, t, _ in self.owners))

    def packed_generation(self):
        """The runtime's `packed_generation` (`CpuRuntime`): None where no weight has a packed copy
        (runtimes that read every weight in place), else a value that changes when the packed set
        may have."""
        generation = getattr(self.compiled.runtime, "packed_generation", None)
        return None if generation is None else generation()

    def seen(self) -> None:
        """Tell the runtime when a weight with a packed copy changed in place since the last call
        (`weights_changed`): the watched ones at each call; every weight when the packed set may
        have grown (a weight packed since the last full comparison, perhaps changed after its
        packing) or a watched one changed."""
        generation = self.packed_generation()
        if generation is None:  # no packed copies: every weight is read in place
            return
        if generation == self.generation:
            versioned, versions = self.versioned, self.versions
            if all(versioned[i]._version == versions[i] for i in self.watched):
                return
        versions = [t._version for t in self.versioned]
        if versions != self.versions:
            self.versions = versions
            self.compiled.weights_changed()
            generation = self.packed_generation()
        self.generation, self.watched = generation, self._packed_positions()

    def _packed_positions(self) -> tuple[int, ...]:
        """The positions in `versioned` of the weights whose storage holds an address the runtime
        packed (a weight or a view of it)."""
        addresses = getattr(self.compiled.runtime, "packed_addresses", None)
        addresses = addresses() if addresses is not None else []
        if not addresses:
            return ()
        spans = sorted((t.untyped_storage().data_ptr(), t.untyped_storage().nbytes(), i)
                       for i, t in enumerate(self.versioned) if t.device.type == "cpu")
        starts = [start for start, _, _ in spans]
        found = set()
        for a in addresses:
            k = bisect.bisect_right(starts, a) - 1
            if k < 0 or a >= spans[k][0] + spans[k][1]:
                continue
            start = spans[k][0]
            while k >= 0 and spans[k][0] == start:  # every weight of that storage (tied weights share one)
                found.add(spans[k][2])
                k -= 1
        return tuple(sorted(found))
