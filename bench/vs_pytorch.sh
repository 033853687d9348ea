#!/usr/bin/env bash
# tern vs a PyTorch 1.13 CPU baseline (Debian's python3-torch) on this machine: tokens/s and ratios,
# GPT-2 124M at B=4 T=64 and L6 H6 C384 V50257 at B=8 T=256, fp32 and bf16. PyTorch runs twice: as
# installed, and tuned: glibc keeps freed memory, subnormals are flushed (torch.set_flush_denormal, as tern's
# CPU backend does), and OpenBLAS is told its core. Debian's OpenBLAS 0.3.21
# detects an Intel Xeon with AMX as "Prescott" (SSE3 kernels, ~30 GFLOP/s), so for that one command
# OPENBLAS_CORETYPE is the best core that works here (openblas_core below; printed), never exported.
# Ratios are against the tuned run. Needs: build/tern, /usr/bin/python3 + torch.
#   bench/vs_pytorch.sh            # all four rows (~10 minutes on 2 cores)
#   STEPS=3 bench/vs_pytorch.sh    # quicker, noisier
#   CONFIGS="6 6 384 50257 8 256" bench/vs_pytorch.sh   # one config ("L H C V B T")
#   PRECISIONS=fp32 bench/vs_pytorch.sh   # one precision (PyTorch 1.13's bf16 on an AVX2-only CPU takes hours)
#   bench/vs_pytorch.sh --openblas-core   # only choose and print the core (CPUINFO=FILE: another CPU's flags)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-5}
TERN=build/tern
PY=/usr/bin/python3

# OpenBLAS's name for the core it runs, after one small sgemm through the BLAS PyTorch loads (libblas.so.3).
# Fails when that core's kernels do not run on this CPU (SIGILL) or the sgemm is wrong.
OPENBLAS_PROBE='
import ctypes
try:
    l = ctypes.CDLL("libblas.so.3"); l.openblas_get_corename
except (OSError, AttributeError):
    l = ctypes.CDLL("libopenblas.so.0")
n = 96
a = (ctypes.c_float * (n * n))(*([1.0] * (n * n)))
c = (ctypes.c_float * (n * n))()
l.cblas_sgemm(101, 111, 111, n, n, n, ctypes.c_float(1.0), a, n, a, n, ctypes.c_float(0.0), c, n)
assert c[0] == n and c[n * n - 1] == n
l.openblas_get_corename.restype = ctypes.c_char_p
print(l.openblas_get_corename().decode())'
openblas_runs() {  # CORE (empty: OpenBLAS's own detection) -> the core OpenBLAS used, or failure
  if [[ -z $1 ]]; then env -u OPENBLAS_CORETYPE $PY -c "$OPENBLAS_PROBE" 2>/dev/null
  else env OPENBLAS_CORETYPE="$1" $PY -c "$OPENBLAS_PROBE" 2>/dev/null; fi
}
core_rank() {  # 2: AVX-512 kernels, 1: AVX2 + FMA, 0: older
  case ${1,,} in
    skylakex|cooperlake|sapphirerapids) echo 2 ;;
    haswell|zen) echo 1 ;;
    *) echo 0 ;;
  esac
}
# Prints the core for the tuned run (empty = leave OpenBLAS to detect it) and, on stderr, why. What the CPU
# can run, from its flags: SkylakeX (0.3.21's AVX-512 kernels need F, BW, VL and DQ: Intel Skylake-SP and
# later, AMD Zen 4 and Zen 5), else Haswell (AVX2 + FMA, e.g. Zen 3), else nothing to ask for. OpenBLAS's
# own choice is kept when it is as good (Cooperlake, Zen); each candidate must run an sgemm here.
openblas_core() {
  local flags want detected
  flags=" $(grep -m1 '^flags' "${CPUINFO:-/proc/cpuinfo}" | cut -d: -f2) "
  has() { local f; for f; do [[ $flags == *" $f "* ]] || return 1; done; }
  if has avx512f avx512bw avx512vl avx512dq; then want=SkylakeX
  elif has avx2 fma; then want=Haswell
  else want=""; fi
  detected=$(openblas_runs "" || true)
  local candidates=()
  if [[ -n $detected && $(core_rank "$detected") -ge $(core_rank "$want") ]]; then candidates+=("$detected"); fi
  [[ -n $want ]] && candidates+=("$want")
  [[ $want == SkylakeX ]] && candidates+=(Haswell)
  local core used
  for core in "${candidates[@]}"; do
    if used=$(openblas_runs "$core") && [[ ${used,,} == "${core,,}" ]]; then
      echo "openblas: OPENBLAS_CORETYPE=$core for tuned PyTorch (OpenBLAS detects ${detected:-nothing}; this CPU's best: ${want:-none})" >&2
      echo "$core"
      return
    fi
    echo "openblas: $core does not run here; trying the next" >&2
  done
  echo "openblas: OPENBLAS_CORETYPE left to OpenBLAS's detection (${detected:-unknown}) for tuned PyTorch" >&2
}
if [[ ${1:-} == --openblas-core ]]; then openblas_core; exit 0; fi
[[ -x $TERN ]] || { echo "vs_pytorch: build tern first (scripts/build)" >&2; exit 1; }
$PY -c 'import torch' 2>/dev/null ||
  { echo "vs_pytorch: PyTorch is missing: apt-get install python3-torch (Debian's PyTorch 1.13)" >&2; exit 1; }

export OMP_NUM_THREADS=2
OPENBLAS_CORE=$(openblas_core)
tern_rate() {  # L H C V B T precision
  local best=0
  for _ in 1 2 3; do
    r=$($TERN bench --model gpt2-124m --n-layer "$1" --n-head "$2" --n-embd "$3" --vocab-size "$4" \
        --batch "$5" --seq "$6" --precision "$7" --steps "$STEPS" --json | $PY -c 'import json,sys; d=json.load(sys.stdin); print(d["tokens_per_s"], d["mfu"])')
    echo "$r"
  done | sort -n | sed -n 2p   # median of 3
}
torch_rate() { $PY bench/pytorch_step.py "$@" "$STEPS"; }
torch_tuned() {  # OPENBLAS_CORETYPE for this command only
  if [[ -n $OPENBLAS_CORE ]]; then
    env FLUSH_DENORMAL=1 OPENBLAS_CORETYPE="$OPENBLAS_CORE" MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 $PY bench/pytorch_step.py "$@" "$STEPS"
  else
    env -u OPENBLAS_CORETYPE FLUSH_DENORMAL=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 $PY bench/pytorch_step.py "$@" "$STEPS"
  fi
}
printf "machine: %s, %s threads; tuned PyTorch: OPENBLAS_CORETYPE=%s\n" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
  "$OMP_NUM_THREADS" "${OPENBLAS_CORE:-(OpenBLAS detection)}"
printf "%-22s %-5s %10s %10s %10s %8s %8s\n" config prec "torch" "torch-tuned" "tern" "ratio" "MFU"
CONFIGS=${CONFIGS:-"12 12 768 50257 4 64|6 6 384 50257 8 256"}
IFS="|" read -ra CFG_LIST <<< "$CONFIGS"
for cfg in "${CFG_LIST[@]}"; do
  set -- $cfg
  for prec in ${PRECISIONS:-fp32 bf16}; do
    t_inst=$(torch_rate "$@" "$prec")
    t_tuned=$(torch_tuned "$@" "$prec")
    read -r tern_tps tern_mfu <<< "$(tern_rate "$@" "$prec")"
    ratio=$($PY -c "print(f'{$tern_tps/$t_tuned:.2f}x')")
    mfu=$($PY -c "print(f'{100*$tern_mfu:.1f}%')")
    printf "%-22s %-5s %10s %10s %10.1f %8s %8s\n" "L$1 H$2 C$3 B$5 T$6" "$prec" "$t_inst" "$t_tuned" "$tern_tps" "$ratio" "$mfu"
  done
done
