#!/usr/bin/env bash
# The serving benchmark of docs/serving-speed.md: for each run directory, starts `tern serve` with fp32 and with
# int8 weights on a loopback port, waits for /health, runs serve_load at 1, 4, 16 and 32 concurrent streams,
# and stops the server. Prints one markdown table per (model, quantize).
#
#   bench/serve_load.sh BUILD_DIR RUN_DIR [RUN_DIR...]
#
# Environment: STREAMS (default 1,4,16,32; 1,16,1,16,1,16 interleaves the levels, for a noisy machine),
# QUANTIZE (default "none int8"), PROMPT_TOKENS (32), MAX_TOKENS (64), REQUESTS (2 per stream),
# THREADS (compute threads of the server, default: all cores), KV_MB (1024), PORT (18080), KV_DTYPE (auto:
# bf16 with int8 weights, fp32 with fp32 weights; or fp32 | bf16 for both).
# A run directory with random weights of GPT-2 124M's shape (speed does not depend on the weights):
#   BUILD_DIR/bench/serve_load make-run --shape 12,12,768,50257,1024 --tokenizer runs/demo/tokenizer.model --out /tmp/gpt2-124m
set -euo pipefail
build=${1:?usage: bench/serve_load.sh BUILD_DIR RUN_DIR [RUN_DIR...]}
shift
tern="$build/tern"
load="$build/bench/serve_load"
[ -x "$load" ] || load="$build/serve_load"
port=${PORT:-18080}
server_pid=""
stop_server() { if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; server_pid=""; fi; }
trap stop_server EXIT

for run in "$@"; do
  for quant in ${QUANTIZE:-none int8}; do
    "$tern" serve "$run" --port "$port" --quantize "$quant" --kv-cache-mb "${KV_MB:-1024}" \
      --kv-dtype "${KV_DTYPE:-auto}" \
      --threads "${THREADS:-0}" --max-batch 32 2> "/tmp/serve_load.$quant.log" &
    server_pid=$!
    until curl -sf "http://127.0.0.1:$port/health" > /dev/null; do
      kill -0 "$server_pid" 2>/dev/null || { cat "/tmp/serve_load.$quant.log"; exit 1; }
      sleep 0.5
    done
    echo
    echo "### $(basename "$run"), weights $quant ($(grep -o 'L[0-9]* H[0-9]* C[0-9]* V[0-9]* T[0-9]*' "/tmp/serve_load.$quant.log" | head -1), KV $(grep -o 'KV cache [a-z0-9]*' "/tmp/serve_load.$quant.log" | head -1 | cut -d' ' -f3))"
    "$load" --url "http://127.0.0.1:$port" --streams "${STREAMS:-1,4,16,32}" --prompt-tokens "${PROMPT_TOKENS:-32}" \
      --max-tokens "${MAX_TOKENS:-64}" --requests-per-stream "${REQUESTS:-2}" --vocab 259
    stop_server
  done
done
