"""Helpers for tests that put many saved models into one plan, hammer one from threads, or run
onnx's recurrence node tests over a symbolic length (imported as the suite imports op_cases.py:
tests/ is on sys.path)."""

import threading

from luminal.hlir.ops import Node, Op, toposort


def renamed_inputs(outputs, prefix):
    """The same graph with every input renamed `prefix + name`, so many models share one plan."""
    new = {}
    for n in toposort(outputs):
        if n.op is Op.INPUT:
            new[id(n)] = Node(Op.INPUT, n.dtype, n.shape, (), prefix + n.arg)
        else:
            new[id(n)] = n.replace(src=tuple(new[id(s)] for s in n.src))
    return [new[id(n)] for n in outputs]


def hammer(call, jobs: list[list]) -> list[list]:
    """Run `call` on every job list in its own thread, all released at once; results per thread.
    Any exception in a thread (egglog's panics are BaseExceptions) fails the caller."""
    barrier = threading.Barrier(len(jobs))
    results: list[list] = [[] for _ in jobs]
    errors = []

    def work(t):
        try:
            barrier.wait()
            for job in jobs[t]:
                results[t].append(call(job))
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(len(jobs))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    return results


def official_recurrence_cases() -> list:
    """onnx's RNN/GRU/LSTM node tests (the backend suite's loader)."""
    from onnx.backend.test.loader import load_node_model_tests

    return [c for c in load_node_model_tests() if c.model.graph.node[0].op_type in ("RNN", "GRU", "LSTM")]


def with_symbolic_length(case):
    """(a copy of the case's model with its sequence dim named "T" in X and, when 4-d, Y; its layout)."""
    import onnx

    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    layout = next((a.i for a in model.graph.node[0].attribute if a.name == "layout"), 0)
    model.graph.input[0].type.tensor_type.shape.dim[layout].dim_param = "T"
    y = model.graph.output[0].type.tensor_type.shape
    if len(y.dim) == 4:
        y.dim[layout].dim_param = "T"
    return model, layout
