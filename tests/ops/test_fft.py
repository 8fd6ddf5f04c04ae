"""rill.fft against numpy.fft (values in complex128 and complex64, every norm, cropping and
padding, n-d axes), gradients against torch.fft's autograd and finite differences, capture,
the gpu refusal and argument errors."""
import numpy as np
import pytest
import torch

import rill
import rill.fft as F

NORMS = ["backward", "ortho", "forward"]


def _z(rng, shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


# name: (rill call, numpy call, complex input?)
ONE_D = {
    "fft": (F.fft, np.fft.fft, True), "ifft": (F.ifft, np.fft.ifft, True),
    "rfft": (F.rfft, np.fft.rfft, False), "irfft": (F.irfft, np.fft.irfft, True),
    "hfft": (F.hfft, np.fft.hfft, True), "ihfft": (F.ihfft, np.fft.ihfft, False),
}
N_D = {
    "fftn": (F.fftn, np.fft.fftn, True), "ifftn": (F.ifftn, np.fft.ifftn, True),
    "rfftn": (F.rfftn, np.fft.rfftn, False), "irfftn": (F.irfftn, np.fft.irfftn, True),
}


@pytest.mark.parametrize("name", list(ONE_D))
@pytest.mark.parametrize("norm", NORMS)
def test_one_d_transforms_match_numpy(name, norm, rng):
    ours, ref, is_complex = ONE_D[name]
    a = _z(rng, (3, 8)) if is_complex else rng.standard_normal((3, 8))
    for n, axis in [(None, -1), (5, -1), (12, 1), (None, 0), (4, 0)]:
        got = ours(rill.tensor(a), n=n, axis=axis, norm=norm)
        expected = ref(a, n=n, axis=axis, norm=norm)
        assert got.numpy().dtype == expected.dtype, (name, n, axis)
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10, atol=1e-12,
                                   err_msg=f"{name} n={n} axis={axis}")


@pytest.mark.parametrize("name", list(N_D))
def test_n_d_transforms_match_numpy(name, rng):
    ours, ref, is_complex = N_D[name]
    a = _z(rng, (4, 5, 6)) if is_complex else rng.standard_normal((4, 5, 6))
    for s, axes, norm in [(None, None, "backward"), (None, (0, 2), "ortho"),
                          ((3, 8), (2, 0), "forward"), ((6, 4), None, "backward"),
                          (None, (1,), "ortho")]:
        got = ours(rill.tensor(a), s=s, axes=axes, norm=norm)
        if s is not None and axes is None:  # the last len(s) axes (NumPy wants them named)
            expected = ref(a, s=s, axes=tuple(range(a.ndim - len(s), a.ndim)), norm=norm)
        else:
            expected = ref(a, s=s, axes=axes, norm=norm)
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10, atol=1e-12,
                                   err_msg=f"{name} s={s} axes={axes}")


def test_single_precision_stays_single(rng):
    a = _z(rng, (8,)).astype(np.complex64)
    r = rng.standard_normal(8).astype(np.float32)
    assert F.fft(rill.tensor(a)).dtype is rill.complex64
    assert F.rfft(rill.tensor(r)).dtype is rill.complex64
    assert F.irfft(rill.tensor(a)).dtype is rill.float32
    assert F.fftn(rill.tensor(np.array([1j, 2.0]))).dtype is rill.complex128
    np.testing.assert_allclose(F.fft(rill.tensor(a)).numpy(), np.fft.fft(a), rtol=1e-5,
                               atol=1e-5)
    assert F.fft(rill.tensor(r)).dtype is rill.complex64  # a real input is made complex


def test_frequencies_and_shifts_match_numpy():
    for n in (1, 4, 7):
        np.testing.assert_allclose(F.fftfreq(n, d=0.5, dtype=rill.float64).numpy(),
                                   np.fft.fftfreq(n, d=0.5))
        np.testing.assert_allclose(F.rfftfreq(n, d=2.0, dtype=rill.float64).numpy(),
                                   np.fft.rfftfreq(n, d=2.0))
    assert F.fftfreq(5).dtype is rill.float32
    a = np.arange(15.0).reshape(3, 5)
    np.testing.assert_array_equal(F.fftshift(rill.tensor(a)).numpy(), np.fft.fftshift(a))
    np.testing.assert_array_equal(F.ifftshift(rill.tensor(a)).numpy(), np.fft.ifftshift(a))
    np.testing.assert_array_equal(F.fftshift(rill.tensor(a), axes=1).numpy(),
                                  np.fft.fftshift(a, axes=1))
    np.testing.assert_array_equal(F.ifftshift(rill.tensor(a), axes=(0,)).numpy(),
                                  np.fft.ifftshift(a, axes=(0,)))


# ---- gradients against torch.fft ------------------------------------------------------------

def _loss(out, lib):
    """A real loss that sees both parts of a complex result, and a real one as it is."""
    weights = np.linspace(0.5, 1.5, out.shape[-1])
    if lib is torch:
        w = torch.tensor(weights)
        if out.is_complex():
            return ((out.real * 0.7 + out.imag * 1.3) * w).sum() + (out.abs() ** 2).sum()
        return (out * w).sum() + (out ** 2).sum()
    w = rill.tensor(weights)
    if out.dtype.is_complex:
        E = rill.ops.elementwise
        return ((E.real(out) * 0.7 + E.imag(out) * 1.3) * w).sum() + (rill.abs(out) ** 2).sum()
    return (out * w).sum() + (out ** 2).sum()


TORCH = {"fft": torch.fft.fft, "ifft": torch.fft.ifft, "rfft": torch.fft.rfft,
         "irfft": torch.fft.irfft, "hfft": torch.fft.hfft, "ihfft": torch.fft.ihfft,
         "fftn": torch.fft.fftn, "ifftn": torch.fft.ifftn, "rfftn": torch.fft.rfftn,
         "irfftn": torch.fft.irfftn}


@pytest.mark.parametrize("name", list(ONE_D))
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("n", [None, 5, 10])
def test_one_d_gradients_match_torch(name, norm, n, rng):
    ours, _, is_complex = ONE_D[name]
    a = _z(rng, (2, 7)) if is_complex else rng.standard_normal((2, 7))
    x = rill.tensor(a, requires_grad=True)
    _loss(ours(x, n=n, norm=norm), rill).backward()
    xt = torch.tensor(a, requires_grad=True)
    _loss(TORCH[name](xt, n=n, norm=norm), torch).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.resolve_conj().numpy(), rtol=1e-9,
                               atol=1e-10)


@pytest.mark.parametrize("name", list(N_D))
def test_n_d_gradients_match_torch(name, rng):
    ours, _, is_complex = N_D[name]
    a = _z(rng, (3, 4, 5)) if is_complex else rng.standard_normal((3, 4, 5))
    for s, axes, norm in [(None, (0, 2), "ortho"), ((5, 6), (1, 2), "backward"),
                          ((2, 4), (2, 0), "forward")]:
        x = rill.tensor(a, requires_grad=True)
        _loss(ours(x, s=s, axes=axes, norm=norm), rill).backward()
        xt = torch.tensor(a, requires_grad=True)
        _loss(TORCH[name](xt, s=s, dim=axes, norm=norm), torch).backward()
        np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-10,
                                   err_msg=f"{name} s={s} axes={axes}")


@pytest.mark.parametrize("name", ["fft", "rfft", "irfft"])
def test_gradients_match_finite_differences(name, rng):
    ours, _, is_complex = ONE_D[name]
    a = _z(rng, (6,)) if is_complex else rng.standard_normal(6)
    x = rill.tensor(a, requires_grad=True)
    _loss(ours(x, norm="ortho"), rill).backward()

    def loss(v):
        return float(_loss(ours(rill.tensor(v), norm="ortho"), rill).numpy())

    h, fd = 1e-6, np.zeros_like(a)
    for i in range(a.size):
        for direction in ((1, 1j) if is_complex else (1,)):
            step = np.zeros_like(a)
            step[i] = h * direction
            fd[i] += direction * (loss(a + step) - loss(a - step)) / (2 * h)
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-5, atol=1e-6)


def test_captured_transforms_and_gradients_equal_eager(rng):
    a = rng.standard_normal((4, 8))

    def step(x):
        return rill.grad(lambda v: _loss(F.irfft(F.rfft(v) * 2j, n=8), rill) +
                         _loss(F.fftn(v, axes=(0, 1)), rill))(x)

    eager = step(rill.tensor(a))
    captured = rill.capture(step)(rill.tensor(a))
    np.testing.assert_allclose(captured.numpy(), eager.numpy(), rtol=1e-12)
    spectrum = rill.capture(lambda v: F.fft(v, n=6))(rill.tensor(a))
    np.testing.assert_allclose(spectrum.numpy(), np.fft.fft(a, n=6), rtol=1e-12)


# ---- errors ----------------------------------------------------------------------------------

def test_bad_arguments_are_rill_errors_naming_the_function():
    z = rill.tensor([1.0, 2.0, 3.0])
    with pytest.raises(rill.ArgumentError, match="norm") as info:
        F.fft(z, norm="sideways")
    assert info.value.op == "fft"
    with pytest.raises(rill.ArgumentError, match="n") as info:
        F.rfft(z, n=0)
    assert info.value.op == "rfft"
    with pytest.raises(rill.ShapeError, match="axis") as info:
        F.ifft(z, axis=2)
    with pytest.raises(rill.DTypeError, match="real floating") as info:
        F.rfft(rill.tensor([1j]))
    assert info.value.op == "rfft"
    with pytest.raises(rill.ShapeError, match="s has 1 lengths for 2 axes"):
        F.fftn(rill.zeros(2, 2), s=(2,), axes=(0, 1))
    with pytest.raises(rill.ShapeError, match="repeated axis"):
        F.fftn(rill.zeros(2, 2), axes=(1, 1))
    with pytest.raises(rill.DTypeError, match="bool"):
        F.fft(rill.tensor([True]))
    with pytest.raises(rill.ArgumentError, match="d"):
        F.fftfreq(4, d=0.0)


FFT_FUNCTIONS = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft",
                 "ihfft"]


@pytest.mark.parametrize("name", FFT_FUNCTIONS)
def test_gpu_input_is_a_device_error_naming_the_function(name):
    if not rill.gpu.is_available():
        pytest.skip("no gpu device")
    x = rill.tensor([1.0, 2.0, 3.0, 4.0], device="gpu")
    with pytest.raises(rill.DeviceError, match=rf"rill.fft.{name} has no gpu kernel.*to\('cpu'\)"):
        getattr(F, name)(x)
    # fftshift/ifftshift/fftfreq are composites of ops that run on the gpu
    assert F.fftshift(x).device == x.device
    assert F.fftfreq(4, device="gpu").device == x.device
