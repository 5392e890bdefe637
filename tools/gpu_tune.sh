#!/usr/bin/env bash
# Autotuning on the GPU machine: a real `attnjit tune` sweep of every tunable op on its
# benchmark shapes (tma_copy: its whole search space; mla_decode: a small space of tile
# shapes, ring depths and split counts), then the database, its report and plots, the
# tuned-versus-default ratio table and the sweeps' wall time, all in OUT_DIR:
#
#   tools/gpu_tune.sh OUT_DIR        (tools/gpu_run.sh runs it when TUNE=1)
#
#   tuning.json            the tuning database the sweeps wrote
#   sweep-<op>.json/.log   each sweep's --json result and its stderr progress
#   report.txt             `attnjit tune --report`; <op>.svg: time per config, newest bucket
#   ratios.md, ratios.json tuned vs heuristic default per shape (same worker, same method),
#                          plus mla_decode through the runtime (bench, DB on vs off)
#   wall.json              wall seconds per sweep and in all
#
# Environment: BUILD_DIR (default build-gpu; built here if missing), TUNE_ITERS (default
# 30), TUNE_TIMEOUT (seconds per sweep, default 1800).
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

"$AJ" tune --report --db "$DB" >"$OUT_DIR/report.txt" 2>&1 || status=1
for op in tma_copy mla_decode; do
  "$AJ" tune --report --db "$DB" --op "$op" --plot "$OUT_DIR/$op.svg" >/dev/null 2>>"$OUT_DIR/report.txt" || status=1
done

# The runtime picking the tuned config: `bench mla_decode` without --config calls
# mla_decode(..., nullptr), i.e. whatever the runtime selects, with the database on and off.
ATTNJIT_TUNING_DB="$DB" timeout -s KILL 600 "$AJ" bench mla_decode --json >"$OUT_DIR/bench-tuned.jsonl" 2>>"$OUT_DIR/bench.err" || status=1
ATTNJIT_TUNING_DB=off timeout -s KILL 600 "$AJ" bench mla_decode --json >"$OUT_DIR/bench-default.jsonl" 2>>"$OUT_DIR/bench.err" || status=1

python3 - "$OUT_DIR" <<'PY' || status=1
import json, os, sys
out = sys.argv[1]
rows = []
for op in ("tma_copy", "mla_decode"):
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

def bench(path):
    res = {}
    for line in open(path) if os.path.exists(path) else []:
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if j.get("op") == "mla_decode" and "median_us" in j:
            sh = j["shape"]
            res[(sh["b"], sh["q_len"], sh["h"], sh["s_k"], sh["varlen"])] = (j["median_us"], j.get("num_splits"), j["config"])
    return res
tuned, default = bench(os.path.join(out, "bench-tuned.jsonl")), bench(os.path.join(out, "bench-default.jsonl"))
runtime = []
for k in sorted(set(tuned) & set(default)):
    runtime.append({"shape": dict(zip(("b", "q_len", "h", "s_k", "varlen"), k)),
                    "default_us": default[k][0], "tuned_us": tuned[k][0], "speedup": default[k][0] / tuned[k][0],
                    "default_splits": default[k][1], "tuned_splits": tuned[k][1],
                    "tuned_config": tuned[k][2]})
walls = [json.loads(l) for l in open(os.path.join(out, "wall.jsonl"))]
wall = {"per_sweep_s": {w["sweep"]: w["wall_s"] for w in walls}, "total_s": sum(w["wall_s"] for w in walls)}
json.dump(wall, open(os.path.join(out, "wall.json"), "w"), indent=1)
json.dump({"sweeps": rows, "runtime_bench": runtime, "wall": wall}, open(os.path.join(out, "ratios.json"), "w"), indent=1)

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
open(os.path.join(out, "ratios.md"), "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
rm -f "$OUT_DIR/wall.jsonl"
exit $status
