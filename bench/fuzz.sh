#!/usr/bin/env bash
# The fuzzing benchmark: every libFuzzer harness (fuzz/README.md) for SECONDS each (default 600), then one row
# per harness: executions, executions per second, coverage (libFuzzer's cov: edges and ft: features at the
# end), corpus size (inputs, bytes), and crashes (inputs left in build-fuzz/crashes/NAME/ by this run).
#
#   bench/fuzz.sh [SECONDS] [HARNESS...]      e.g. bench/fuzz.sh 60, bench/fuzz.sh 600 safetensors
#
# Builds first (scripts/fuzz build). Each harness starts from its committed seeds plus what earlier runs
# found (build-fuzz/corpus/NAME/); `rm -rf build-fuzz/corpus` for figures from the seeds alone. One process
# per harness: on a shared machine exec/s moves with the load, so name the machine and its load with figures.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
scripts/fuzz build
names=("$@")
if [ ${#names[@]} -eq 0 ]; then mapfile -t names < <(scripts/fuzz list); fi
echo "bench/fuzz.sh: ${#names[@]} harnesses x ${seconds} s on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| %-15s | %12s | %8s | %6s | %7s | %15s | %7s |\n' harness executions exec/s cov ft corpus crashes
printf '|%s|%s|%s|%s|%s|%s|%s|\n' ----------------- -------------- ---------- -------- --------- ----------------- ---------
failed=0
for name in "${names[@]}"; do
  crashes=build-fuzz/crashes/$name
  before=$(find "$crashes" -type f 2> /dev/null | wc -l || true)  # no folder yet on a first run
  scripts/fuzz run "$seconds" "$name" > /dev/null 2>&1 || failed=1
  log=build-fuzz/logs/$name.log
  execs=$(grep -oP 'stat::number_of_executed_units:\s+\K[0-9]+' "$log" || grep -oP '^#\K[0-9]+' "$log" | tail -1)
  rate=$(grep -oP 'stat::average_exec_per_sec:\s+\K[0-9]+' "$log" || echo "-")
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(grep -oP 'cov: \K[0-9]+' <<< "$last" || echo "-")
  ft=$(grep -oP 'ft: \K[0-9]+' <<< "$last" || echo "-")
  corpus="$(ls build-fuzz/corpus/"$name" | wc -l) / $(du -sk build-fuzz/corpus/"$name" | cut -f1) KB"
  after=$(find "$crashes" -type f 2> /dev/null | wc -l || true)
  printf '| %-15s | %12s | %8s | %6s | %7s | %15s | %7s |\n' "$name" "${execs:--}" "$rate" "$cov" "$ft" "$corpus" \
    "$((after - before))"
done
if [ $failed -ne 0 ]; then echo "bench/fuzz.sh: a harness found something: see build-fuzz/crashes/ and build-fuzz/logs/" >&2; fi
exit $failed
