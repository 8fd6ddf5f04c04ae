#!/usr/bin/env bash
# One lease on a lent GPU machine (see BENCHMARKS.md, "GPU"): install rill over the image's
# packages, a smoke test, the gpu tests, then bench/gpu.py beside PyTorch, each bounded so
# that the whole call ends inside its limit. Logs go to $OUT (or ./gpu-out when unset).
#   bash bench/gpu_session.sh [BENCH_SECONDS (0: no bench)] [TEST_SECONDS] [PYTEST_ARGS...]
# (tests first: a bench case that disagrees with PyTorch stops the bench). PROBE_S=N in the
# environment also runs bench/gpu_probe.py, for at most N seconds, before the bench.
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
BENCH_S=${1:-120}; TEST_S=${2:-240}; shift 2 2>/dev/null || shift $#
export PYTHONUNBUFFERED=1
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import sys, numpy, torch, triton, cupy; print(sys.version.split()[0], 'numpy', numpy.__version__, 'torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__)"
  nproc; gcc --version | head -1
} 2>&1 | tee "$OUT/machine.txt"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 \
  || { echo "install failed"; tail -20 "$OUT/install.log"; exit 1; }
timeout 60 python3 - <<'PY' 2>&1 | tee "$OUT/smoke.txt"
import time, numpy as np, rill
print("rill from", rill.__file__, "| gpu available:", rill.gpu.is_available(), "| interpreted:", rill.gpu.interpreted())
t0 = time.perf_counter()
x = rill.tensor(np.arange(6, dtype=np.float32), device="gpu")
y = (x * 2 + 1).sum()
print("sum(2x+1) =", y.item(), "(want 36) first call", round(time.perf_counter() - t0, 2), "s")
PY
FILES=$(grep -rl "gpu" tests --include='test_*.py' | sort | tr '\n' ' ')
echo "== gpu tests (limit ${TEST_S}s)"
XDIST=$(python3 -c "import xdist" 2>/dev/null && echo "-n 12")
timeout "$TEST_S" python3 -m pytest -q $XDIST -p no:cacheprovider --timeout 120 --tb=short -rfE \
  -k gpu $FILES "$@" > "$OUT/tests.log" 2>&1
echo "tests exit $?"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | cut -c1-200 | sort | uniq | head -60
tail -3 "$OUT/tests.log"
if [ "${PROBE_S:-0}" -gt 0 ]; then  # PROBE_S=100: bench/gpu_probe.py's tuning tables too
  echo "== bench/gpu_probe.py (limit ${PROBE_S}s)"
  timeout "$PROBE_S" python3 bench/gpu_probe.py > "$OUT/probe.log" 2>&1
  echo "probe exit $?"; tail -25 "$OUT/probe.log"
fi
[ "$BENCH_S" -gt 0 ] || exit 0  # 0: tests only
echo "== bench/gpu.py (limit ${BENCH_S}s)"
timeout "$BENCH_S" python3 bench/gpu.py --repeats 11 --inner 10 --json "$OUT/gpu.json" > "$OUT/bench.log" 2>&1
echo "bench exit $?"; tail -45 "$OUT/bench.log"
