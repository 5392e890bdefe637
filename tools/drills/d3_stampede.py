#!/usr/bin/env python3
"""Drill 3 (issue 23): cold-cache stampede. 16 processes start at once on one manifest and
an empty cache root.

Promise: one entry per key, no failures, every process served the reference kernels; the
per-key lock keeps the total compile work close to one process's (the lock only saves
work: a duplicate compile is allowed, never a second entry).

  --fast   1 round (CI)         default: 5 rounds (docs/reliability.md)
"""
import argparse
import os
import resource
import subprocess
import time

import common as c


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--procs", type=int, default=16)
    a = ap.parse_args()
    rounds = a.rounds or (1 if a.fast else 5)
    started = time.monotonic()
    work = c.workdir("stampede")
    configs = c.tma_configs()
    manifest = c.write_manifest(os.path.join(work, "m.json"), configs)
    # One process alone on an empty cache: the baseline (and the reference kernels).
    cpu0 = children_cpu()
    ref = c.Reference(work, manifest, jobs=1)
    one_cpu = children_cpu() - cpu0
    base = c.precompile(os.path.join(work, "base"), manifest, jobs=1).json()
    one_wall = base["wall_ms"] / 1000

    totals = {"compiles": 0, "failures": 0, "wrong": 0, "entries_bad": 0, "left": 0}
    cpu, walls, dup_max = 0.0, [], 0
    for rnd in range(rounds):
        root = os.path.join(work, f"cache{rnd}")
        cpu0, t0 = children_cpu(), time.monotonic()
        procs = [subprocess.Popen([c.ATTNJIT, "precompile", "--manifest", manifest, "--jobs", "1",
                                   "--json", "--cache-dir", root], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, errors="replace",
                                  env=c.base_env())
                 for _ in range(a.procs)]
        outs = [(p, *p.communicate()) for p in procs]
        walls.append(time.monotonic() - t0)
        cpu += children_cpu() - cpu0
        compiled = 0
        for p, out, err in outs:
            r = c.Result(p.returncode, out, err, 0)
            n, wrong, failed = c.served(r.json(), ref)
            totals["failures"] += (r.rc != 0) + len(failed)
            totals["wrong"] += len(wrong)
            compiled += sum(v["status"] == "compiled" for v in (r.json() or {}).get("variants", []))
        totals["compiles"] += compiled
        dup_max = max(dup_max, compiled - len(configs))
        ls = c.run(["cache", "ls", "--json", "--cache-dir", root]).json() or []
        keys = sorted(e["key"] for e in ls)
        _, vj = c.verify(root)
        if keys != sorted(ref.sha) or vj.get("corrupt") != 0:
            totals["entries_bad"] += 1
        totals["left"] += len(c.tmp_dirs(root))

    n = len(configs)
    ok = totals["failures"] == 0 and totals["wrong"] == 0 and totals["entries_bad"] == 0 \
        and totals["left"] == 0
    rows = [
        ("rounds x processes x variants", f"{rounds} x {a.procs} x {n}"),
        ("failures", totals["failures"]),
        ("wrong kernels served", totals["wrong"]),
        ("rounds with != one entry per key", totals["entries_bad"]),
        ("tmp/ dirs left", totals["left"]),
        ("compiles per round (one process: n)", f"{totals['compiles'] / rounds:.1f} (n = {n}; worst round +{dup_max})"),
        ("CPU per round vs one process", f"{cpu / rounds:.1f} s vs {one_cpu:.1f} s ({cpu / rounds / max(one_cpu, 1e-9):.1f}x)"),
        ("wall per round vs one process", f"{sum(walls) / rounds:.1f} s vs {one_wall:.1f} s"),
    ]
    rc = c.report("3 cold-cache stampede", rows, ok, started)
    if ok:
        c.shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
