#!/usr/bin/env bash
# tern vs a PyTorch 1.13 CPU baseline (Debian's python3-torch) on this machine: tokens/s and ratios,
# GPT-2 124M at B=4 T=64 and L6 H6 C384 V50257 at B=8 T=256, fp32 and bf16. PyTorch runs twice: as
# installed, and tuned (glibc keeps freed memory; OPENBLAS_CORETYPE unset for that command only, so its
# fp32 matmuls use AVX-512). Ratios are against the tuned run. Needs: build/tern, /usr/bin/python3 + torch.
#   bench/vs_pytorch.sh            # all four rows (~10 minutes on 2 cores)
#   STEPS=3 bench/vs_pytorch.sh    # quicker, noisier
#   CONFIGS="6 6 384 50257 8 256" bench/vs_pytorch.sh   # one config ("L H C V B T")
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-5}
export OMP_NUM_THREADS=2
TERN=build/tern
PY=/usr/bin/python3
tern_rate() {  # L H C V B T precision
  local best=0
  for _ in 1 2 3; do
    r=$($TERN bench --model gpt2-124m --n-layer "$1" --n-head "$2" --n-embd "$3" --vocab-size "$4" \
        --batch "$5" --seq "$6" --precision "$7" --steps "$STEPS" --json | $PY -c 'import json,sys; d=json.load(sys.stdin); print(d["tokens_per_s"], d["mfu"])')
    echo "$r"
  done | sort -n | sed -n 2p   # median of 3
}
torch_rate() { $PY bench/pytorch_step.py "$@" "$STEPS"; }
torch_tuned() {
  env -u OPENBLAS_CORETYPE MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 $PY bench/pytorch_step.py "$@" "$STEPS"
}
printf "machine: %s, %s threads\n" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$OMP_NUM_THREADS"
printf "%-22s %-5s %10s %10s %10s %8s %8s\n" config prec "torch" "torch-tuned" "tern" "ratio" "MFU"
CONFIGS=${CONFIGS:-"12 12 768 50257 4 64|6 6 384 50257 8 256"}
IFS="|" read -ra CFG_LIST <<< "$CONFIGS"
for cfg in "${CFG_LIST[@]}"; do
  set -- $cfg
  for prec in fp32 bf16; do
    t_inst=$(torch_rate "$@" "$prec")
    t_tuned=$(torch_tuned "$@" "$prec")
    read -r tern_tps tern_mfu <<< "$(tern_rate "$@" "$prec")"
    ratio=$($PY -c "print(f'{$tern_tps/$t_tuned:.2f}x')")
    mfu=$($PY -c "print(f'{100*$tern_mfu:.1f}%')")
    printf "%-22s %-5s %10s %10s %10.1f %8s %8s\n" "L$1 H$2 C$3 B$5 T$6" "$prec" "$t_inst" "$t_tuned" "$tern_tps" "$ratio" "$mfu"
  done
done
