#!/usr/bin/env bash
# How far `tern plan --calibrate` is from reality on this machine: for the demo config and a GPT-2 124M
# shape, the user's three commands with the same config and overrides,
#   tern bench --config C --set ... --json > bench.json
#   tern plan  --config C --set ... --calibrate bench.json --instance local --json
#   tern train C --set ... --quiet
# then the predicted and measured wall time, split into steps / evaluation / outside the training loop
# (start-up, model.safetensors, exit) / the rest (samples, checkpoint saves), with the load average before
# and after each run (the machine may be shared: see docs/planning.md section 6 on OMP_WAIT_POLICY).
# Needs build/tern (TERN=...) and data/prepared/kjv (scripts/demo). About 4 minutes on 2 idle cores.
#   bench/plan_accuracy.sh                                  # both runs
#   CASES=demo bench/plan_accuracy.sh                       # one (demo | gpt2-124m)
#   OMP_WAIT_POLICY=passive bench/plan_accuracy.sh          # on a machine others are using
#   BENCH="--steps 10 --warmup 2" bench/plan_accuracy.sh    # shorter benches
set -euo pipefail
cd "$(dirname "$0")/.."
TERN=${TERN:-build/tern}
CASES=${CASES:-"demo gpt2-124m"}
BENCH=${BENCH:-}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tern_plan_accuracy.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
[ -x "$TERN" ] || { echo "plan_accuracy: $TERN is not built (cmake --build build --target tern)" >&2; exit 1; }
[ -f data/prepared/kjv/prepare.json ] || { echo "plan_accuracy: run scripts/demo first (data/prepared/kjv)" >&2; exit 1; }

declare -A SETS=(
  [demo]="--set train.steps=150"
  # GPT-2 124M's blocks on the demo corpus (V = the tokenizer's 4096), 512 tokens per step.
  [gpt2-124m]="--set model.n_layer=12 --set model.n_head=12 --set model.n_embd=768 --set model.block_size=128
               --set train.batch_size=4 --set train.seq_len=128 --set train.total_batch_tokens=512 --set train.steps=20"
)

load() { cut -d' ' -f1 /proc/loadavg; }
printf "%-10s %-11s %9s %9s %7s | %-50s | %s\n" run "load" predicted measured error \
  "predicted s: steps eval outside rest (steps error)" "measured s: steps eval outside rest"
for name in $CASES; do
  d=$WORK/$name
  mkdir -p "$d"
  sets="${SETS[$name]} --set run.dir=$d/run --set ckpt.durable=$d/durable"
  l0=$(load)
  # shellcheck disable=SC2086  # $sets is a list of flags
  $TERN bench --config configs/demo.yaml $sets $BENCH --json > "$d/bench.json"
  $TERN plan --config configs/demo.yaml $sets --calibrate "$d/bench.json" --instance local --json > "$d/plan.json"
  t0=$(date +%s.%N)
  $TERN train configs/demo.yaml $sets --quiet > "$d/train.log" 2>&1 || { cat "$d/train.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  l1=$(load)
  measured=$(echo "$t1 - $t0" | bc -l)
  pred=$(jq -r '.plans[0] | [.wall_s, .run.steps_s, .run.eval_s, .run.startup_s + .run.peak_probe_s + .run.model_save_s,
                 .run.sample_s + .run.checkpoint_s] | map(tostring) | join(" ")' "$d/plan.json")
  read -r p_wall p_steps p_eval p_start p_rest <<< "$pred"
  # Measured split: steps from summary.json, evaluation from metrics.jsonl; outside = process wall - Run()'s
  # wall_s (start-up, model.safetensors, exit); the rest of Run() = samples and checkpoint saves.
  m_steps=$(jq -r .train_s "$d/run/summary.json")
  m_run=$(jq -r .wall_s "$d/run/summary.json")
  m_eval=$(jq -s '[.[] | select(.eval_ms != null) | .eval_ms] | add / 1000' "$d/run/metrics.jsonl")
  m_start=$(echo "$measured - $m_run" | bc -l)
  m_rest=$(echo "$m_run - $m_steps - $m_eval" | bc -l)
  err=$(echo "100 * ($measured - $p_wall) / $p_wall" | bc -l)
  printf "%-10s %4.1f->%-5.1f %8.1fs %8.1fs %+6.1f%% | %7.1f %6.1f %7.1f %6.1f (%+5.1f%%)%12s | %7.1f %6.1f %7.1f %6.1f\n" \
    "$name" "$l0" "$l1" "$p_wall" "$measured" "$err" "$p_steps" "$p_eval" "$p_start" "$p_rest" \
    "$(echo "100 * ($m_steps - $p_steps) / $p_steps" | bc -l)" "" "$m_steps" "$m_eval" "$m_start" "$m_rest"
  jq -c '{step_ms, steps_ms, run}' "$d/bench.json" > "$WORK/$name.bench"
  echo "  bench: $(cat "$WORK/$name.bench")"
done
