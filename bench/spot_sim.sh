#!/usr/bin/env bash
# Spot policies on the shipped traces (docs/spot-simulation.md): for a 24-hour job with a 48-hour and a
# 30-hour deadline, every availability zone under both polarities, 200 start offsets each: Uniform Progress
# and the omniscient bound as a share of on-demand's cost, the misses of spot alone and of Uniform Progress,
# and the time `tern simulate` took (target: 45 days x 200 starts for one job in well under 1 s).
#   bench/spot_sim.sh                                   # restart 5 min, saves of 3 min (lose work on preemption)
#   ARGS="--checkpoint-time 60s" bench/spot_sim.sh      # saves that fit in AWS's 2-minute notice
set -euo pipefail
cd "$(dirname "$0")/.."
TERN=${TERN:-build/tern}
ARGS=${ARGS:-"--restart-overhead 5m --checkpoint-time 3m"}
[ -x "$TERN" ] || { echo "spot_sim: $TERN is not built (cmake --build build --target tern)" >&2; exit 1; }
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; tern simulate $ARGS"
for deadline in 48h 30h; do
  # shellcheck disable=SC2086
  "$TERN" simulate --work-hours 24h --deadline "$deadline" $ARGS --starts 200 --json >"${TMPDIR:-/tmp}/spot_sim_$deadline.json"
  python3 - "${TMPDIR:-/tmp}/spot_sim_$deadline.json" "$deadline" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = {}
for x in r["results"]:
    rows.setdefault((x["polarity"], x["zone"]), {})[x["policy"]] = x
print(f"\n24 h of work, deadline {sys.argv[2]} ({r['starts']} starts per zone; simulate took {r['elapsed_s']:.2f} s)\n")
print("| polarity | zone | UP cost vs OD | UP p95 wall | UP miss | omniscient vs OD | spot miss |")
print("|---|---|---|---|---|---|---|")
for pol in ("available-if-nonzero", "unavailable-if-nonzero"):
    ups = []
    for (p, z), v in sorted(rows.items()):
        if p != pol: continue
        up, om, sp = v["uniform-progress"], v["omniscient"], v["spot"]
        ups.append(up["vs_ondemand"])
        print(f"| {p} | {z} | {100*up['vs_ondemand']:.0f}% | {up['p95_wall_h']:.1f} h | {100*up['miss_rate']:.0f}% "
              f"| {100*om['vs_ondemand']:.0f}% | {100*sp['miss_rate']:.0f}% |")
    if ups:
        print(f"| {pol} | **mean** | **{100*sum(ups)/len(ups):.0f}%** | | | | |")
PY
done
