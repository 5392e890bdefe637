#!/usr/bin/env python3
"""Drill 1 (issue 23): kill -9 at random points of compile / publish / prune, from 4
concurrent processes sharing one cache root, while a checker keeps loading every kernel.

Promise: no process ever gets a partial or wrong entry; no lock stays held (flock dies
with its holder); the next process proceeds at once; a later run repairs or rebuilds.

  --fast   40 kills (CI)        default: 240 kills (the table in docs/reliability.md)
"""
import argparse
import fcntl
import json
import os
import random
import subprocess
import threading
import time

import common as c

# Where a kill lands. "compile": a precompile killed after a random delay (key setup,
# lookup, NVRTC, publish or the size cap's prune); "publish:<step>": the documented test
# hook SIGKILLs the publisher exactly after that step; "prune": `cache prune` killed
# after a random delay (it deletes entries by renaming them into tmp/ first).
KINDS = ["compile", "compile", "publish:cubin", "publish:marker", "publish:rename", "prune"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--kills", type=int)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--seed", type=int, default=23)
    a = ap.parse_args()
    kills_wanted = a.kills or (40 if a.fast else 240)
    rng = random.Random(a.seed)
    started = time.monotonic()
    work = c.workdir("kill")
    configs = c.tma_configs()
    manifest = c.write_manifest(os.path.join(work, "m.json"), configs)
    ref = c.Reference(work, manifest)
    root = os.path.join(work, "cache")
    ref.copy_to(root)

    lock = threading.Lock()
    stats = {"kills": 0, "by_kind": {}, "completed": 0, "served": 0, "wrong": [],
             "crashes": [], "checker_loads": 0, "checker_runs": 0}
    stop = threading.Event()

    def record_output(r, where):
        n, wrong, _ = c.served(r.json(), ref)
        with lock:
            stats["served"] += n
            stats["wrong"] += [(where, v["key"]) for v in wrong]
            if r.crashed():
                stats["crashes"].append((where, r.rc, r.err[-500:]))

    def worker(i):
        wrng = random.Random(a.seed * 100 + i)
        while not stop.is_set():
            kind = wrng.choice(KINDS)
            env = c.base_env()
            if kind == "prune":
                # Half the time below the whole cache: entries really go, so compiles follow.
                size = wrng.choice(["0", "40K", "80K", "10G"])
                args = ["cache", "prune", "--json", "--max-size", size, "--cache-dir", root]
                delay = wrng.uniform(0, 0.03)
            else:
                sub = wrng.sample(configs, wrng.randint(1, len(configs)))
                m = c.write_manifest(os.path.join(work, f"w{i}.json"), sub)
                args = ["precompile", "--manifest", m, "--jobs", str(wrng.choice([1, 2])),
                        "--json", "--cache-dir", root]
                if kind.startswith("publish:"):
                    env["ATTNJIT_CACHE_TEST_KILL_AT"] = kind.split(":")[1]
                delay = wrng.uniform(0, 0.5) if kind == "compile" else 5.0
            p = subprocess.Popen([c.ATTNJIT] + args, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, errors="replace", env=env)
            try:
                out, err = p.communicate(timeout=delay)
                killed = p.returncode == -9  # the publish hook killed itself
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                killed = True
            with lock:
                if killed:
                    stats["kills"] += 1
                    stats["by_kind"][kind] = stats["by_kind"].get(kind, 0) + 1
                    if stats["kills"] >= kills_wanted:
                        stop.set()
                else:
                    stats["completed"] += 1
            if not killed:
                record_output(c.Result(p.returncode, out, err, 0), f"worker {i} {kind}")

    def checker():
        # Loads every kernel (hits only) while the workers are killed around it.
        while not stop.is_set():
            r, hits, wrong, _ = c.strict_load(root, ref)
            with lock:
                stats["checker_runs"] += 1
                stats["checker_loads"] += hits
                stats["wrong"] += [("checker", v["key"]) for v in wrong]
                if r.crashed():
                    stats["crashes"].append(("checker", r.rc, r.err[-500:]))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(a.procs)]
    threads.append(threading.Thread(target=checker))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kill_phase = time.monotonic() - started

    # After the storm. Locks: every tmp/*.lock must be free now (flock dies with its holder).
    tmp = os.path.join(root, "tmp")
    locks = [n for n in os.listdir(tmp) if n.endswith(".lock")] if os.path.isdir(tmp) else []
    stuck = 0
    for n in locks:
        with open(os.path.join(tmp, n)) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                stuck += 1
    leftovers = len(c.tmp_dirs(root))
    # Every entry on disk verified (a partial one would be counted and quarantined).
    vr, vj = c.verify(root)
    # The next process: rebuild whatever the kills and prunes removed. Its lock wait is its
    # time per compiled variant minus NVRTC's time for it (compile_ms in the entry).
    rep = c.precompile(root, manifest, jobs=1)
    rj = rep.json() or {}
    compile_ms = {e["key"]: e["compile_ms"] for e in (c.run(["cache", "ls", "--json", "--cache-dir", root]).json() or [])}
    waits = [v["ms"] - compile_ms.get(v["key"], 0) for v in rj.get("variants", []) if v["status"] == "compiled"]
    n_rep, wrong_rep, failed_rep = c.served(rj, ref)
    # Then every kernel loads from the repaired cache, identical to the reference.
    sr, hits, wrong_after, missing = c.strict_load(root, ref)
    # What killed publishes left in tmp/ is deleted by prune once an hour old: age it.
    old = time.time() - 7200
    for n in c.tmp_dirs(root):
        os.utime(os.path.join(tmp, n), (old, old))
    c.run(["cache", "prune", "--cache-dir", root])
    left_after_prune = len(c.tmp_dirs(root))

    wrong = stats["wrong"] + [("repair", v["key"]) for v in wrong_rep + wrong_after]
    ok = (stats["kills"] >= kills_wanted and not wrong and not stats["crashes"] and stuck == 0
          and vj.get("corrupt", 1) == 0 and rep.rc == 0 and not failed_rep
          and hits == len(ref.sha) and not missing and left_after_prune == 0
          and (max(waits) if waits else 0) < 1000)
    rows = [
        ("kills", stats["kills"]),
        ("kills by kind", json.dumps(stats["by_kind"], sort_keys=True)),
        ("processes", f"{a.procs} killers + 1 checker"),
        ("runs completed between kills", stats["completed"]),
        ("kernels served to completed runs", stats["served"] + stats["checker_loads"]),
        ("wrong kernels served", len(wrong)),
        ("crashes (not our SIGKILL)", len(stats["crashes"])),
        ("lock files left / held", f"{len(locks)} / {stuck}"),
        ("entries verified after / corrupt", f"{vj.get('entries')} / {vj.get('corrupt')}"),
        ("next process: rebuilt, max lock wait", f"{len(waits)}, {max(waits) if waits else 0:.0f} ms"),
        ("all kernels load after repair", f"{hits}/{len(ref.sha)}"),
        ("tmp/ dirs left by kills (pruned)", f"{leftovers} ({leftovers - left_after_prune})"),
        ("kill phase", f"{kill_phase:.1f} s"),
    ]
    if stats["crashes"] or wrong:
        print("crashes:", stats["crashes"][:3], "wrong:", wrong[:5])
    if not ok:
        print("verify:", vr.out[-1500:], "repair:", rep.err[-1500:])
    rc = c.report("1 kill -9", rows, ok, started)
    if ok:
        c.shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
