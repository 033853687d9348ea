#!/usr/bin/env bash
# The server under load (docs/serving-speed.md, "Under load"): `tern serve` on loopback with a small model, then
#   1. serve_storm: REQUESTS (2000) requests at 64 and at 256 connections, a mix of well-formed OpenAI
#      requests and hostile clients (src/serve/storm.h), checking every answer, /metrics and the RSS;
#   2. wrk (Debian's) for raw HTTP: WRK_S (10) seconds of non-streaming completions at 64 and 256
#      connections; the server's own counters give the status codes.
# Exit 1 when a storm broke the contract. Prints markdown tables and the machine (lscpu).
#
#   bench/serve_storm.sh BUILD_DIR [RUN_DIR]      (default: a tiny random model, L2 H2 C64 T128, made here)
#
# Environment: REQUESTS, CONCURRENCY (64,256; 64,256,64,256 shows whether memory settles), WRK_S, PORT (18090), THREADS (server compute threads, default 2), KV_MB (64),
# MAX_TOKENS (16).
set -euo pipefail
build=${1:?usage: bench/serve_storm.sh BUILD_DIR [RUN_DIR]}
run=${2:-}
tern="$build/tern"
bench="$build/bench"
port=${PORT:-18090}
work=$(mktemp -d /tmp/serve_storm.XXXXXX)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "$run" ]; then
  for i in $(seq 1 400); do
    echo "The $i-th traveller crossed the river at dawn and wrote the number $((i * 7 % 97)) in the sand."
    echo "Servers answer requests; some clients wait, some leave early, and some send nonsense number $i."
  done > "$work/corpus.txt"
  "$tern" prepare --input "$work/corpus.txt" --out "$work/data" --vocab-size 300 --val-fraction 0.1 \
    --threads 1 > /dev/null
  "$bench/serve_load" make-run --shape 2,2,64,300,128 --tokenizer "$work/data/tokenizer.model" --out "$work/run" \
    > /dev/null
  run="$work/run"
fi
echo "sk-storm-$$" > "$work/key.txt"
key=$(cat "$work/key.txt")
"$tern" serve "$run" --port "$port" --api-key-file "$work/key.txt" --kv-cache-mb "${KV_MB:-64}" \
  --threads "${THREADS:-2}" 2> "$work/serve.log" &
server_pid=$!
until curl -sf "http://127.0.0.1:$port/health" > /dev/null; do
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.log"; exit 1; }
  sleep 0.2
done
rss() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$server_pid/status"; }
codes() {  # the server's request counters by status code, "200=N 429=M ..."
  curl -s -H "Authorization: Bearer $key" "http://127.0.0.1:$port/metrics" |
    awk -F'code="' '/^tern_http_requests_total\{/ {split($2, a, "\""); v = $0; sub(/.* /, "", v); n[a[1]] += v}
      END {for (c in n) printf "%s=%d ", c, n[c]}'
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; model: $(grep -o 'L[0-9]* H[0-9]* C[0-9]* V[0-9]* T[0-9]*' "$work/serve.log" | head -1)"
echo "server RSS at start: $(rss) MiB"
echo
status=0
"$bench/serve_storm" --port "$port" --api-key "$key" --pid "$server_pid" --requests "${REQUESTS:-2000}" \
  --concurrency "${CONCURRENCY:-64,256}" --max-tokens "${MAX_TOKENS:-16}" --vocab 300 || status=1

if command -v wrk > /dev/null; then
  cat > "$work/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"prompt": "The traveller crossed the river", "max_tokens": ${MAX_TOKENS:-16}, "temperature": 0}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $key"
LUA
  echo
  echo "| wrk connections | requests | requests/s | non-2xx (wrk) | server codes (/metrics, this run) | RSS before -> after (MiB) |"
  echo "|---|---|---|---|---|---|"
  for c in 64 256; do
    before=$(codes)
    r0=$(rss)
    out=$(wrk -t2 -c"$c" -d"${WRK_S:-10}"s --timeout 30s -s "$work/post.lua" "http://127.0.0.1:$port/v1/completions")
    after=$(codes)
    diff=$(for kv in $after; do c0=$(echo " $before" | grep -o " ${kv%%=*}=[0-9]*" | cut -d= -f2); echo -n "${kv%%=*}: $(( ${kv#*=} - ${c0:-0} )) "; done)
    total=$(echo "$out" | awk '/requests in/ {print $1}')
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    non2xx=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
    echo "| $c | $total | $rps | ${non2xx:-0} | $diff | $r0 -> $(rss) |"
    if echo "$diff" | grep -qE '(^| )5(0[0-2]|0[4-9]|[1-9][0-9]): [1-9]'; then status=1; fi
  done
else
  echo "(wrk is not installed: scripts/install-deps installs it)"
fi
echo
echo "server RSS at the end: $(rss) MiB"
exit $status
