#!/usr/bin/env bash
# Autotuning on the GPU machine: a real `attnjit tune` sweep of every tunable op on its
# benchmark shapes (tma_copy: its whole search space; mla_decode: a small space of tile
# shapes, ring depths and split counts; mha_fwd: key tiles × 2 stages on the 8k rows and the
# decode row, plus split counts on the decode row), then the database, its report and plots,
# the tuned-versus-default ratio table and the sweeps' wall time, all in OUT_DIR:
#
#   tools/gpu_tune.sh OUT_DIR        (tools/gpu_run.sh runs it when TUNE=1)
#
#   tuning.json            the tuning database the sweeps wrote
#   sweep-<op>.json/.log   each sweep's --json result and its stderr progress
#   report.txt             `attnjit tune --report`; <op>.svg: time per config, newest bucket
#   ratios.md, ratios.json tuned vs heuristic default per shape (same worker, same method),
#                          plus mla_decode and mha_fwd through the runtime (bench, DB on
#                          vs off)
#   wall.json              wall seconds per sweep and in all
#
# Environment: BUILD_DIR (default build-gpu; built here if missing), TUNE_ITERS (default
# 30), TUNE_TIMEOUT (seconds per sweep, default 1800), TUNE_MHA_FULL=1 (mha_fwd's whole
# space, stages 2 and 3: about 1.6× the candidates and compiles).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:?usage: tools/gpu_tune.sh OUT_DIR}"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
export ATTNJIT_CACHE_DIR="${ATTNJIT_CACHE_DIR:-$PWD/$BUILD_DIR/kernel-cache}"
ITERS="${TUNE_ITERS:-30}"
status=0

if [ ! -x "$BUILD_DIR/attnjit" ]; then
  { cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$BUILD_DIR" -j "$(nproc)"; } >"$OUT_DIR/build.log" 2>&1 || { echo "BUILD FAILED"; tail -30 "$OUT_DIR/build.log"; exit 1; }
fi
AJ="$BUILD_DIR/attnjit"
DB="$OUT_DIR/tuning.json"
rm -f "$DB"
: >"$OUT_DIR/wall.jsonl"

sweep() {  # sweep NAME ARGS...: one `attnjit tune` run, timed
  local name="$1"; shift
  local t0 t1
  t0=$(date +%s.%N)
  timeout -s KILL "${TUNE_TIMEOUT:-1800}" "$AJ" tune "$@" --db "$DB" --iters "$ITERS" --json \
    >"$OUT_DIR/sweep-$name.json" 2>"$OUT_DIR/sweep-$name.log" || { echo "sweep $name failed (see sweep-$name.log)"; status=1; }
  t1=$(date +%s.%N)
  local wall
  wall=$(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }")
  echo "{\"sweep\": \"$name\", \"wall_s\": $wall}" >>"$OUT_DIR/wall.jsonl"
  echo "sweep $name: $wall s"
}

echo "== tune (database $DB)"
sweep tma_copy --op tma_copy --bench-shapes
echo '{"block_n": [32, 64], "stages": [2, 4], "num_splits": [0, 1, 2, 4, 8, 16]}' >"$OUT_DIR/mla_space.json"
sweep mla_decode --op mla_decode --bench-shapes --space "$OUT_DIR/mla_space.json"
# mha_fwd's bench shapes: the 8k rows (d 64, 128, 256, (192, 128); causal or not) and the
# decode row. 2 stages only (a third never paid on d64/d128, and no d256 tile fits it):
# the whole space (168 candidates, 113 kernels) would take this script past ~5 minutes.
# num_splits is pruned off every row but the decode one.
if [ "${TUNE_MHA_FULL:-0}" = 1 ]; then
  sweep mha_fwd --op mha_fwd --bench-shapes
else
  echo '{"block_n": [64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256], "stages": [2], "num_splits": [0, 1, 2, 4, 8]}' >"$OUT_DIR/mha_space.json"
  sweep mha_fwd --op mha_fwd --bench-shapes --space "$OUT_DIR/mha_space.json"
fi

"$AJ" tune --report --db "$DB" >"$OUT_DIR/report.txt" 2>&1 || status=1
for op in tma_copy mla_decode mha_fwd; do
  "$AJ" tune --report --db "$DB" --op "$op" --plot "$OUT_DIR/$op.svg" >/dev/null 2>>"$OUT_DIR/report.txt" || status=1
done

# The runtime picking the tuned config: `bench mla_decode` without --config calls
# mla_decode(..., nullptr), i.e. whatever the runtime selects, with the database on and off.
ATTNJIT_TUNING_DB="$DB" timeout -s KILL 600 "$AJ" bench mla_decode --json >"$OUT_DIR/bench-tuned.jsonl" 2>>"$OUT_DIR/bench.err" || status=1
ATTNJIT_TUNING_DB=off timeout -s KILL 600 "$AJ" bench mla_decode --json >"$OUT_DIR/bench-default.jsonl" 2>>"$OUT_DIR/bench.err" || status=1
# mha_fwd the same way on the swept rows: `bench mha_fwd` without --config measures
# what mha_fwd_plan picks: mha_fwd_selected_config's tile and the database's split count.
t0=$(date +%s.%N)
for shape in b=4,seq=8192,h=32,d=64 b=4,seq=8192,h=16,d=128 b=4,seq=8192,h=8,d=256 b=4,seq=8192,h=16,d=192,dv=128; do
  for causal in 0 1; do
    ATTNJIT_TUNING_DB="$DB" timeout -s KILL 120 "$AJ" bench mha_fwd --shape "$shape,causal=$causal" --json >>"$OUT_DIR/bench-tuned.jsonl" 2>>"$OUT_DIR/bench.err" || status=1
    ATTNJIT_TUNING_DB=off timeout -s KILL 120 "$AJ" bench mha_fwd --shape "$shape,causal=$causal" --json >>"$OUT_DIR/bench-default.jsonl" 2>>"$OUT_DIR/bench.err" || status=1
  done
done
dec=b=64,s_q=1,s_k=32768,h=16,h_kv=2,group=8,causal=1
ATTNJIT_TUNING_DB="$DB" timeout -s KILL 120 "$AJ" bench mha_fwd --shape "$dec" --json >>"$OUT_DIR/bench-tuned.jsonl" 2>>"$OUT_DIR/bench.err" || status=1
ATTNJIT_TUNING_DB=off timeout -s KILL 120 "$AJ" bench mha_fwd --shape "$dec" --json >>"$OUT_DIR/bench-default.jsonl" 2>>"$OUT_DIR/bench.err" || status=1
echo "{\"sweep\": \"mha_fwd runtime bench\", \"wall_s\": $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t0 }")}" >>"$OUT_DIR/wall.jsonl"

python3 - "$OUT_DIR" <<'PY' || status=1
import json, os, sys
out = sys.argv[1]
rows = []
for op in ("tma_copy", "mla_decode", "mha_fwd"):
    p = os.path.join(out, f"sweep-{op}.json")
    try:
        j = json.load(open(p))
    except Exception as e:
        print(f"{p}: {e}"); continue
    gpu = j["fingerprint"]["gpu"]
    for s in j["shapes"]:
        best, default = s.get("best") or {}, s["default"]
        change = " ".join(f"{k}={v}" for k, v in sorted(best.items()) if default.get(k) != v) or "default"
        ok = sum(1 for r in s["results"] if r["status"] == "ok")
        bad = {}
        for r in s["results"]:
            if r["status"] not in ("ok", "pruned"):
                bad[r["status"]] = bad.get(r["status"], 0) + 1
        rows.append({"op": op, "gpu": gpu, "bucket": s["bucket"], "shape": s["shape"],
                     "default_us": s["default_us"], "best_us": s["best_us"], "speedup": s["speedup"],
                     "best_change": change, "timed_ok": ok, "rejected": bad,
                     "candidates": s["candidates"], "pruned": s["pruned"], "wall_s": s["wall_ms"] / 1e3})

MLA_KEYS = ("b", "q_len", "h", "s_k", "varlen")
MHA_KEYS = ("b", "s_q", "s_k", "h", "h_kv", "d", "dv", "causal", "group")
def bench(path, op, keys):
    res = {}
    for line in open(path) if os.path.exists(path) else []:
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if j.get("op") == op and "median_us" in j:
            sh = j["shape"]
            res[tuple(sh[k] for k in keys)] = (j["median_us"], j.get("num_splits"), j["config"])
    return res
def runtime_rows(op, keys):
    tuned = bench(os.path.join(out, "bench-tuned.jsonl"), op, keys)
    default = bench(os.path.join(out, "bench-default.jsonl"), op, keys)
    rows = []
    for k in sorted(set(tuned) & set(default)):
        change = " ".join(f"{f}={v}" for f, v in sorted(tuned[k][2].items()) if default[k][2].get(f) != v) or "default"
        rows.append({"op": op, "shape": dict(zip(keys, k)),
                     "default_us": default[k][0], "tuned_us": tuned[k][0], "speedup": default[k][0] / tuned[k][0],
                     "default_splits": default[k][1], "tuned_splits": tuned[k][1],
                     "tuned_config": tuned[k][2], "tuned_change": change})
    return rows
runtime = runtime_rows("mla_decode", MLA_KEYS)
runtime_mha = runtime_rows("mha_fwd", MHA_KEYS)
walls = [json.loads(l) for l in open(os.path.join(out, "wall.jsonl"))]
wall = {"per_sweep_s": {w["sweep"]: w["wall_s"] for w in walls}, "total_s": sum(w["wall_s"] for w in walls)}
json.dump(wall, open(os.path.join(out, "wall.json"), "w"), indent=1)
json.dump({"sweeps": rows, "runtime_bench": runtime + runtime_mha, "wall": wall}, open(os.path.join(out, "ratios.json"), "w"), indent=1)

md = ["# Tuned vs heuristic default", "",
      f"GPU: {rows[0]['gpu'] if rows else '?'}. Sweep wall time: " +
      ", ".join(f"{k} {v:.0f} s" for k, v in wall["per_sweep_s"].items()) + f", total {wall['total_s']:.0f} s.", "",
      "Both columns measured by the same worker in the same sweep (CUDA events, median, inputs rotated past L2).", "",
      "| op | bucket | default µs | tuned µs | default/tuned | tuned config (change) | ok / candidates (pruned) | rejected |",
      "|---|---|---:|---:|---:|---|---|---|"]
for r in rows:
    md.append(f"| {r['op']} | {r['bucket']} | {r['default_us']:.2f} | {r['best_us']:.2f} | {r['speedup']:.3f}x | "
              f"{r['best_change']} | {r['timed_ok']} / {r['candidates']} ({r['pruned']}) | "
              f"{', '.join(f'{k} {v}' for k, v in r['rejected'].items()) or '-'} |")
if runtime:
    md += ["", "## mla_decode through the runtime (`attnjit bench mla_decode`, config = nullptr; DB on vs `ATTNJIT_TUNING_DB=off`)", "",
           "| b | q_len | h | s_k | varlen | default µs (splits) | tuned µs (splits) | default/tuned |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runtime:
        s = r["shape"]
        md.append(f"| {s['b']} | {s['q_len']} | {s['h']} | {s['s_k']} | {s['varlen']} | {r['default_us']:.1f} ({r['default_splits']}) | "
                  f"{r['tuned_us']:.1f} ({r['tuned_splits']}) | {r['speedup']:.3f}x |")
if runtime_mha:
    md += ["", "## mha_fwd through the runtime (`attnjit bench mha_fwd`: mha_fwd_selected_config; DB on vs `ATTNJIT_TUNING_DB=off`)", "",
           "| b | s_q | s_k | h/h_kv | d/dv | causal | group | default µs (splits) | tuned µs (splits) | default/tuned | tuned config (change) |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in runtime_mha:
        s = r["shape"]
        md.append(f"| {s['b']} | {s['s_q']} | {s['s_k']} | {s['h']}/{s['h_kv']} | {s['d']}/{s['dv']} | {s['causal']} | {s['group']} | "
                  f"{r['default_us']:.1f} ({r['default_splits']}) | {r['tuned_us']:.1f} ({r['tuned_splits']}) | {r['speedup']:.3f}x | {r['tuned_change']} |")
open(os.path.join(out, "ratios.md"), "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
rm -f "$OUT_DIR/wall.jsonl"
exit $status
