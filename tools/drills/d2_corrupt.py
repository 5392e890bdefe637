#!/usr/bin/env python3
"""Drill 2 (issue 23): random bit flips and truncations of every file kind the cache and
its users read: kernel.cubin, meta.json, COMMITTED, the tuning database, a manifest.

Promise: each damaged entry file is detected, quarantined (or reported by `cache verify`)
and rebuilt, never served; a damaged tuning database or manifest is rejected with an error
naming the file, or (when the damage leaves a valid file) used as what it now says, since
neither holds code; nothing ever crashes.

  --fast   25 trials (CI)       default: 250 trials (docs/reliability.md)
"""
import argparse
import json
import os
import random
import shutil
import time

import common as c

KINDS = ["kernel.cubin", "meta.json", "COMMITTED", "tuning.json", "manifest"]


def mutate(path, rng):
    data = bytearray(open(path, "rb").read())
    if rng.random() < 0.5 and data:
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
        how = f"bit flip at {i}"
    else:
        n = rng.randrange(len(data)) if data else 0
        data = data[:n]
        how = f"truncated to {n}"
    open(path, "wb").write(bytes(data))
    return how


def load_all(root, strict):
    """tma_copy's default set plus the tuning database's winner, as a deployment builds it;
    strict: hits only."""
    env = c.base_env(ATTNJIT_NO_COMPILE=1) if strict else None
    return c.run(["precompile", "--op", "tma_copy", "--jobs", "1", "--json", "--cache-dir", root],
                 env=env)


def tuning_db(config):
    """A database with one tma_copy winner for sm_90a (written by hand: no GPU here)."""
    fp = {"gpu": "NVIDIA H100 80GB HBM3", "sm_count": 132, "arch": "sm_90a", "driver": 13000,
          "nvrtc": "13.0", "attnjit": "0.1.0"}
    entry = {"op": "tma_copy", "bucket": "bf16 rows=2^14 cols=2^13",
             "shape": {"rows": 16384, "cols": 8192, "dtype": "bf16"}, "best": config,
             "best_us": 101.5, "default": config, "default_us": 104.2, "iters": 30,
             "updated": 1735000000, "timings": [{"candidate": config, "status": "ok", "us": 101.5}]}
    return {"attnjit_tuning_db": 1, "environments": [{"fingerprint": fp, "entries": [entry]}]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--trials", type=int)
    ap.add_argument("--seed", type=int, default=23)
    a = ap.parse_args()
    trials = a.trials or (25 if a.fast else 250)
    rng = random.Random(a.seed)
    started = time.monotonic()
    work = c.workdir("corrupt")
    configs = c.tma_configs()
    manifest = c.write_manifest(os.path.join(work, "m.json"), configs)
    ref = c.Reference(work, manifest)
    tuned = dict(configs[0], stages=configs[0]["stages"] + 1)  # not in the default set
    db_text = json.dumps(tuning_db(tuned), indent=1)
    # The reference also holds the tuned variant, so only damage causes a compile.
    open(os.path.join(ref.root, "tuning.json"), "w").write(db_text)
    r = c.run(["precompile", "--op", "tma_copy", "--json", "--cache-dir", ref.root])
    assert r.rc == 0 and r.json()["tuned"] == 1, r.err
    for v in r.json()["variants"]:
        ref.sha[v["key"]] = v["cubin_sha256"]

    tally = {k: {"trials": 0, "detected": 0, "rebuilt": 0, "accepted_valid": 0} for k in KINDS}
    failures, crashes = [], []
    for t in range(trials):
        kind = KINDS[t % len(KINDS)]
        tally[kind]["trials"] += 1
        root = os.path.join(work, f"t{t}")
        ref.copy_to(root)
        fail = lambda why: failures.append((t, kind, how, why))  # noqa: E731
        if kind in ("kernel.cubin", "meta.json", "COMMITTED"):
            key = rng.choice(sorted(ref.sha))
            how = mutate(os.path.join(c.entry_dir(root, key), kind), rng)
            # Found either by the next load or by `cache verify`; either way never served.
            if rng.random() < 0.5:
                res = load_all(root, strict=True)
                _, wrong, missing = c.served(res.json(), ref)
                found = [v["key"] for v in missing] == [key] and not wrong and \
                    f"cache entry {c.entry_dir(root, key)} is bad" in res.err
            else:
                res, vj = c.verify(root)
                found = res.rc == 1 and vj.get("corrupt") == 1 and \
                    c.entry_dir(root, key) in json.dumps(vj.get("problems"))
            crashed = res.crashed()
            quarantined = len(os.listdir(os.path.join(root, "quarantine"))) == 1
            if found and quarantined:
                tally[kind]["detected"] += 1
            else:
                fail(f"not detected/quarantined: rc {res.rc} {res.err[-300:]}")
            # Rebuild: a normal run compiles exactly that key again; then all load.
            rb = load_all(root, strict=False)
            _, wrong_rb, failed_rb = c.served(rb.json(), ref)
            compiled = [v["key"] for v in (rb.json() or {}).get("variants", []) if v["status"] == "compiled"]
            again = load_all(root, strict=True)
            n2, wrong2, missing2 = c.served(again.json(), ref)
            crashed |= rb.crashed() or again.crashed()
            if rb.rc == 0 and compiled == [key] and not wrong_rb + wrong2 + failed_rb + missing2 \
                    and n2 == len(ref.sha):
                tally[kind]["rebuilt"] += 1
            else:
                fail(f"not rebuilt: compiled {compiled} rc {rb.rc} {rb.err[-300:]}")
        elif kind == "tuning.json":
            how = mutate(os.path.join(root, "tuning.json"), rng)
            res = load_all(root, strict=False)
            j = res.json() or {}
            n, wrong, failed = c.served(j, ref)
            crashed = res.crashed()
            db_path = os.path.join(root, "tuning.json")
            if res.rc == 0 and not wrong and not failed and j.get("tuned") == 0 and \
                    f"tuning database {db_path}" in res.err:
                tally[kind]["detected"] += 1  # warned, naming the file, and ignored
            elif res.rc == 0 and not wrong and not failed:
                tally[kind]["accepted_valid"] += 1  # still a valid database (no checksum)
            else:
                fail(f"rc {res.rc}: {res.err[-300:]}")
        else:  # manifest
            m = os.path.join(work, f"m{t}.json")
            shutil.copy(manifest, m)
            how = mutate(m, rng)
            res = c.precompile(root, m)
            n, wrong, failed = c.served(res.json(), ref)
            crashed = res.crashed()
            if res.rc == 2 and (f"manifest {m}" in res.err or f"--manifest: cannot read {m}" in res.err):
                tally[kind]["detected"] += 1  # usage error naming the file (and the item)
            elif res.rc == 0 and not wrong and not failed:
                tally[kind]["accepted_valid"] += 1  # a valid manifest: built what it says
            else:
                fail(f"rc {res.rc}: {res.err[-300:]}")
        if crashed:
            crashes.append((t, kind, how))
        shutil.rmtree(root, ignore_errors=True)

    ok = not failures and not crashes
    rows = [("trials", trials)]
    for k in KINDS:
        s = tally[k]
        rows.append((k, f"{s['trials']} trials: {s['detected']} detected"
                        + (f", {s['rebuilt']} rebuilt" if k in KINDS[:3] else "")
                        + (f", {s['accepted_valid']} still valid (used as written)" if k in KINDS[3:] else "")))
    rows += [("failures", len(failures)), ("crashes", len(crashes))]
    for f in failures[:5]:
        print("FAILURE", f)
    rc = c.report("2 corruption", rows, ok, started)
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
