#!/usr/bin/env bash
# The GPU checks, for a session lent a GPU. Run from the repository root on the GPU machine:
#   bash scripts/gpu_check.sh          (results and logs go to $OUT, else /tmp/ptxforge-gpu)
# Uses the machine's python3 (numpy, ml_dtypes, cuda-bindings, pytest, torch) with src/ on PYTHONPATH;
# nothing is installed. Runs: the GPU tests (tests/gpu), the DSL examples on emu and cuda, the runtime
# tests, `ptxforge demo` (GPU section included), and the vector-add benchmark against torch.
# Prints a short table last. Keep it under 5 minutes.
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/ptxforge-gpu}"
mkdir -p "$OUT"
status=()

step() {  # step NAME COMMAND...: run, log to $OUT/NAME.log, remember pass/fail and seconds
  local name="$1"; shift
  local t0=$SECONDS
  echo "== $name: $*"
  "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  status+=("$(printf '%-12s %-5s %4ss' "$name" "$([ "$rc" = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)))")
}

nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
"$PY" -c "import cuda.bindings, numpy, ml_dtypes; print('python', __import__('sys').version.split()[0], \
'cuda-bindings', cuda.bindings.__version__, 'numpy', numpy.__version__)"
command -v ptxas >/dev/null && ptxas --version | tail -1 || echo "no ptxas on PATH: modules go through the driver JIT"

rm -f "$OUT/approx_vs_gpu.tsv"
step gpu-tests "$PY" -m pytest -q -p no:cacheprovider tests/gpu
step dsl-both "$PY" -m pytest -q -p no:cacheprovider tests/dsl/test_dsl_examples.py
step runtime "$PY" -m pytest -q -p no:cacheprovider tests/runtime
step demo "$PY" -m ptxforge.cli.main demo
step bench "$PY" benchmarks/gpu_vadd.py --sizes 24 26 28

echo
echo "== summary ($(cat "$OUT/gpu.txt"))"
printf '%s\n' "${status[@]}"
grep -h -E "passed|failed|error" "$OUT"/gpu-tests.log "$OUT"/dsl-both.log "$OUT"/runtime.log | tail -3
grep -E "GB/s|torch.add|overhead|DSL vadd|nvcc vadd" "$OUT/bench.log" | tail -12
[ -f "$OUT/approx_vs_gpu.tsv" ] && (column -t -s $'\t' "$OUT/approx_vs_gpu.tsv" 2>/dev/null || cat "$OUT/approx_vs_gpu.tsv")
grep -h "^FAILED" "$OUT"/*.log | head -20
