"""Scripts run in fresh processes, one after the other, on one cache folder: what a second
process finds of the first one's compile (the compile cache, the C libraries)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def run_in_processes(script: str, cache: Path, runs: int = 2, tiered: str = "1") -> list:
    """`script` run `runs` times, one process after the other, on `cache`: all succeed."""
    env = {**os.environ, "LUMINAL_TIERED": tiered, "LUMINAL_CACHE_DIR": str(cache), "LUMINAL_COMPILE_CACHE": "1"}
    out = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
           for _ in range(runs)]
    for r in out:
        assert r.returncode == 0, r.stderr[-2000:]
    return out


def write_behind_script(device: str) -> str:
    """torch.compile on `device` with the compile cache's writes held (`tiered.quietly` waits) until
    the state after the first call is printed (PATH, STARTED), then let go and waited for (AFTER)."""
    return textwrap.dedent(f"""
        import threading
        import torch
        from luminal.compiler import STATS
        from luminal.kernels.cpu import tiered
        gate, run = threading.Event(), tiered.quietly  # the writes wait until the state is printed
        tiered.quietly = lambda fn: (gate.wait(60), run(fn))
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()
        x = torch.randn(3, 8)
        with torch.no_grad():
            f = torch.compile(m, backend="luminal", options={{"device": {device!r}}})
            y = f(x)
            compiled = STATS.compiled[-1]
            report = compiled._report  # as it stands (`report()` waits for a background build)
            print("PATH", sorted(report.cache.items()), sorted(report.background), "cache" in report.phases)
            print("STARTED", compiled._after_first is None or compiled._after_first.over())
            gate.set()
            compiled.wait_writes()
            if hasattr(compiled.runtime, "wait"):
                compiled.runtime.wait()
            print("AFTER", sorted(report.background), any("stored" in n for n in report.notes))
            torch.testing.assert_close(y, m(x), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(f(x), m(x), rtol=1e-5, atol=1e-5)
    """)
