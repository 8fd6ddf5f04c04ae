"""rill.fft: the Array API standard's fft extension (version 2024.12).

fft, ifft, fftn, ifftn (complex to complex), rfft, rfftn, irfft, irfftn (real signals and
their half spectra), hfft, ihfft (Hermitian signals), fftfreq, rfftfreq, fftshift, ifftshift.
`norm` is "backward" (the inverse scales by 1/n), "ortho" (both by 1/sqrt(n)) or "forward".
The transforms are primitives with NumPy kernels (complex64 stays complex64) and gradients in
PyTorch's convention for complex numbers; they run on the CPU only (a DeviceError on the gpu
names the function).
"""
from .transforms import (fft, fftfreq, fftn, fftshift, hfft, ifft, ifftn, ifftshift, ihfft,
                         irfft, irfftn, rfft, rfftfreq, rfftn)

__all__ = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
           "fftfreq", "rfftfreq", "fftshift", "ifftshift"]
