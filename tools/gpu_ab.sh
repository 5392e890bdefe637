#!/usr/bin/env bash
# A/B of two attnjit binaries on the mla_decode and mha_fwd benchmark rows, in one call with
# the binaries interleaved per op (base, new, then new, base in the next round), so clocks
# and the machine's state drift into both alike. Each row is checked against float64 by
# the binary itself before it is timed. Compare with tools/ab_table.py.
#   [OPS="mla_decode mha_fwd"] tools/gpu_ab.sh BASE_BIN NEW_BIN OUT_DIR [ROUNDS]
# Re-measuring rows that stayed outside: SHAPES="b=8,seq=4096,h=16,d=128;b=4,..." runs each
# listed --shape of each op as its own process per binary and round, so a row whose speed
# depends on the process (bimodal rows) is sampled over many processes, e.g. 8 rounds.
set -uo pipefail
base="$1" new="$2" out="$3" rounds="${4:-2}"
mkdir -p "$out"
export ATTNJIT_CACHE_DIR="${ATTNJIT_CACHE_DIR:-$(mktemp -d)}"
status=0
for r in $(seq "$rounds"); do
  order=("base" "new")
  [ $((r % 2)) = 0 ] && order=("new" "base")
  for op in ${OPS:-mla_decode mha_fwd}; do
    for which in "${order[@]}"; do
      bin="$base"; [ "$which" = new ] && bin="$new"
      if [ -z "${SHAPES:-}" ]; then
        timeout -s KILL "${BENCH_TIMEOUT:-300}" "$bin" bench "$op" --json \
          >"$out/$op-$which-$r.jsonl" 2>>"$out/ab.err" || { echo "$which $op round $r failed"; status=1; }
        continue
      fi
      : >"$out/$op-$which-$r.jsonl"
      IFS=';' read -ra shapes <<<"$SHAPES"
      for shape in "${shapes[@]}"; do
        timeout -s KILL "${BENCH_TIMEOUT:-300}" "$bin" bench "$op" --shape "$shape" --json \
          >>"$out/$op-$which-$r.jsonl" 2>>"$out/ab.err" || { echo "$which $op $shape round $r failed"; status=1; }
      done
    done
  done
done
exit $status
