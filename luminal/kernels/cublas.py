"""The plan's "gemm" extern step on the GPU: a MatMul as one cuBLAS call, and a CPU stand-in
that implements cuBLAS's contract, so the argument conventions are tested without a GPU.

    desc = GemmDesc.of(node, inputs)     # symbolic: row-major A/B views, M/N/K, batch, dtypes
    calls = desc.bind(bindings)          # `CublasGemm`s (column-major arguments), or None
    cupy_gemm(call, buffers, stream)     # cublasGemmStridedBatchedEx on CuPy's buffers and stream (ctypes)
    standin_gemm(call, buffers)          # the same arguments, run by NumPy over the buffers

README's "GEMMs on cuBLAS" has the conventions. `bind` gives None (the generated kernel runs) for
a layout cuBLAS cannot express, and for M <= `gemv_max_m()` (the GEMV kernel). An f32 GEMM at
precision "float64" is widened (COMPUTE_64F with `dtype` F32): cuBLAS has no f32 GEMM with a
double accumulator, so f64 copies go through a DGEMM and are rounded once.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
import types
from dataclasses import dataclass

import numpy as np

from luminal.errors import DeviceError, LuminalError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node

# cuBLAS / CUDA library constants (cublas_api.h, library_types.h): a stable ABI
OP_N, OP_T = 0, 1
CUDA_R = {DType.F32: 0, DType.F64: 1, DType.F16: 2, DType.BF16: 14}
COMPUTE_32F, COMPUTE_64F = 68, 70
GEMM_DEFAULT = -1
DEFAULT_MATH = 0  # cublasMath_t CUBLAS_DEFAULT_MATH (CUBLAS_TF32_TENSOR_OP_MATH = 3 would allow TF32)
INT_MAX = 2**31 - 1  # m, n, k, lda, ldb, ldc and batchCount are C `int`s
MAX_CALLS = 64  # cuBLAS calls one MatMul may take (batch dims that do not collapse are looped)
WORKSPACE_BYTES = 32 << 20  # per cuBLAS handle, set explicitly so a graph capture never allocates


class CublasContractError(LuminalError):
    """Arguments that break cuBLAS's contract (a planner bug: out of bounds, or INVALID_VALUE)."""


def gemv_max_m() -> int:
    """The largest M the GEMV kernel takes instead of cuBLAS: `LUMINAL_GEMV_MAX_M`, at most `GEMV_ROWS`."""
    from luminal.kernels.render.gemv import GEMV_ROWS

    try:
        value = int(os.environ.get("LUMINAL_GEMV_MAX_M", str(GEMV_ROWS)))
    except ValueError:
        raise DeviceError(f"LUMINAL_GEMV_MAX_M must be an integer, not {os.environ['LUMINAL_GEMV_MAX_M']!r}") from None
    return max(0, min(value, GEMV_ROWS))


@dataclass(frozen=True)
class CublasGemm:
    """The arguments of one `cublasGemmStridedBatchedEx` (column-major), with buffers as
    (input slot, element offset): slot -1 is the output, k >= 0 the kernel's k-th input."""

    transa: int
    transb: int
    m: int
    n: int
    k: int
    a: tuple[int, int]  # (slot, element offset)
    lda: int
    stride_a: int
    b: tuple[int, int]
    ldb: int
    stride_b: int
    c: tuple[int, int]
    ldc: int
    stride_c: int
    batch: int
    dtype: DType  # of A, B and C
    compute: int  # COMPUTE_32F or COMPUTE_64F (with `dtype` F32: widened, see the module docstring)

    @property
    def widened(self) -> bool:
        return self.compute == COMPUTE_64F and self.dtype is not DType.F64


@dataclass(frozen=True)
class _Operand:
    slot: int  # index into the kernel's inputs
    offset: object  # dims, symbolic
    row_stride: object
    col_stride: object
    batch_strides: tuple
    mask: tuple | None


@dataclass(frozen=True)
class GemmDesc:
    """A MatMul node as a row-major GEMM: `out[b] = A[b] . B[b]`, A[b] M x K, B[b] K x N, out
    contiguous; batch dims, strides and offsets symbolic, bound per call by `bind`."""

    a: _Operand
    b: _Operand
    batch: tuple
    m: object
    n: object
    k: object
    dtype: DType
    kind: str = "gemm"

    @staticmethod
    def of(node: Node, inputs: list[Node]) -> GemmDesc | None:
        """The description of MatMul `node` whose kernel reads `inputs` (None: no cuBLAS type)."""
        from luminal.kernels.render.cstyle import view_of

        if node.dtype not in CUDA_R:
            return None
        ops = []
        for x in node.src:
            base, st = view_of(x)
            if base.dtype is not node.dtype or not any(base is i for i in inputs):
                return None
            slot = next(k for k, i in enumerate(inputs) if i is base)
            ops.append(_Operand(slot, st.offset, st.strides[-2], st.strides[-1], tuple(st.strides[:-2]),
                                st.mask))
        a, b = node.src
        return GemmDesc(ops[0], ops[1], tuple(node.shape[:-2]), node.shape[-2], node.shape[-1], a.shape[-1],
                        node.dtype)

    def bind(self, bindings: dict[str, int], gemv: bool = True,
             precision: str = "float32") -> tuple[CublasGemm, ...] | None:
        """The cuBLAS calls under `bindings` (one per index of the batch dims that do not collapse,
        at most `MAX_CALLS`), or None where the generated kernel must run."""
        def ev(d):
            return int(sym.evaluate(d, bindings))

        widen = self.dtype is DType.F32 and precision == "float64"
        m, n, k = ev(self.m), ev(self.n), ev(self.k)
        batch = [ev(d) for d in self.batch]
        count = int(np.prod(batch, dtype=np.int64))
        if gemv and not widen and m <= gemv_max_m():
            return None
        if min(m, n, count) <= 0 or max(m, n, k, count) > INT_MAX:
            return None
        for split in range(len(batch) + 1):  # batch[:split] looped over, batch[split:] strided
            outer = batch[:split]
            if int(np.prod(outer, dtype=np.int64)) > MAX_CALLS:
                return None
            ops = [_matrix(op, rows, cols, batch[split:], ev) for op, rows, cols in ((self.a, m, k), (self.b, k, n))]
            if None not in ops:
                break
        else:
            return None
        (a_slot, a_off, a_tr, lda, sa), (b_slot, b_off, b_tr, ldb, sb) = ops
        inner = count // max(1, int(np.prod(outer, dtype=np.int64)))
        compute = COMPUTE_64F if self.dtype is DType.F64 or widen else COMPUTE_32F
        a_outer = [ev(s) for s in self.a.batch_strides[:split]]
        b_outer = [ev(s) for s in self.b.batch_strides[:split]]
        calls = []
        for flat, idx in enumerate(np.ndindex(*outer)):
            a_at = a_off + sum(i * s for i, s in zip(idx, a_outer))
            b_at = b_off + sum(i * s for i, s in zip(idx, b_outer))
            # row-major C = A.B is column-major C^T = B^T.A^T: cuBLAS's A is our B, its B our A
            calls.append(CublasGemm(transa=b_tr, transb=a_tr, m=n, n=m, k=k, a=(b_slot, b_at), lda=ldb, stride_a=sb,
                                    b=(a_slot, a_at), ldb=lda, stride_b=sa, c=(-1, flat * inner * m * n), ldc=n,
                                    stride_c=m * n, batch=inner, dtype=self.dtype, compute=compute))
        return tuple(calls)


def _matrix(op: _Operand, rows: int, cols: int, batch: list[int], ev):
    """(slot, offset, op, ld, batch stride) of a row-major `rows x cols` operand view, or None."""
    if op.mask is not None:
        return None  # a padded view reads zeros no pointer holds
    sr, sc, off = ev(op.row_stride), ev(op.col_stride), ev(op.offset)
    if min(sr, sc, off) < 0 or any(ev(s) < 0 for s in op.batch_strides):
        return None
    sr, sc = (1 if rows == 1 else sr), (1 if cols == 1 else sc)  # a unit dim's stride is never used (a K = 1 view's may be 0)
    if sc == 1 and (sr >= max(1, cols) or rows <= 1):  # row-major: column-major it is its transpose, op N
        tr, ld = OP_N, (sr if rows > 1 else max(1, cols))
    elif sr == 1 and (sc >= max(1, rows) or cols <= 1):  # a transposed view: column-major as stored, op T
        tr, ld = OP_T, (sc if cols > 1 else max(1, rows))
    else:
        return None
    stride = _collapse([ev(s) for s in op.batch_strides[len(op.batch_strides) - len(batch):]], batch)
    if stride is None or ld > INT_MAX:
        return None
    return op.slot, off, tr, ld, stride


def _collapse(strides: list[int], sizes: list[int]) -> int | None:
    """One stride S with offset(b) = flat(b) * S for every batch index, or None."""
    dims = [(s, d) for s, d in zip(strides, sizes) if d != 1]
    if not dims:
        return 0
    if all(s == 0 for s, _ in dims):
        return 0  # broadcast over the whole batch
    unit = dims[-1][0]
    inner = 1
    for s, d in reversed(dims):
        if s != unit * inner:
            return None
        inner *= d
    return unit if unit >= 0 else None


# --- the contract, checked ----------------------------------------------------------------------
def check_contract(call: CublasGemm, sizes: dict[int, int]) -> None:
    """Raise `CublasContractError` where cuBLAS would reject the call or touch memory outside
    the buffers (`sizes`: slot -> elements in that buffer)."""
    c = call
    if c.transa not in (OP_N, OP_T) or c.transb not in (OP_N, OP_T):
        raise CublasContractError(f"bad transpose flags {c.transa}, {c.transb}")
    for name, v in (("m", c.m), ("n", c.n), ("k", c.k), ("batchCount", c.batch)):
        if not 0 <= v <= INT_MAX:
            raise CublasContractError(f"{name} = {v} is not a non-negative C int")
    a_rows = c.m if c.transa == OP_N else c.k  # rows of A as stored (column-major)
    b_rows = c.k if c.transb == OP_N else c.n
    for name, ld, rows in (("lda", c.lda, a_rows), ("ldb", c.ldb, b_rows), ("ldc", c.ldc, c.m)):
        if not max(1, rows) <= ld <= INT_MAX:
            raise CublasContractError(f"{name} = {ld} < max(1, {rows}) rows of the stored matrix")
    if c.batch > 1 and abs(c.stride_c) < c.ldc * c.n:
        raise CublasContractError(f"strideC = {c.stride_c} makes the batches of C overlap (ldc * n = {c.ldc * c.n})")
    if c.m == 0 or c.n == 0 or c.batch == 0:
        return
    a_cols = c.k if c.transa == OP_N else c.m
    b_cols = c.n if c.transb == OP_N else c.k
    for name, (slot, off), ld, rows, cols, stride in (
            ("A", c.a, c.lda, a_rows, a_cols, c.stride_a), ("B", c.b, c.ldb, b_rows, b_cols, c.stride_b),
            ("C", c.c, c.ldc, c.m, c.n, c.stride_c)):
        if rows == 0 or cols == 0:
            continue
        first = off + min(0, stride * (c.batch - 1))
        last = off + max(0, stride * (c.batch - 1)) + (rows - 1) + (cols - 1) * ld
        if slot not in sizes:
            raise CublasContractError(f"{name}: no buffer in slot {slot}")
        if first < 0 or last >= sizes[slot]:
            raise CublasContractError(f"{name} reads elements {first}..{last} of a buffer of {sizes[slot]}")


# --- the CPU stand-in ---------------------------------------------------------------------------
def _col_major(flat, off: int, ld: int, stride: int, rows: int, cols: int, batch: int, tr: int, xp=np):
    """op(X) of each batch, (batch, rows', cols'), as a strided view of `flat` (column-major X)."""
    item = flat.itemsize
    view = xp.lib.stride_tricks.as_strided(flat[off:], (batch, rows, cols), (stride * item, item, ld * item))
    return view.transpose(0, 2, 1) if tr == OP_T else view


def standin_gemm(call: CublasGemm, buffers: dict[int, np.ndarray]) -> None:
    """Run `call` on host buffers (slot -> array; viewed flat) exactly as cuBLAS defines it:
    C = op(A) . op(B) per batch, column-major, alpha 1 and beta 0 (C is not read)."""
    for s, b in buffers.items():
        if not b.flags.c_contiguous:
            raise CublasContractError(f"buffer {s} is not contiguous memory")
        if b.dtype != call.dtype.numpy and not (call.dtype is DType.BF16 and b.dtype == np.uint16):
            raise CublasContractError(f"buffer {s} holds {b.dtype}, the call says {call.dtype.short}")
    flat = {s: b.reshape(-1) for s, b in buffers.items()}
    check_contract(call, {s: b.size for s, b in flat.items()})
    _strided_gemm(call, flat, np)


def _strided_gemm(c: CublasGemm, flat: dict, xp) -> None:
    """`c` over flat buffers of `xp` (NumPy: the stand-in; CuPy: a widened call), as cuBLAS
    defines it, in the accumulator `c.compute` names."""
    if c.m == 0 or c.n == 0 or c.batch == 0:
        return
    acc = np.float64 if c.compute == COMPUTE_64F else np.float32
    dt = c.dtype.numpy
    a_rows, a_cols = (c.m, c.k) if c.transa == OP_N else (c.k, c.m)
    b_rows, b_cols = (c.k, c.n) if c.transb == OP_N else (c.n, c.k)
    a = _col_major(flat[c.a[0]].view(dt), c.a[1], c.lda, c.stride_a, a_rows, a_cols, c.batch, c.transa, xp)
    b = _col_major(flat[c.b[0]].view(dt), c.b[1], c.ldb, c.stride_b, b_rows, b_cols, c.batch, c.transb, xp)
    if c.k == 0:
        prod = xp.zeros((c.batch, c.m, c.n), acc)
    else:
        prod = xp.matmul(a.astype(acc), b.astype(acc))
    out = flat[c.c[0]].view(dt)
    item = out.itemsize
    dst = xp.lib.stride_tricks.as_strided(out[c.c[1]:], (c.batch, c.m, c.n), (c.stride_c * item, item, c.ldc * item))
    dst[...] = prod.astype(dt)


# --- the real call ------------------------------------------------------------------------------
_workspaces: dict = {}  # cuBLAS handle -> its workspace (kept alive with the handle's thread)
_ws_lock = threading.Lock()
# The cuBLAS entry points cupy_gemm calls, named as CuPy's bindings name them -> (C symbol,
# argument types). They are called through ctypes on the libcublas CuPy loaded, not through
# `cupy_backends.cuda.libs.cublas`: its setStream (which every one of its calls makes) refuses a
# stream under capture ("calling cuBLAS API during stream capture is currently unsupported"), and
# CuPy 14.2 binds no setWorkspace. cuBLAS itself captures a GEMM whose workspace is set and whose
# alpha and beta are host scalars (read when it is enqueued).
_P, _I, _L, _Z = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_size_t
_C_ENTRY = {
    "setStream": ("cublasSetStream_v2", (_P, _P)),
    "setWorkspace": ("cublasSetWorkspace_v2", (_P, _P, _Z)),
    "getMathMode": ("cublasGetMathMode", (_P, ctypes.POINTER(_I))),
    "setMathMode": ("cublasSetMathMode", (_P, _I)),
    "gemmStridedBatchedEx": ("cublasGemmStridedBatchedEx",
                             (_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _L, _P, _I, _I, _L, _P, _P, _I, _I, _L, _I, _I, _I)),
}


def _libcublas():
    """CuPy's libcublas: a handle is only valid in the copy of the library that made it, and a
    process with torch may map two (torch's wheel and CuPy's). First the library CuPy's cuBLAS
    module links (dlsym through the module's handle searches its dependencies), else one
    already loaded, else one found by its soname."""
    try:
        from cupy_backends.cuda.libs import cublas as cupy_cublas

        own = ctypes.CDLL(cupy_cublas.__file__)
        own.cublasGemmStridedBatchedEx  # noqa: B018 - resolved through the module's own dependencies
        return own
    except (ImportError, OSError, AttributeError):
        pass
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/libcublas.so" in line}
    except OSError:
        paths = set()
    for name in sorted(paths) + ["libcublas.so.13", "libcublas.so.12", "libcublas.so"]:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise DeviceError("cuBLAS: no libcublas is loaded in this process or can be found by name")


@functools.cache
def _c_bindings():
    """A namespace of the `_C_ENTRY` functions with CuPy's names and calling conventions
    (getMathMode returns the mode); a failing status is a DeviceError naming the function."""
    lib = _libcublas()

    def bind(name: str):
        symbol, argtypes = _C_ENTRY[name]
        c_fn = getattr(lib, symbol)
        c_fn.argtypes, c_fn.restype = argtypes, ctypes.c_int

        def call(*args):
            mode = ctypes.c_int()
            status = c_fn(args[0], ctypes.byref(mode)) if name == "getMathMode" else c_fn(*args)
            if status:
                raise DeviceError(f"cuBLAS: {symbol} returned status {status}")
            return mode.value if name == "getMathMode" else None
        return call

    return types.SimpleNamespace(**{name: bind(name) for name in _C_ENTRY})


def cupy_gemm(call: CublasGemm, buffers: dict, stream, cublas=None) -> None:
    """`call` through cuBLAS on `stream` (inside a CUDA graph capture too). `buffers`: slot ->
    CuPy array. `cublas` replaces the ctypes bindings of `_c_bindings` (tests)."""
    import cupy

    if cublas is None:
        cublas = _c_bindings()
    check_contract(call, {s: int(b.size) for s, b in buffers.items()})
    c = call
    if c.widened:  # no cuBLAS type takes it: CuPy's f64 copies and DGEMM, on the stream
        with stream:
            _strided_gemm(c, {s: b.reshape(-1) for s, b in buffers.items()}, cupy)
        return
    handle = cupy.cuda.device.get_cublas_handle()
    with _ws_lock:
        if handle not in _workspaces:  # an explicit workspace: no allocation inside a capture
            _workspaces[handle] = cupy.empty((WORKSPACE_BYTES,), np.uint8)
        ws = _workspaces[handle]
    # as PyTorch does before each call: the stream, then the workspace (setting a stream resets
    # the handle's workspace to cuBLAS's default pool, which may allocate during a capture)
    cublas.setStream(handle, getattr(stream, "ptr", 0))
    cublas.setWorkspace(handle, ws.data.ptr, WORKSPACE_BYTES)
    scalar = np.float64 if c.compute == COMPUTE_64F else np.float32
    one, zero = np.ones(1, scalar), np.zeros(1, scalar)  # host pointer mode: read at the call

    def ptr(slot_off):
        buf = buffers[slot_off[0]]
        return buf.data.ptr + slot_off[1] * buf.itemsize

    t = CUDA_R[c.dtype]
    pedantic = c.compute == COMPUTE_32F and c.dtype is DType.F32  # no TF32, whatever the handle's mode
    mode = cublas.getMathMode(handle) if pedantic else None
    if pedantic and mode != DEFAULT_MATH:
        cublas.setMathMode(handle, DEFAULT_MATH)
    cublas.gemmStridedBatchedEx(
        handle, c.transa, c.transb, c.m, c.n, c.k, one.ctypes.data,
        ptr(c.a), t, c.lda, c.stride_a, ptr(c.b), t, c.ldb, c.stride_b, zero.ctypes.data,
        ptr(c.c), t, c.ldc, c.stride_c, c.batch, c.compute, GEMM_DEFAULT)
    if pedantic and mode != DEFAULT_MATH:
        cublas.setMathMode(handle, mode)

