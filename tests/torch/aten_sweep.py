"""Edge-input cases for every overload of luminal's ATen table, generated from the op schemas.

For each registered overload, its schema (`torch.ops.aten.<op>.<overload>._schema`) decides the
arguments: the first tensor argument is the *subject*, in each edge layout (0-d, empty, a
broadcast (expanded) view, a transposed (non-contiguous) view, a flipped (negative-stride)
view) and each dtype (float32 with NaN/inf/-0.0, int64, int32, bool); further tensor
arguments are companions that broadcast against it (an index for `index`/`gather`-style
arguments, a bool tensor for masks and conditions); `dim` is -1, numbers 2 (2.5 for float
subjects), required bools False. The views are made *inside* the graph, so the op sees
luminal's strided views, not a copied input. A case torch itself rejects is dropped;
overloads whose schema needs anything else are listed by `not_generated()` with the argument
that stopped the generator.
"""

from __future__ import annotations

import math

import torch

from luminal.frontends.torch.aten_table import table

DTYPES = {"f32": torch.float32, "i64": torch.int64, "i32": torch.int32, "bool": torch.bool}
LAYOUTS = ["0d", "empty", "expand", "t", "flip"]
# base shapes: the subject's input, and the view made in the graph (the op sees (3, 4) or so)
BASE = {"0d": (), "empty": (0, 3), "expand": (3, 1), "t": (4, 3), "flip": (3, 4)}


def view(layout: str, x: torch.Tensor) -> torch.Tensor:
    if layout == "expand":
        return x.expand(3, 4)
    if layout == "t":
        return x.t()
    if layout == "flip":
        return x.flip(-1)
    return x


def values(shape, dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    n = math.prod(shape)
    if dtype is torch.bool:
        return (torch.rand(n, generator=g) > 0.5).reshape(shape)
    if dtype.is_floating_point:
        special = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.5, -2.5, 1.0, 3.0])
        x = torch.randn(n, generator=g) * 2
        x[: min(n, 8)] = special[: min(n, 8)][torch.randperm(min(n, 8), generator=g)]
        return x.reshape(shape).to(dtype)
    return torch.randint(-5, 6, (n,), generator=g).reshape(shape).to(dtype)


def _schema(key: str):
    name, overload = key.split(".")
    return getattr(getattr(torch.ops.aten, name), overload)


class NoGenerator(Exception):
    """The schema asks for an argument the generic generator does not make."""


class SkipLayout(Exception):
    """This layout makes no case for the op (torch rejects it for every input)."""


def _args(op, layout: str, dtype, inputs: list):
    """The call's arguments: tensors appended to `inputs` (base tensors) and referenced by
    index, views applied in the graph. Returns a builder (list of base tensors -> args)."""
    schema = op._schema
    args, kwargs = [], {}
    subject_shape = view(layout, torch.empty(BASE[layout])).shape
    nd = len(subject_shape)
    seen_subject = False
    for a in schema.arguments:
        t = str(a.type)
        if a.has_default_value() and a.name not in ("dim",):
            continue
        if a.kwarg_only and a.has_default_value():
            continue
        if t == "Tensor":
            if not seen_subject:
                i = len(inputs)
                inputs.append(values(BASE[layout], dtype, seed=len(inputs)))
                args.append(("subject", i))
                seen_subject = True
            elif a.name in ("index", "indices"):
                i = len(inputs)
                n = subject_shape[-1] if nd else 1
                idx = torch.randint(-n, n, subject_shape if nd else (), generator=torch.Generator().manual_seed(i)) if n else \
                    torch.zeros(subject_shape, dtype=torch.int64)
                inputs.append(idx.to(torch.int64))
                args.append(("plain", i))
            elif a.name in ("mask", "condition"):
                i = len(inputs)
                inputs.append(values(subject_shape[-1:] if nd else (), torch.bool, seed=i))
                args.append(("plain", i))
            else:  # a companion broadcasting against the subject along its last dim
                i = len(inputs)
                inputs.append(values(subject_shape[-1:] if nd else (), dtype, seed=i))
                args.append(("plain", i))
        elif t == "List[Tensor]":  # cat / stack: the subject twice
            if seen_subject:
                raise NoGenerator(f"argument {a.name}: {t} after the subject")
            i = len(inputs)
            inputs.append(values(BASE[layout], dtype, seed=len(inputs)))
            args.append(("subject-list", i))
            seen_subject = True
        elif t == "List[Optional[Tensor]]":  # index / index_put: one int64 index on the first dim
            i = len(inputs)
            n = subject_shape[0] if nd else 0
            if not nd:
                raise SkipLayout("indices of a 0-d tensor")
            inputs.append(torch.randint(-n, n, (2,), generator=torch.Generator().manual_seed(i)) if n else
                          torch.zeros((0,), dtype=torch.int64))
            args.append(("index-list", i))
        elif a.name in FILL and a.kwarg_only:
            kwargs[a.name] = FILL[a.name](tuple(subject_shape), dtype)
        elif a.name in FILL:
            args.append(("const", FILL[a.name](tuple(subject_shape), dtype)))
        elif a.name == "dim" and t in ("int", "Optional[int]"):
            args.append(("const", -1 if nd else 0))
        elif a.name == "dim" and "List[int]" in t:
            args.append(("const", [-1] if nd else []))
        elif t in ("number", "Optional[number]"):
            args.append(("const", 2.5 if dtype.is_floating_point else 2))
        elif t == "bool":
            args.append(("const", False))
        else:
            raise NoGenerator(f"argument {a.name}: {t}")
    if not seen_subject:
        raise NoGenerator("no tensor argument")
    return args, kwargs


# schema arguments filled by name, from the subject's shape (the op sees that shape)
FILL = {
    "dims": lambda s, dt: list(range(len(s)))[::-1],
    "shifts": lambda s, dt: [1] * len(s),
    "size": lambda s, dt: list(s),
    "shape": lambda s, dt: list(s),
    "repeats": lambda s, dt: [2] * len(s),
    "pad": lambda s, dt: [1, 2] if s else [],
    "dim0": lambda s, dt: 0,
    "dim1": lambda s, dt: -1,
    "index": lambda s, dt: 0,
    "start": lambda s, dt: 0,
    "length": lambda s, dt: 1,
    "split_size": lambda s, dt: 2,
    "split_sizes": lambda s, dt: [1, s[-1] - 1] if s and s[-1] else [0],
    "sizes": lambda s, dt: [1, s[-1]] if s else [],
    "k": lambda s, dt: 1,
    "dimension": lambda s, dt: -1,
    "step": lambda s, dt: 1,
    "rounding_mode": lambda s, dt: "floor",
    "reduce": lambda s, dt: "add",
    "p": lambda s, dt: 0.0,
    "train": lambda s, dt: False,
    "stable": lambda s, dt: True,
    "normalized_shape": lambda s, dt: [s[-1]] if s else [],
    "dtype": lambda s, dt: torch.int32 if dt.is_floating_point else torch.float32,
    "device": lambda s, dt: torch.device("cpu"),
    "weight": lambda s, dt: None,
    "eps": lambda s, dt: 1e-5,
    "momentum": lambda s, dt: 0.1,
    "bias": lambda s, dt: None,
}


def _call(op, layout, args, xs, kwargs=None):
    real = []
    for kind, v in args:
        if kind == "subject-list":
            real.append([view(layout, xs[v]), view(layout, xs[v])])
        elif kind == "index-list":
            real.append([xs[v]])
        elif kind == "subject":
            real.append(view(layout, xs[v]))
        elif kind == "plain":
            real.append(xs[v])
        else:
            real.append(v)
    return op(*real, **(kwargs or {}))


class Case:
    def __init__(self, key, layout, dtype_name, op, args, slots, kwargs=None):
        self.key, self.layout, self.dtype_name = key, layout, dtype_name
        self.op, self.args, self.slots, self.kwargs = op, args, slots, kwargs or {}

    @property
    def id(self) -> str:
        return f"{self.key}/{self.layout}/{self.dtype_name}"

    def run(self, xs):
        return _call(self.op, self.layout, self.args, xs, self.kwargs)


# overloads whose eager kernel segfaults on some generated edge inputs (flipped f32 views): the
# process would die, so they are not driven here
EAGER_CRASHES = {"_native_batch_norm_legit.no_stats"}


def overloads() -> list[str]:
    return sorted(k for k in table() if isinstance(k, str) and "::" not in k)


def generate():
    """(cases, inputs, not_generated): every case whose eager call succeeds."""
    cases, inputs, skipped = [], [], {}
    for key in overloads():
        if table()[key].__module__.endswith(".aten_random"):  # values nothing compares: test_random_torch.py
            skipped[key] = "random values"
            continue
        if table()[key].__module__.endswith(".aten_backward"):  # needs consistent saved tensors: test_training.py
            skipped[key] = "a backward op"
            continue
        if key in EAGER_CRASHES:
            skipped[key] = "eager torch crashes on generated inputs"
            continue
        try:
            op = _schema(key)
        except AttributeError:
            skipped[key] = "no such overload in this torch"
            continue
        for layout in LAYOUTS:
            for dname, dtype in DTYPES.items():
                local: list = []
                try:
                    args, kwargs = _args(op, layout, dtype, local)
                except NoGenerator as exc:
                    skipped[key] = str(exc)
                    break
                except SkipLayout:
                    continue
                slots = list(range(len(inputs), len(inputs) + len(local)))
                args = [(k, slots[v] if k in ("subject", "plain", "subject-list", "index-list") else v) for k, v in args]
                case = Case(key, layout, dname, op, args, slots, kwargs)
                try:
                    with torch.no_grad():
                        out = case.run(inputs + local)
                except Exception:  # noqa: BLE001 - torch rejects this input: not a case
                    continue
                if not _tensors_only(out):
                    continue
                inputs.extend(local)
                cases.append(case)
            if key in skipped:
                break
    return cases, inputs, skipped


def _tensors_only(out) -> bool:
    if isinstance(out, torch.Tensor):
        return True
    return isinstance(out, (tuple, list)) and len(out) > 0 and all(isinstance(o, torch.Tensor) for o in out)


class Batch(torch.nn.Module):
    """The cases as one graph: inputs are only the slots the cases use."""

    def __init__(self, cases):
        super().__init__()
        self.cases = cases
        self.slots = sorted({s for c in cases for s in c.slots})

    def forward(self, *xs):
        by_slot = dict(zip(self.slots, xs))
        full = _Lookup(by_slot)
        return tuple(c.run(full) for c in self.cases)


class _Lookup:
    def __init__(self, d):
        self.d = d

    def __getitem__(self, i):
        return self.d[i]


UNINITIALIZED = {"empty.memory_format", "empty_like.default", "empty_strided.default", "new_empty.default",
                 "new_empty_strided.default"}  # torch's values are whatever memory held: shape and dtype only


def compare(got, want, values_too: bool = True) -> str | None:
    """None when equal (exact for integer and bool, 1e-5 for float), else why not."""
    gs = got if isinstance(got, (tuple, list)) else [got]
    ws = want if isinstance(want, (tuple, list)) else [want]
    if len(gs) != len(ws):
        return f"{len(gs)} outputs, torch has {len(ws)}"
    for g, w in zip(gs, ws):
        if g.dtype != w.dtype or g.shape != w.shape:
            return f"{g.dtype}{tuple(g.shape)} != torch's {w.dtype}{tuple(w.shape)}"
        if not values_too:
            continue
        if w.is_complex():  # compared as their real planes
            g, w = torch.view_as_real(g), torch.view_as_real(w)
        if w.dtype.is_floating_point:
            if not torch.allclose(g, w, atol=1e-5, rtol=1e-5, equal_nan=True):
                return "values differ"
        elif not torch.equal(g, w):
            return "values differ"
    return None


def run_batch(cases, inputs, device: str) -> dict:
    """case id -> failure (an error's type and first line, or a mismatch); compiles the cases
    as one graph, and splits a batch in halves where it fails to find the failing cases."""
    import luminal
    from luminal.errors import LuminalError

    if not cases:
        return {}
    model = Batch(cases)
    xs = tuple(inputs[s] for s in model.slots)
    try:
        with torch.no_grad():
            want = model(*xs)
            got = luminal.compile(model, xs, device=device, optimize=False)(*xs)
    except LuminalError as exc:
        if len(cases) == 1:
            return {cases[0].id: f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
        half = len(cases) // 2
        return {**run_batch(cases[:half], inputs, device), **run_batch(cases[half:], inputs, device)}
    except Exception as exc:  # noqa: BLE001 - not a luminal error: reported as such (a bug)
        if len(cases) == 1:
            return {cases[0].id: f"NOT A LUMINAL ERROR {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"}
        half = len(cases) // 2
        return {**run_batch(cases[:half], inputs, device), **run_batch(cases[half:], inputs, device)}
    out = {}
    for c, g, w in zip(cases, got, want):
        why = compare(g, w, c.key not in UNINITIALIZED)
        if why:
            out[c.id] = f"wrong answer: {why}"
    return out
