#!/usr/bin/env bash
# The GPU checks, for a session lent a GPU. Run from the repository root on the GPU machine:
#   bash scripts/gpu_check.sh          (results and logs go to $OUT, else /tmp/ptxforge-gpu)
#   bash scripts/gpu_check.sh ep-cuda-ipc bench   (only the named steps, to fit a short device lease)
# Uses the machine's python3 (numpy, ml_dtypes, cuda-bindings, pytest, torch) with src/ on PYTHONPATH;
# nothing is installed. Runs: the GPU tests (tests/gpu), the DSL examples on emu and cuda, the runtime
# tests, the emulator's corpus tests with the GPU as default device, `ptxforge demo` (GPU section included),
# the vector-add benchmark against torch, a green context of 16 SMs (green-ctx), and ptxforge.ep's
# backend="kernels" over CUDA IPC (ep-cuda-ipc, on green contexts where the driver has them).
# Prints a short table last. Each step has a time limit; the limits add up to about 15 minutes (the worst
# case; pass step names to run fewer). Test cases that run in a process of their own (the TMA reductions and
# im2col loads) append their outcomes to $OUT/gpu_cases.tsv, printed with the summary.
set -uo pipefail
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/ptxforge-gpu}"
LOGS=/tmp/ptxforge-gpu-logs  # per-step logs; $OUT gets one combined log (a few files come back from a lease)
mkdir -p "$OUT" "$LOGS"
status=()
ONLY=" $* "

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME.log, remember pass/fail
  local name="$1" limit="$2"; shift 2
  if [ "$ONLY" != "  " ] && [[ "$ONLY" != *" $name "* ]]; then return 0; fi
  local t0=$SECONDS
  echo "== $name: $*"
  timeout "$limit" "$@" 2>&1 | tee "$LOGS/$name.log"
  local rc=${PIPESTATUS[0]}
  status+=("$(printf '%-12s %-5s %4ss' "$name" "$([ "$rc" = 0 ] && echo ok || echo FAIL)" $((SECONDS - t0)))")
  { echo "===== $name (exit $rc): $*"; cat "$LOGS/$name.log"; } >> "$OUT/all.log"
}

nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader | tee "$LOGS/gpu.txt"
"$PY" -c "import cuda.bindings, numpy, ml_dtypes; print('python', __import__('sys').version.split()[0], \
'cuda-bindings', cuda.bindings.__version__, 'numpy', numpy.__version__)"
command -v ptxas >/dev/null && ptxas --version | tail -1 || echo "no ptxas on PATH: modules go through the driver JIT"

rm -f "$OUT/approx_vs_gpu.tsv" "$OUT/gpu_cases.tsv"
export PTXFORGE_GPU_CASES="$OUT/gpu_cases.tsv"
# One pytest process per GPU test file: a kernel fault (illegal address or instruction) ends the CUDA
# context of its process, so it must not take the other files' tests down with it (and the TMA reduction and
# im2col cases each run in a process of their own: about 3 s each).
step gpu-tests 300 bash -c 'rc=0; for f in tests/gpu/test_*.py; do case "$f" in
  tests/gpu/test_ep_kernels_cuda_ipc.py|tests/gpu/test_green_context.py) continue;; esac
  "$0" -m pytest -p no:cacheprovider "$f" || rc=1; done; exit $rc' "$PY"
# A green context of 16 SMs (ptxforge.runtime.cuda_green): a kernel's blocks record %smid, at most the green
# context's SMs may appear (the primary context's launch spreads wider); -s prints the counts
step green-ctx 40 "$PY" -m pytest -p no:cacheprovider -s tests/gpu/test_green_context.py
# backend="kernels" on the GPU: 2 and 4 processes on the one GPU share buffers by CUDA IPC, BF16 and FP8 at
# num_sms 2, 4, 20, bit-identical to the torch backend
step ep-cuda-ipc 150 "$PY" -m pytest -p no:cacheprovider tests/gpu/test_ep_kernels_cuda_ipc.py
step dsl-both 60 "$PY" -m pytest -p no:cacheprovider tests/dsl/test_dsl_examples.py
step runtime 60 "$PY" -m pytest -p no:cacheprovider tests/runtime
# The emulator's corpus tests with launches defaulting to the GPU: the same numpy checks, now on hardware.
# Informational: tests that expect emulator-only results (instruction counts, emulator errors) fail here.
# Tests named for faults, errors, traps or the watchdog are left out: a GPU fault ends the CUDA context
# of its process. -n 8 keeps one broken worker from taking the rest down.
step corpus-gpu 100 env PTXFORGE_DEVICE=cuda "$PY" -m pytest -p no:cacheprovider -n 8 \
  -k "not fault and not error and not watchdog and not trap and not oob" tests/emu/test_emu_vector.py \
  tests/emu/test_emu_warp.py tests/emu/test_emu_reductions.py tests/emu/test_emu_programs.py \
  tests/emu/test_emu_numeric.py tests/emu/test_emu_integer.py tests/emu/test_emu_matrix_async.py \
  tests/emu/test_emu_cluster.py tests/emu/test_emu_triton.py
step collect 90 "$PY" scripts/gpu_collect.py "$OUT/hw_reference.npz"
step demo 45 "$PY" -m ptxforge.cli.main demo
step bench 40 "$PY" benchmarks/gpu_vadd.py --sizes 24 26

echo
echo "== summary ($(cat "$LOGS/gpu.txt"))"
printf '%s\n' "${status[@]}"
echo "gpu-tests: $(grep -h -E "^=+ .*[0-9]+ (passed|failed)" "$LOGS/gpu-tests.log" | sed 's/=//g' | paste -sd';')"
grep -h "green context of" "$LOGS/green-ctx.log" 2>/dev/null | head -2
for f in green-ctx ep-cuda-ipc dsl-both runtime corpus-gpu; do echo "$f: $(grep -h -E "[0-9]+ (passed|failed)" "$LOGS/$f.log" | tail -1)"; done
grep -E "GB/s|torch.add|overhead|DSL vadd|nvcc vadd" "$LOGS/bench.log" | tail -12
[ -f "$OUT/approx_vs_gpu.tsv" ] && (column -t -s $'\t' "$OUT/approx_vs_gpu.tsv" 2>/dev/null || cat "$OUT/approx_vs_gpu.tsv")
[ -f "$OUT/gpu_cases.tsv" ] && { echo "cases in processes of their own:"; cut -f1-3 "$OUT/gpu_cases.tsv"; }
grep -h "^FAILED" "$LOGS"/*.log | head -30
