"""Complex tensors as pairs of real planes (`frontends/torch/aten_complex.py`) and the FFTs on the
one DFT lowering (`builder/spectral.py`): torch.fft's transforms at every norm, FNet, an STFT
front-end, complex inputs and outputs, special values, and the named error for a complex op
luminal does not lower. Compared with eager torch (pocketfft in the planes' precision: luminal's
float64 GEMMs are nearer exact, so the bound is a few float32 ulps of the largest magnitude)."""

import numpy as np
import pytest
import torch

import luminal
from luminal.errors import UnsupportedError

DEVICES = ["numpy", "cpu"]


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _close(got, want):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        gr, wr = (torch.view_as_real(g), torch.view_as_real(w)) if w.is_complex() else (g, w)
        assert torch.equal(gr.isnan(), wr.isnan())
        finite = wr.isfinite()
        assert torch.equal(gr[~finite & ~wr.isnan()], wr[~finite & ~wr.isnan()])
        eps = 1e-12 if wr.dtype == torch.float64 else 4e-6
        scale = max(wr[finite].abs().max().item(), 1.0) if finite.any() else 1.0
        assert (gr[finite] - wr[finite]).abs().max().item() <= eps * scale


TRANSFORMS = {
    "fft": lambda x: torch.fft.fft(x),
    "fft_n_pad": lambda x: torch.fft.fft(x, n=13),
    "fft_n_crop": lambda x: torch.fft.fft(x, n=5, dim=0),
    "ifft": lambda x: torch.fft.ifft(torch.fft.fft(x)),
    "rfft": lambda x: torch.fft.rfft(x),
    "irfft_even": lambda x: torch.fft.irfft(torch.fft.rfft(x), n=x.shape[-1]),
    "irfft_odd": lambda x: torch.fft.irfft(torch.fft.rfft(x), n=9),
    "fft2": lambda x: torch.fft.fft2(x),
    "ifftn": lambda x: torch.fft.ifftn(x.to(torch.complex64 if x.dtype == torch.float32 else torch.complex128)),
    "rfftn_irfftn": lambda x: torch.fft.irfftn(torch.fft.rfftn(x), s=x.shape[-2:]),
    "hfft": lambda x: torch.fft.hfft(torch.fft.rfft(x)),
    "fftshift": lambda x: torch.fft.fftshift(torch.fft.fft(x), dim=-1),
}


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
@pytest.mark.parametrize("name", sorted(TRANSFORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_fft_transforms_equal_torch(name, norm, dtype):
    import functools

    fft = torch.fft
    fn = TRANSFORMS[name]
    patched = {k: getattr(fft, k) for k in ("fft", "ifft", "rfft", "irfft", "fft2", "ifftn", "rfftn", "irfftn", "hfft")}

    def with_norm(*xs):  # every transform in `fn` at this norm
        try:
            for k, f in patched.items():
                setattr(fft, k, functools.partial(f, norm=norm))
            return fn(*xs)
        finally:
            for k, f in patched.items():
                setattr(fft, k, f)

    x = torch.randn(6, 11, dtype=dtype)
    want = with_norm(x)
    for device in DEVICES:
        _close(luminal.compile(Fn(with_norm), (x,), device=device)(x), want)


def test_fnet_forward_equals_eager():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.FNetConfig(vocab_size=120, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                  max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.FNetModel(cfg).eval()
    ids = torch.randint(0, 120, (2, 24))
    wrapped = Fn(lambda ids: model(ids).last_hidden_state)
    with torch.no_grad():
        want = wrapped(ids)
        for device in DEVICES:
            _close(luminal.compile(wrapped, (ids,), device=device)(ids), want)
        before = luminal.stats()["graphs_compiled"]
        got = torch.compile(wrapped, backend="luminal", options={"device": "cpu", "strict": True})(ids)
        assert luminal.stats()["graphs_compiled"] > before
        _close(got, want)


def test_stft_log_mel_front_end_equals_eager():
    window = torch.hann_window(128)
    mel = torch.rand(65, 20)

    def front_end(audio):
        spec = torch.stft(audio, 128, 32, window=window, return_complex=True)
        power = spec.abs().pow(2)
        return torch.log(power.transpose(-1, -2) @ mel + 1e-6)

    audio = torch.randn(2, 1600)
    want = front_end(audio)
    for device in DEVICES:
        got = luminal.compile(Fn(front_end), (audio,), device=device)(audio)
        assert (got - want).abs().max().item() < 1e-4  # log of a power spectrum: a few f32 ulps of ~1e3
    got = torch.compile(Fn(front_end), backend="luminal", options={"device": "cpu", "strict": True})(audio)
    assert (got - want).abs().max().item() < 1e-4


def _special(dtype, n=40):
    g = torch.Generator().manual_seed(0)
    real = torch.randn(n, generator=g, dtype=dtype) * 3
    imag = torch.randn(n, generator=g, dtype=dtype) * 3
    real[:8] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.0, 0.0, -2.0], dtype=dtype)
    imag[:8] = torch.tensor([0.0, 0.0, 0.0, 1.0, 2.0, float("nan"), -0.0, float("inf")], dtype=dtype)
    return torch.complex(real, imag)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["c64", "c128"])
def test_complex_inputs_outputs_and_arithmetic(dtype):
    z = _special(dtype)
    w = torch.roll(_special(dtype), 3)
    w[10] = 0  # 0 + 0i: each part divided by zero, as torch
    cases = {
        "mul_add_sub": lambda z, w: (z * w + z - 2 * w, z * 1.5, z * (0.5 - 2j)),
        "div": lambda z, w: (z / w, z / 2.0),
        "conj_abs_angle": lambda z, w: (z.conj() * w, z.abs(), z.angle(), w.real.angle()),
        "views": lambda z, w: (torch.view_as_real(z).sum(-1), torch.view_as_complex(torch.view_as_real(w).flip(-1).contiguous())),
        "movement": lambda z, w: (torch.cat([z, w]).reshape(8, 10).t()[1:5], z.unsqueeze(0).expand(3, -1).sum(0)),
    }
    for name, fn in cases.items():
        want = fn(z, w)
        for device in DEVICES:
            got = luminal.compile(Fn(fn), (z, w), device=device)(z, w)
            try:
                _close(got, want)
            except AssertionError as exc:
                raise AssertionError(f"{name} on {device}") from exc


def test_complex_exp_finite_and_real_axis():
    z = _special(torch.float32)[:7]
    z = torch.cat([z[~z.real.isnan() & ~z.imag.isnan() & ~z.imag.isinf() & ~z.real.isinf()],
                   torch.complex(torch.tensor([float("inf"), -float("inf"), 3.0]), torch.tensor([0.0, -0.0, 0.0]))])
    want = torch.exp(z)
    for device in DEVICES:
        _close(luminal.compile(Fn(torch.exp), (z,), device=device)(z), want)


def test_atan_and_atan2_equal_torch():
    vals = torch.tensor([0.0, -0.0, 1.0, -1.0, float("inf"), -float("inf"), float("nan"), 1e-30, 0.66, 2.42, -3.3, 1e30])
    y, x = torch.meshgrid(vals, vals, indexing="ij")
    for dtype in (torch.float32, torch.float64):
        yy, xx = y.to(dtype), x.to(dtype)
        for device in DEVICES:
            got = luminal.compile(Fn(lambda a, b: (torch.atan(a), torch.atan2(a, b))), (yy, xx), device=device)(yy, xx)
            for g, w in zip(got, (torch.atan(yy), torch.atan2(yy, xx))):
                assert torch.equal(g.isnan(), w.isnan())
                assert torch.equal(torch.signbit(g[~w.isnan()]), torch.signbit(w[~w.isnan()]))
                assert torch.allclose(g, w, rtol=2e-7 if dtype == torch.float32 else 1e-15, atol=0, equal_nan=True)


def test_a_complex_op_luminal_does_not_lower_is_named():
    z = torch.randn(4, dtype=torch.complex64)
    with pytest.raises(UnsupportedError, match="log"):
        luminal.compile(Fn(lambda z: z.log()), (z,), device="numpy")


def test_a_saved_model_returns_its_complex_output(tmp_path):
    x = torch.randn(3, 8)
    compiled = luminal.compile(Fn(lambda x: torch.fft.rfft(x)), (x,), device="cpu")
    compiled.save(tmp_path / "rfft.lum")
    for device in DEVICES:
        loaded = luminal.load(tmp_path / "rfft.lum", device=device)
        got = loaded(x)
        got = torch.as_tensor(got) if isinstance(got, np.ndarray) else got
        _close(got, torch.fft.rfft(x))
