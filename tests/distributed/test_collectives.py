"""Graphs with torch.distributed collectives on luminal (`luminal.runtime.collectives`,
`luminal.frontends.torch.collectives`): two ranks on localhost over Gloo (`dist_ranks.spawn`,
each spawn bounded in time), and the schedule and runtime in this process."""

from __future__ import annotations

import datetime
import os
import socket

import dist_ranks
import numpy as np
import pytest
import torch

from luminal.errors import CollectiveError, UnsupportedError
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op
from luminal.runtime import collectives as rc

DEVICES = ("numpy", "cpu", "cuda-emulator")  # cuda-emulator: the code path of "cuda" (torch tensors between pieces)


# --- two ranks ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tp():
    return dist_ranks.spawn("tp_llama", DEVICES)


@pytest.mark.parametrize("device", DEVICES)
def test_tensor_parallel_llama_logits_equal_unsharded_eager(tp, device):
    for rank in tp:
        assert not isinstance(rank, dist_ranks.Raised), rank.traceback if isinstance(rank, dist_ranks.Raised) else ""
        torch.testing.assert_close(rank[device]["logits"], rank["want_logits"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_tensor_parallel_llama_greedy_generate_token_equal(tp, device):
    for rank in tp:
        assert rank[device]["tokens"] == rank["want_tokens"]
        assert len(rank[device]["tokens"][0]) == 8 + 4


@pytest.mark.parametrize("device", DEVICES)
def test_tensor_parallel_report_lists_collectives_and_waits(tp, device):
    got = tp[0][device]
    assert got["graphs"] >= 1
    first = got["collectives"][0]
    # two all-reduces per layer (after o_proj and down_proj, RowwiseParallel), on the world group
    assert [c["kind"] for c in first] == ["all_reduce"] * 4
    assert all(c["params"]["reduce_op"] == "sum" for c in first)
    for c in first:  # waited for after it was started, each before the piece that reads it
        assert c["waited_before"] > c["started_after"]
    assert "collectives: 4" in got["report"] and "waited for before piece" in got["report"]
    assert "all_reduce(reduce_op=sum) f32[1,8,64]" in got["report"]
    assert tp[1][device]["collectives"] == got["collectives"]  # the ranks placed them alike


@pytest.fixture(scope="module")
def failed():
    return dist_ranks.spawn("failures", "numpy", timeout=90)


def test_a_rank_whose_compile_fails_raises_on_every_rank(failed):
    rank0, rank1 = failed[0]["compile"], failed[1]["compile"]
    assert rank0["raised"] == "CollectiveError" and "rank 1" in rank0["message"] and "injected" in rank0["message"]
    assert rank1["raised"] == "UnsupportedError" and "injected" in rank1["message"]
    assert rank0["seconds"] < 30  # told, not timed out (the process group's timeout is 60 s)


def test_ranks_with_different_collectives_raise_on_every_rank(failed):
    for rank in failed:
        assert rank["mismatch"]["raised"] == "CollectiveError", rank["mismatch"]
        assert "different collectives" in rank["mismatch"]["message"]


def test_a_failed_compile_without_strict_runs_eagerly_on_every_rank(failed):
    assert [r["eager"] for r in failed] == [{"close": True, "seconds": r["eager"]["seconds"]} for r in failed]


def test_functional_collectives_called_directly_start_early_and_overlap(failed):
    for rank in failed:
        got = rank["funcol"]
        assert got["equal"] == [True, True, True]
        assert [c["kind"] for c in got["collectives"]] == ["all_reduce", "all_gather"]
        assert all(c["overlap"] >= 1 for c in got["collectives"])  # the exp ran while they were in flight


@pytest.fixture(scope="module")
def trained():
    return dist_ranks.spawn("data_parallel", "cpu")


@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_data_parallel_training_losses_equal_single_process_eager(trained, kind):
    want = dist_ranks.eager_losses()
    for rank in trained:
        assert not isinstance(rank, dist_ranks.Raised), rank.traceback if isinstance(rank, dist_ranks.Raised) else ""
        np.testing.assert_allclose(rank[kind]["losses"], want, rtol=1e-5, atol=1e-6)
        names = rank[kind]["graphs"]
        assert any(n.endswith("_backward") for n in names) and any(not n.endswith("_backward") for n in names)
    if kind == "ddp":  # DDPOptimizer split the model at its bucket boundaries: several forward graphs
        assert sum(not n.endswith("_backward") for n in trained[0]["ddp"]["graphs"]) >= 2


# --- one process: the schedule, the runtime on a 1-rank group -----------------------------------
def test_schedule_starts_early_waits_late_and_overlaps_independent_work():
    x = Node(Op.INPUT, DType.F32, (4,), (), "x")
    sent = Node(Op.MUL, DType.F32, (4,), (x, x))
    c = rc.new_collective("all_reduce", sent, (4,), "0", (("reduce_op", "sum"),))
    side = Node(Op.EXP2, DType.F32, (4,), (x,))
    out = Node(Op.ADD, DType.F32, (4,), (c.result, side))
    steps, outs, sources, deps = rc.schedule([out], [c])
    assert [s[0] for s in steps] == ["run", "start", "run", "wait", "run"]
    assert steps[0][1] == [sent] and steps[2][1] == [side]  # the exp runs while the all-reduce is in flight
    where = rc._placement(steps)[c.name]
    assert where == {"started_after": 0, "waited_before": 2, "overlap": 1}
    parts = rc.pieces(steps, outs, sources, deps, set())
    assert len(parts) == 3
    assert c.name in parts[2].inputs  # the last piece reads the collective's result as an input


@pytest.fixture
def one_rank():
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.fail("a process group is already initialized in the test process")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1, timeout=datetime.timedelta(seconds=30))
    try:
        yield dist.group.WORLD.group_name
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("device", DEVICES)
def test_every_collective_kind_runs_on_a_one_rank_group(one_rank, device):
    from luminal.builder import Graph

    g = Graph("one_rank")
    x = g.input("x", (4, 3))
    cases = [("all_reduce", (4, 3), (("reduce_op", "sum"),)), ("all_gather", (4, 3), (("group_size", 1),)),
             ("reduce_scatter", (4, 3), (("reduce_op", "sum"), ("group_size", 1))), ("broadcast", (4, 3), (("src", 0),)),
             ("all_to_all", (4, 3), (("output_split_sizes", (4,)), ("input_split_sizes", (4,))))]
    sent = (x * 3.0).node
    colls = [rc.new_collective(kind, sent, shape, one_rank, params) for kind, shape, params in cases]
    outs = [Node(Op.ADD, DType.F32, (4, 3), (c.result, x.node)) for c in colls]
    compiled = rc.compile_outputs([x.node], outs, None, colls, device=device, name="one_rank")
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    results = compiled(a)
    for r in results[:len(outs)]:
        np.testing.assert_allclose(r, a * 4.0)
    assert [c["kind"] for c in compiled.collectives] == [k for k, _, _ in cases]
    assert "collectives: 5" in str(compiled.report())


def test_collectives_run_on_the_kernel_devices_through_torch_tensors(one_rank):
    """The emulator's pieces take and return torch tensors, and the collectives use them as they
    are (the code path of "cuda", where they are CUDA tensors on an NCCL group)."""
    from luminal import devices

    entry = devices.get("cuda-emulator")
    if not entry.available:
        pytest.fail(f"cuda-emulator not available here: {entry.missing()}")
    x = Node(Op.INPUT, DType.F32, (4, 3), (), "x")
    sent = Node(Op.MUL, DType.F32, (4, 3), (x, x))
    colls = [rc.new_collective("all_reduce", sent, (4, 3), one_rank, (("reduce_op", "sum"),)),
             rc.new_collective("all_gather", sent, (4, 3), one_rank, (("group_size", 1),))]
    outs = [Node(Op.ADD, DType.F32, (4, 3), (c.result, x)) for c in colls]
    compiled = rc.compile_outputs([x], outs, None, colls, device="cuda-emulator", name="emulated")
    a = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    results = compiled(x=a)
    for r in results[:2]:
        assert isinstance(r, torch.Tensor)
        torch.testing.assert_close(r, a * a + a)
    assert "collectives: 2" in str(compiled.report())


def test_collective_error_is_a_named_luminal_error():
    from luminal.errors import LuminalError

    assert issubclass(CollectiveError, LuminalError)
    with pytest.raises(UnsupportedError, match="collective 'scatter'"):
        rc.new_collective("scatter", Node(Op.INPUT, DType.F32, (1,), (), "x"), (1,), "0")


@pytest.mark.parametrize("device", ("numpy", "cpu"))  # the kernel devices read host tensors by `.numpy()` still
def test_a_tensor_read_by_a_call_stays_resizable_and_outputs_never_alias_it(device):
    # FSDP2 frees its gathered parameters by resizing their storage: `Tensor.numpy()` would have
    # marked it non-resizable for good
    f = torch.compile(lambda x, w: (x @ w, x * 1), backend="luminal", options={"device": device, "strict": True})
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    y, same = f(x, w)
    torch.testing.assert_close(y, x @ w)
    assert x.untyped_storage().resizable() and w.untyped_storage().resizable()
    want = x.clone()
    x.untyped_storage().resize_(0)  # `x * 1` is a new tensor in torch: luminal's output must not alias x
    torch.testing.assert_close(same, want)
