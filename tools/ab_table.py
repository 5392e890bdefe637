#!/usr/bin/env python3
"""The A/B table of tools/gpu_ab.sh's output: per benchmark row, the median over rounds of
each binary's median_us, the ratio new/base, whether it is within the tolerance, and
whether both binaries produced the same output. The benches draw their inputs from fixed
seeds, so the float64 check's numbers printed at full precision (relative L2 and the
worst row's error over the same sampled rows) are a fingerprint of the output bits: equal
in every round of both binaries, or the row is flagged.
   tools/ab_table.py OUT_DIR [--tolerance 0.02]"""
import argparse, collections, glob, json, os, statistics

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--tolerance", type=float, default=0.02)
args = ap.parse_args()
rows = collections.OrderedDict()
for path in sorted(glob.glob(os.path.join(args.out, "*-*-*.jsonl"))):
    op, which, _ = os.path.basename(path)[:-6].rsplit("-", 2)
    for line in open(path):
        j = json.loads(line)
        if j.get("op") != op or "median_us" not in j:
            continue
        if not j.get("check", {}).get("passed", False):
            raise SystemExit(f"{path}: a row failed its float64 check: {j['shape']}")
        # splits 0 (the plan's choice) is the row's default: binaries that print it and
        # binaries that leave it out name the same row.
        shape = {k: v for k, v in j["shape"].items() if not (k == "splits" and v == 0)}
        key = (op, json.dumps(shape, sort_keys=True))
        row = rows.setdefault(key, {"base": [], "new": [], "prints": set()})
        row[which].append(j["median_us"])
        c = j["check"]
        row["prints"].add((repr(c["rel_l2"]), repr(c["worst_row_err"])))
worst = 0.0
differ = 0
print("| op | shape | base µs | new µs | new/base | same output |")
print("|---|---|---|---|---|---|")
for (op, shape), v in rows.items():
    b, n = statistics.median(v["base"]), statistics.median(v["new"])
    r = n / b
    worst = max(worst, abs(r - 1))
    flag = "" if abs(r - 1) <= args.tolerance else " **outside**"
    same = len(v["prints"]) == 1
    differ += not same
    s = ",".join(f"{k}={x}" for k, x in json.loads(shape).items())
    print(f"| {op} | {s} | {b:.1f} | {n:.1f} | {r:.3f}{flag} | {'yes' if same else '**no**'} |")
print(f"\n{len(rows)} rows, largest deviation {100 * worst:.1f} %, "
      f"{differ} rows whose output fingerprint differs between binaries or rounds")
