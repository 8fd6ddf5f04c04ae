"""The float32 GELU's error and its gradient's, measured over every float32 x of magnitude in
[2^-24, 16] (both signs: ~470 M values; below, gelu is 0.5 x to the last bit, above, x or -0),
against scipy's erfc in float64 (few double ulps, far below a float32 ulp).

The compiled kernel (kernels/native/special.c) computes float32 GELU to ~2^-34 relative
rather than through libmvec's double erfc; this is the check that its results stay within
1 ulp of the true value (tests/kernels/numpy/test_speed_gelu_matmul.py samples 400 k points in the suite).
The gradient's error is counted in ulps of the size of its two terms, Phi(x) + |x phi(x)|,
as its terms cancel near x = -0.75.

    python bench/gelu_ulps.py                  # every float32 in range, ~1 min on 2 cores
    python bench/gelu_ulps.py --stride 101     # every 101st
"""
from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import special as sp

from rill.kernels.native import build
from rill.kernels.numpy import special

LOW, HIGH = 0x33800000, 0x41800000  # float32 bits of 2^-24 and 16
CHUNK = 1 << 22


def ulps(got, want):
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stride", type=int, default=1, help="check every n-th float32")
    args = parser.parse_args(argv)
    if build.load("special") is None:
        raise SystemExit(f"no compiled kernel here: {build.why_not('special')}")
    worst = {"gelu": (0.0, 0.0), "gelu'": (0.0, 0.0)}
    checked = 0
    for sign in (0, 0x80000000):
        for start in range(LOW, HIGH, CHUNK * args.stride):
            bits = np.arange(start, min(start + CHUNK * args.stride, HIGH), args.stride,
                             dtype=np.uint32) | np.uint32(sign)
            x = bits.view(np.float32)
            x64 = x.astype(np.float64)
            phi = 0.5 * sp.erfc(-x64 / math.sqrt(2.0))
            density = x64 * np.exp(-0.5 * x64 * x64) / math.sqrt(2.0 * math.pi)
            errors = {"gelu": ulps(special.gelu(x), x64 * phi),
                      "gelu'": ulps(special.gelu_grad(np.ones_like(x), x), phi + density) *
                      (np.spacing(np.abs(phi + density).astype(np.float32)) /
                       np.spacing((phi + np.abs(density)).astype(np.float32)))}
            for name, err in errors.items():
                i = int(np.argmax(err))
                if err[i] > worst[name][0]:
                    worst[name] = (float(err[i]), float(x[i]))
            checked += x.size
    print(f"{checked:,} float32 values, |x| in [2^-24, 16]")
    for name, (err, at) in worst.items():
        print(f"  {name:6s} max error {err:.4f} ulp at x = {at!r}")
    if max(err for err, _ in worst.values()) > 1.0:
        raise SystemExit("beyond 1 ulp")


if __name__ == "__main__":
    main()
