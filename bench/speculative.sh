#!/usr/bin/env bash
# Speculative decoding by prompt lookup (`--speculative-tokens`, docs/speculative.md): `tern generate --stats`
# with K draft tokens vs without, alternated, on prompts whose answer repeats its context ("quote") and on
# ones where it does not ("plain", "sampled"). Prints forwards, accepted/drafted draft tokens, median
# tokens/s and the ratio to K = 0, and checks the text is the same with and without.
#
#   bench/speculative.sh BUILD_DIR RUN_DIR        # e.g. build runs/demo (the King James demo model)
#
# Environment: K (draft tokens, default 4), LOOKUP_MIN (2), REPS (5), MAX_TOKENS (96), WEIGHTS (fp32),
# PROMPTS_FILE (lines "name<TAB>temperature<TAB>prompt", \n for a newline; default: the demo's prompts).
set -euo pipefail
build=${1:?usage: bench/speculative.sh BUILD_DIR RUN_DIR}
run=${2:?usage: bench/speculative.sh BUILD_DIR RUN_DIR}
K=${K:-4}
REPS=${REPS:-5}
tern="$build/tern"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [[ -n ${PROMPTS_FILE:-} ]]; then
  cp "$PROMPTS_FILE" "$tmp/prompts"
else
  printf '%s\t%s\t%s\n' \
    plain 0 "And God said" \
    quote 0 "And the LORD spake unto Moses, saying, Speak unto the children of Israel, that they bring me an offering: of every man that giveth it willingly with his heart ye shall take my offering.\nAnd the LORD spake unto Moses, saying, Speak unto" \
    sampled 0.8 "And God said" > "$tmp/prompts"
fi

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), ${OMP_NUM_THREADS:-$(nproc)} threads; model $run, weights ${WEIGHTS:-fp32}; K=$K, lookup ${LOOKUP_MIN:-2}-4"
echo
echo "| prompt | K | tokens | forwards | draft tokens accepted | tokens/s (median of $REPS) | vs K=0 | same text |"
echo "|---|---|---|---|---|---|---|---|"
while IFS=$'\t' read -r name temp prompt; do
  prompt=${prompt//\\n/$'\n'}
  declare -A rates=()
  for rep in $(seq "$REPS"); do
    for k in 0 "$K"; do
      "$tern" generate "$run" --prompt "$prompt" --max-tokens "${MAX_TOKENS:-96}" --temperature "$temp" --seed 7 \
        --weights "${WEIGHTS:-fp32}" --speculative-tokens "$k" --prompt-lookup-min "${LOOKUP_MIN:-2}" --stats \
        > "$tmp/out.$k" 2> "$tmp/err.$k"
      line=$(grep 'forward passes' "$tmp/err.$k")
      rates[$k]+="$(sed -n 's/.*(\([0-9.]*\) tokens\/s.*/\1/p' <<< "$line") "
      echo "$line" > "$tmp/stats.$k"
    done
    cmp -s "$tmp/out.0" "$tmp/out.$K" && same=yes || same=NO
  done
  median() { tr ' ' '\n' <<< "$1" | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  base=$(median "${rates[0]}")
  for k in 0 "$K"; do
    s=$(cat "$tmp/stats.$k")
    tokens=$(sed -n 's/^tern generate: \([0-9]*\) tokens.*/\1/p' <<< "$s")
    fwd=$(sed -n 's/.* in \([0-9]*\) forward passes.*/\1/p' <<< "$s")
    acc=$(sed -n 's/.*accepted \([0-9]* of [0-9]*\).*/\1/p' <<< "$s")
    m=$(median "${rates[$k]}")
    echo "| $name | $k | $tokens | $fwd | $acc | $m | $(awk -v a="$m" -v b="$base" 'BEGIN {printf "%.2fx", a / b}') | $same |"
  done
  unset rates
done < "$tmp/prompts"
