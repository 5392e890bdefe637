#!/usr/bin/env python3
"""Drill 5 (issue 23): hostile cache roots and symlinks planted inside one.

Promise (docs/cache.md, "Trust model"): a root owned by another user, or writable by group
or others, is refused with an error that names it and the fix; a read-only root serves hits
only; inside a root, an entry, a file of an entry, an arch folder, tmp/ or quarantine/
that is a symlink is never followed: nothing outside the root is read as a kernel (a
planted link to a good copy of the entry is not served) or written (the outside tree is
byte-for-byte unchanged after every command).

Needs root for the other-owner and other-user cases (skipped otherwise, and said so).
  --fast   each case once (CI)   default: each case 5 times, on different keys
"""
import argparse
import os
import random
import shutil
import subprocess
import time

import common as c

IS_ROOT = os.geteuid() == 0


def as_nobody():
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--seed", type=int, default=23)
    a = ap.parse_args()
    reps = 1 if a.fast else 5
    rng = random.Random(a.seed)
    started = time.monotonic()
    work = c.workdir("hostile")
    os.chmod(work, 0o755)  # the read-only case runs as nobody
    configs = c.tma_configs()
    manifest = c.write_manifest(os.path.join(work, "m.json"), configs)
    os.chmod(manifest, 0o644)
    ref = c.Reference(work, manifest)
    results = []  # (case, ok, note)

    def case(name, fn):
        for i in range(reps):
            root = os.path.join(work, f"{name}-{i}")
            outside = os.path.join(work, f"{name}-{i}-outside")
            ref.copy_to(root)
            os.makedirs(outside)
            key = rng.choice(sorted(ref.sha))
            shutil.copytree(c.entry_dir(root, key), os.path.join(outside, "copy"))
            open(os.path.join(outside, "precious"), "w").write("keep me")
            old = time.time() - 7200  # "stale", so a prune that followed a link would delete it
            os.utime(os.path.join(outside, "precious"), (old, old))
            snap = {"before": c.tree_digest(outside)}

            def mark():  # a case that plants files outside snapshots after planting them
                snap["before"] = c.tree_digest(outside)
            try:
                problems = fn(root, outside, key, mark) or []
            except Exception as e:  # a drill bug or a crash: report, keep going
                problems = [f"exception {e!r}"]
            if c.tree_digest(outside) != snap["before"]:
                problems.append("something outside the root changed")
            results.append((name, not problems, "; ".join(problems)))
            subprocess.run(["chown", "-R", "0:0", root], capture_output=True)

    def refused(root, *needles):
        problems = []
        for args in (["precompile", "--manifest", manifest, "--json"], ["cache", "verify"],
                     ["cache", "prune"], ["cache", "stats"]):
            r = c.run(args + ["--cache-dir", root])
            if r.rc != 1 or not all(n in r.err for n in needles) or r.crashed():
                problems.append(f"{args[0]} {args[1]}: rc {r.rc}: {r.err[-200:]}")
        return problems

    def not_served(root, key, why):
        """The planted key is a strict miss (never a hit through the link), the rest hit
        the reference; a normal run rebuilds it inside the root."""
        problems = []
        r, hits, wrong, missing = c.strict_load(root, ref)
        if [v["key"] for v in missing] != [key] or wrong or why not in r.err:
            problems.append(f"strict: missing {[v['key'][:8] for v in missing]} wrong {len(wrong)}: {r.err[-300:]}")
        rep = c.precompile(root, manifest)
        _, wrong, failed = c.served(rep.json(), ref)
        if rep.rc != 0 or wrong or failed or os.path.islink(c.entry_dir(root, key)):
            problems.append(f"rebuild: rc {rep.rc} {rep.err[-200:]}")
        _, vj = c.verify(root)
        if vj.get("corrupt") != 0:
            problems.append("verify after rebuild")
        return problems

    def other_owner(root, outside, key, mark):
        if not IS_ROOT:
            return None
        os.chown(root, 65534, 65534)
        return refused(root, root, "owned by nobody (uid 65534)", "not by the current user")

    def group_writable(root, outside, key, mark):
        os.chmod(root, 0o770)
        return refused(root, root, "writable by group", "chmod go-w")

    def world_writable(root, outside, key, mark):
        os.chmod(root, 0o777)
        return refused(root, root, "writable by group and others", "chmod go-w")

    def entry_symlink(root, outside, key, mark):
        d = c.entry_dir(root, key)
        shutil.rmtree(d)
        os.symlink(os.path.join(outside, "copy"), d)
        return not_served(root, key, "the entry is a symlink")

    def file_symlink(name):
        def fn(root, outside, key, mark):
            f = os.path.join(c.entry_dir(root, key), name)
            os.remove(f)
            os.symlink(os.path.join(outside, "copy", name), f)
            return not_served(root, key, f"{name} is a symlink")
        return fn

    def arch_symlink(root, outside, key, mark):
        arch = os.path.join(root, "sm_90a")
        shutil.move(arch, os.path.join(outside, "sm_90a"))
        os.symlink(os.path.join(outside, "sm_90a"), arch)
        mark()
        problems = []
        r, hits, wrong, missing = c.strict_load(root, ref)
        if hits or wrong:
            problems.append(f"served {hits} kernels through a symlinked arch folder")
        rep = c.precompile(root, manifest)
        _, wrong, failed = c.served(rep.json(), ref)
        if rep.rc != 1 or wrong or any("is a symlink" not in v["error"] for v in failed):
            problems.append(f"publish through the link: rc {rep.rc} {rep.err[-200:]}")
        return problems

    def tmp_and_quarantine_symlink(root, outside, key, mark):
        for sub in ("tmp", "quarantine"):
            shutil.rmtree(os.path.join(root, sub), ignore_errors=True)
            os.symlink(outside, os.path.join(root, sub))
        shutil.rmtree(c.entry_dir(root, key))  # a miss: would publish through tmp/
        other = rng.choice([k for k in ref.sha if k != key])
        with open(os.path.join(c.entry_dir(root, other), "kernel.cubin"), "r+b") as f:
            f.write(b"\0")  # a bad entry: would be quarantined through quarantine/
        problems = []
        rep = c.precompile(root, manifest)
        _, wrong, failed = c.served(rep.json(), ref)
        if wrong or rep.crashed() or not failed or any("is a symlink" not in v["error"] for v in failed):
            problems.append(f"precompile: rc {rep.rc} {rep.err[-300:]}")
        for args in (["cache", "prune", "--max-size", "0"], ["cache", "verify"], ["cache", "clear"]):
            r = c.run(args + ["--cache-dir", root])
            if r.crashed():
                problems.append(f"{args} crashed")
        return problems

    def read_only(root, outside, key, mark):
        problems = []
        env = c.base_env(ATTNJIT_CACHE_READ_ONLY=1)
        # Hits are served; building, pruning and clearing are refused.
        r, hits, wrong, missing = c.strict_load(root, ref, {"ATTNJIT_CACHE_READ_ONLY": 1})
        if hits != len(ref.sha) or wrong:
            problems.append(f"read-only hits: {hits} wrong {len(wrong)}")
        shutil.rmtree(c.entry_dir(root, key))
        before = c.tree_digest(root)
        for args in (["precompile", "--manifest", manifest], ["cache", "prune"], ["cache", "clear"]):
            r = c.run(args + ["--cache-dir", root], env=env)
            if r.rc != 1 or "read-only" not in r.err:
                problems.append(f"{args[0]} {args[1]} on a read-only root: rc {r.rc}")
        # Another user on a root-owned 0755 cache: detected as read-only by a write probe.
        if IS_ROOT:
            os.chmod(root, 0o755)
            for dirpath, dirnames, _ in os.walk(root):
                for d in dirnames:
                    os.chmod(os.path.join(dirpath, d), 0o755)
            r = c.run(["precompile", "--manifest", manifest, "--cache-dir", root], preexec=as_nobody)
            if r.rc != 1 or "read-only" not in r.err:
                problems.append(f"as nobody: rc {r.rc} {r.err[-200:]}")
            r = c.run(["precompile", "--manifest", manifest, "--json", "--cache-dir", root],
                      env=c.base_env(ATTNJIT_NO_COMPILE=1), preexec=as_nobody)
            n, wrong, missing = c.served(r.json(), ref)
            if n != len(ref.sha) - 1 or wrong or [v["key"] for v in missing] != [key]:
                problems.append(f"as nobody, hits {n} wrong {len(wrong)}")
        if c.tree_digest(root) != before:
            problems.append("a read-only root was written")
        return problems

    case("other owner", other_owner)
    case("group-writable root", group_writable)
    case("world-writable root", world_writable)
    case("entry dir -> symlink outside", entry_symlink)
    case("COMMITTED -> symlink", file_symlink("COMMITTED"))
    case("kernel.cubin -> symlink", file_symlink("kernel.cubin"))
    case("arch dir -> symlink outside", arch_symlink)
    case("tmp/, quarantine/ -> symlink outside", tmp_and_quarantine_symlink)
    case("read-only root", read_only)

    rows, ok = [], True
    for name in dict.fromkeys(n for n, _, _ in results):
        mine = [r for r in results if r[0] == name]
        bad = [r for r in mine if not r[1]]
        ok &= not bad
        note = "skipped (not root)" if name == "other owner" and not IS_ROOT else \
            f"{len(mine) - len(bad)}/{len(mine)} pass" + (f": {bad[0][2][:300]}" if bad else "")
        rows.append((name, note))
    rc = c.report("5 hostile paths", rows, ok, started)
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
