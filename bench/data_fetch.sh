#!/usr/bin/env bash
# A prepared dataset on S3 (docs/formats.md): how fast `tern` publishes it (`tern prepare --out s3://`, the
# upload alone: the prepare is timed apart) and fetches it (`tern prepare --verify s3://`: every object read
# afresh into a scratch cache, verified, then checked again), against the aws CLI copying the same objects
# (`aws s3 sync`, 10 requests at a time, no verification) to and from the same S3 API: moto_server on loopback,
# started here. Both sides are bound by moto (a Python server) here, so the ratio says whether tern's fetch and
# its checks keep up with the tool users would otherwise script, not what a cloud link gives.
#
#   bench/data_fetch.sh BUILD_DIR [MB]     # MB: the corpus size (default 40: ~23M tokens, ~46 MB of shards)
#
# Environment: REPS (3), SHARD_TOKENS (2000000: ~4 MB shards, many objects as a real dataset has).
set -euo pipefail
build=${1:?usage: bench/data_fetch.sh BUILD_DIR [MB]}
mb=${2:-40}
REPS=${REPS:-3}
tern="$(cd "$build" && pwd)/tern"
tmp=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
moto_server -H 127.0.0.1 -p "$port" > "$tmp/moto.log" 2>&1 &
moto=$!
trap 'kill $moto 2>/dev/null; rm -rf "$tmp"' EXIT
endpoint=http://127.0.0.1:$port
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
aws_s3() { aws --endpoint-url "$endpoint" s3 "$@"; }
for _ in $(seq 50); do aws_s3 ls > /dev/null 2>&1 && break; sleep 0.2; done
aws_s3 mb s3://bench > /dev/null

# A corpus of $mb MB: the King James Bible repeated when Debian's bible-kjv is there, else generated text.
if command -v bible > /dev/null; then bible "Gen1:1-Rev22:21" > "$tmp/one.txt"; else
  python3 -c 'import random; r=random.Random(1); w=["alpha","beta","gamma","delta","seed","fruit","light","day"]
print("\n".join(" ".join(r.choice(w) for _ in range(12)) for _ in range(60000)))' > "$tmp/one.txt"
fi
: > "$tmp/corpus.txt"
while [ "$(stat -c %s "$tmp/corpus.txt")" -lt $((mb * 1000000)) ]; do cat "$tmp/one.txt" >> "$tmp/corpus.txt"; done
"$tern" prepare --input "$tmp/corpus.txt" --out "$tmp/local" --vocab-size 4096 --shard-tokens "${SHARD_TOKENS:-2000000}" \
  > /dev/null 2>&1
bytes=$(du -sb "$tmp/local" | cut -f1)
files=$(find "$tmp/local" -type f | wc -l)
now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; moto_server on loopback"
echo "dataset: $files files, $((bytes / 1000000)) MB ($(( $(stat -c %s "$tmp/corpus.txt") / 1000000 )) MB of text)"
up_t=() up_a=() down_t=() down_a=()
for rep in $(seq "$REPS"); do
  # Upload: tern publishes the prepared directory (a cache copy of it, so each rep uploads everything anew).
  t0=$(now)
  aws_s3 sync --only-show-errors "$tmp/local" "s3://bench/aws$rep"
  up_a+=("$(echo "$(now) - $t0" | bc)")
  rm -rf "$tmp/cache"
  t0=$(now)
  # --input is prepared first (timed apart below, subtracted): publish = prepare + upload.
  "$tern" prepare --input "$tmp/corpus.txt" --out "s3://bench/tern$rep" --vocab-size 4096 \
    --shard-tokens "${SHARD_TOKENS:-2000000}" --s3-endpoint "$endpoint" --cache-dir "$tmp/cache" > /dev/null 2> "$tmp/pub.log"
  up_t+=("$(sed -n 's/.*published [0-9]* files ([^)]*) to [^ ]* in \([0-9.]*\) s.*/\1/p' "$tmp/pub.log")")
  # Download: aws s3 sync into an empty folder; tern --verify fetches into a scratch cache and checks.
  rm -rf "$tmp/down"
  t0=$(now)
  aws_s3 sync --only-show-errors "s3://bench/aws$rep" "$tmp/down"
  down_a+=("$(echo "$(now) - $t0" | bc)")
  t0=$(now)
  "$tern" prepare --verify "s3://bench/tern$rep" --s3-endpoint "$endpoint" --cache-dir "$tmp/vcache" > /dev/null 2>&1
  down_t+=("$(echo "$(now) - $t0" | bc)")
done
ua=$(printf '%s\n' "${up_a[@]}" | median)
ut=$(printf '%s\n' "${up_t[@]}" | median)
da=$(printf '%s\n' "${down_a[@]}" | median)
dt=$(printf '%s\n' "${down_t[@]}" | median)
mbs() { echo "scale=1; $bytes / 1000000 / $1" | bc; }
echo
echo "| direction | aws s3 sync s (MB/s) | tern s (MB/s) | tern vs aws (throughput) |"
echo "|---|---|---|---|"
printf '| upload (publish) | %.2f (%s) | %.2f (%s) | %.2fx |\n' "$ua" "$(mbs "$ua")" "$ut" "$(mbs "$ut")" "$(echo "$ua / $ut" | bc -l)"
printf '| download (fetch + verify) | %.2f (%s) | %.2f (%s) | %.2fx |\n' "$da" "$(mbs "$da")" "$dt" "$(mbs "$dt")" "$(echo "$da / $dt" | bc -l)"
t0=$(now)
aws --version > /dev/null 2>&1
echo "medians of $REPS; tern's upload is its own timing (the prepare excluded); its fetch includes process start and two"
echo "verifications; each aws command includes the CLI's start ($(echo "$(now) - $t0" | bc | cut -c1-4) s for \`aws --version\`)"
