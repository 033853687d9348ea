#!/usr/bin/env bash
# Data-parallel scaling on this machine: the same global batch trained by 1 process x 1 thread and by
# `mpirun -np 2` x 1 thread each, for the demo config and a GPT-2 124M shape on the demo's data. Prints, per
# model: tokens/s of each (median over the steps after warm-up), their ratio (target >= 1.8x), and the exposed
# communication of the 2-rank run as a fraction of its step (median comm_ms / step_ms; target <= 10%).
# Needs the demo data (scripts/demo prepares it; this script does too) and a built tern. Not a test: timings
# need an idle machine. Usage: bench/dist_scaling.sh [--quick] [--json]
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
json=0
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    --json) json=1 ;;
    *) echo "usage: bench/dist_scaling.sh [--quick] [--json]" >&2; exit 2 ;;
  esac
done
tern=build/tern
[ -x "$tern" ] || { echo "build tern first: scripts/build" >&2; exit 1; }
command -v mpirun > /dev/null || { echo "mpirun is missing: scripts/install-deps installs openmpi-bin" >&2; exit 1; }
if [ ! -s data/prepared/kjv/prepare.json ]; then
  mkdir -p data/prepared
  [ -s data/prepared/kjv.txt ] || bible "Gen1:1-Rev22:21" > data/prepared/kjv.txt
  "$tern" prepare --input data/prepared/kjv.txt --out data/prepared/kjv --vocab-size 4096 --val-fraction 0.02
fi
mpi=(mpirun --oversubscribe -np 2)
[ "$(id -u)" = 0 ] && mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
out=runs/bench-dist
rm -rf "$out"
quiet=(--quiet --set eval.every=0 --set eval.batches=1 --set sample.count=0 --set ckpt.every=0
       --set ckpt.durable= --set ckpt.durable_every=0 --set ckpt.best_k=0 --set run.peak_gflops=100)

# name, steps, then overrides
run_pair() {
  local name=$1 steps=$2
  shift 2
  OMP_NUM_THREADS=1 "$tern" train configs/demo.yaml "${quiet[@]}" --set train.steps="$steps" "$@" \
    --set run.dir="$out/$name-1" > "$out/$name-1.log" 2>&1
  OMP_NUM_THREADS=1 "${mpi[@]}" "$tern" train configs/demo.yaml "${quiet[@]}" --set train.steps="$steps" "$@" \
    --set run.dir="$out/$name-2" > "$out/$name-2.log" 2>&1
}
mkdir -p "$out"
if [ $quick = 1 ]; then demo_steps=12; gpt2_steps=3; else demo_steps=40; gpt2_steps=6; fi
run_pair demo "$demo_steps"
run_pair gpt2-124m "$gpt2_steps" --set model.n_layer=12 --set model.n_head=12 --set model.n_embd=768 \
  --set model.block_size=1024 --set train.batch_size=4 --set train.seq_len=128 --set train.total_batch_tokens=1024

python3 - "$out" "$json" <<'EOF'
import json, statistics, sys, platform, subprocess
out, as_json = sys.argv[1], sys.argv[2] == "1"
def rows(run):
    r = []
    for line in open(f"{out}/{run}/metrics.jsonl"):
        j = json.loads(line)
        if "event" not in j and "loss" in j:
            r.append(j)
    return r[1:] if len(r) > 2 else r  # the first step warms up
cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p' | head -1"], capture_output=True, text=True).stdout.strip()
result = {"machine": {"cpu": cpu, "cores": __import__("os").cpu_count()}, "models": {}}
for name in ("demo", "gpt2-124m"):
    one, two = rows(f"{name}-1"), rows(f"{name}-2")
    t1 = statistics.median(r["tokens_per_s"] for r in one)
    t2 = statistics.median(r["tokens_per_s"] for r in two)
    exposed = statistics.median(r["comm_ms"] / r["step_ms"] for r in two)
    spread = statistics.median((r["step_ms_max"] - r["step_ms_min"]) / r["step_ms"] for r in two)
    result["models"][name] = {"tokens_per_s_1x1": t1, "tokens_per_s_2x1": t2, "speedup": t2 / t1,
                              "exposed_comm_fraction": exposed, "rank_step_spread": spread,
                              "steps_timed": len(two)}
if as_json:
    print(json.dumps(result, indent=2))
else:
    print(f"data parallel on {cpu} ({result['machine']['cores']} cores); 1 OpenMP thread per rank")
    print(f"{'model':<11} {'1x1 tok/s':>10} {'2x1 tok/s':>10} {'speedup':>8} {'exposed comm':>13} {'rank spread':>12}")
    for name, m in result["models"].items():
        print(f"{name:<11} {m['tokens_per_s_1x1']:>10.0f} {m['tokens_per_s_2x1']:>10.0f} {m['speedup']:>7.2f}x "
              f"{m['exposed_comm_fraction']*100:>12.1f}% {m['rank_step_spread']*100:>11.1f}%")
    print("targets: speedup >= 1.8x, exposed communication <= 10% of the step")
EOF
