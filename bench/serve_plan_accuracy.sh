#!/usr/bin/env bash
# Plan truth for serving: `tern plan --serve`, calibrated by `tern bench --serve` on this machine, against
# `tern serve` measured under load on the same machine (docs/serving-plan.md).
#
#   bench/serve_plan_accuracy.sh BUILD_DIR
#
# 1. A run of random weights of GPT-2 124M's shape (speed does not depend on the weights) and a small tokenizer.
# 2. `tern bench --serve` at the load's mean context (PROMPT_TOKENS + MAX_TOKENS / 2): the calibration, and
#    `tern plan --serve --calibrate --instance local` for the replica's capacity (its saturation rate).
# 3. For each FRACTIONS of that capacity, lambda: `tern serve`, and bench/serve_load.cpp's open loop (Poisson
#    arrivals at lambda, ignore_eos: every request generates MAX_TOKENS): the mean batch, time per output
#    token and time to the first token measured, beside what `tern plan --serve --burst 1` predicts at lambda.
#
# Environment: WEIGHTS (bf16), PROMPT_TOKENS (32), MAX_TOKENS (64), FRACTIONS ("0.25 0.5 0.75"), REQUESTS (96
# per level: 24 left the higher loads short of their steady state, ramp-up and drain weighing a third of the
# run), PORT (18090), THREADS (compute threads of the bench and the server; default all cores less one, which
# the load generator's client and the server's HTTP threads take: on a small machine they would otherwise
# stall the server's OpenMP regions). The machine should be otherwise idle. Beside the plan's batch, the table
# prints what the server measured: its mean batch per forward step and the forward's ms per step (so a gap
# shows whether the steps or the time around them differ from the plan).
set -euo pipefail
build=${1:?usage: bench/serve_plan_accuracy.sh BUILD_DIR}
tern="$build/tern"
load="$build/bench/serve_load"
weights=${WEIGHTS:-bf16}
prompt=${PROMPT_TOKENS:-32}
gen=${MAX_TOKENS:-64}
port=${PORT:-18090}
threads=${THREADS:-$(( $(nproc) > 1 ? $(nproc) - 1 : 1 ))}
tmp=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

here=$(cd "$(dirname "$0")/.." && pwd)
"$tern" prepare --input "$here/README.md" --out "$tmp/data" --vocab-size 512 > /dev/null 2>&1
"$load" make-run --shape 12,12,768,50257,1024 --tokenizer "$tmp/data/tokenizer.model" --out "$tmp/run" > /dev/null
ctx=$((prompt + gen / 2))
OMP_NUM_THREADS=$threads "$tern" bench --serve --model gpt2-124m --weights "$weights" --batches 1,2,4,8,16 --context "$ctx" --json \
  > "$tmp/serve.json" 2> /dev/null
plan() {
  "$tern" plan --serve --calibrate "$tmp/serve.json" --instance local --requests-per-s "$1" \
    --prompt-tokens "$prompt" --completion-tokens "$gen" --max-tpot-ms 100000 --burst 1 --json
}
capacity=$(plan 0.01 | python3 -c "import json,sys; print(json.load(sys.stdin)['rows'][0]['capacity_rps'])")
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $threads compute threads; GPT-2 124M (random weights), weights $weights,"
echo "$prompt prompt + $gen generated tokens per request; calibration: tern bench --serve --context $ctx;"
echo "the replica's capacity by the plan: $capacity req/s"
echo
echo "| load | lambda req/s | batch: plan | server: batch per step, forward ms | TPOT ms measured / plan | ratio | TTFT p50 ms measured / plan | ratio |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
for f in ${FRACTIONS:-0.25 0.5 0.75}; do
  lambda=$(python3 -c "print($f * $capacity)")
  "$tern" serve "$tmp/run" --port "$port" --weights "$weights" --max-batch 64 --kv-cache-mb 512 --threads "$threads" \
    2> "$tmp/serve.log" &
  server_pid=$!
  until curl -sf "http://127.0.0.1:$port/health" > /dev/null; do
    kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/serve.log"; exit 1; }
    sleep 0.5
  done
  "$load" --url "http://127.0.0.1:$port" --rate "$lambda" --requests "${REQUESTS:-96}" \
    --prompt-tokens "$prompt" --max-tokens "$gen" --vocab 259 --json > "$tmp/load.json"
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  plan "$lambda" > "$tmp/plan.json"
  python3 - "$tmp/load.json" "$tmp/plan.json" "$f" "$lambda" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["levels"][0]
row = json.load(open(sys.argv[2]))["rows"][0]
tpot, ttft = r["tpot_mean_ms"], r["ttft_p50_ms"]
print(f"| {float(sys.argv[3]):.0%} | {float(sys.argv[4]):.3f} | {row['batch']:.2f} "
      f"| {r['mean_batch']:.2f}, {r['engine_ms_per_step']['forward']:.1f} "
      f"| {tpot:.1f} / {row['tpot_ms']:.1f} | {row['tpot_ms'] / tpot:.2f} "
      f"| {ttft:.0f} / {row['ttft_s'] * 1000:.0f} | {row['ttft_s'] * 1000 / ttft:.2f} |")
PY
done
echo
python3 - "$tmp/plan.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["calibration"]
pts = ", ".join("%d %.1f/%.1f" % (q["batch"], q["model_ms"], q["measured_ms"]) for q in c["points"])
print("fit: decode at %.0f%% of %.1f GB/s, compute-bound %.0f%% of %.3g TFLOP/s, prefill %.0f%%, %.2f ms/step; "
      "bench steps (batch model/measured ms): %s" % (c["bw_efficiency"] * 100, c["bandwidth_gbps"],
      c["decode_mfu"] * 100, c["peak_tflops"], c["prefill_mfu"] * 100, c["overhead_ms"], pts))
PY
