#!/usr/bin/env python3
"""Drill 4 (issue 23): a full disk and failing I/O under the cache root.

Faults: a small tmpfs as the root (when this process may mount: root), and an LD_PRELOAD
shim (fault_shim.c, built here with cc) that fails write / fsync / rename with ENOSPC or
EIO from the Nth call on, for paths under the root only.

Promise: a clear error naming the path and the errno; one warning per process; the cache
still verifies (no half entry published, nothing left in tmp/) and serves the reference
kernels; a later run completes it. With --gpu, `attnjit bench` also runs its op from an
in-memory compile with one warning (the runtime's path; needs a GPU).

  --fast   12 shim trials + 1 tmpfs (CI)     default: 54 shim trials + 3 tmpfs
"""
import argparse
import os
import random
import shutil
import subprocess
import time

import common as c

ERRNO_TEXT = {"ENOSPC": "No space left on device", "EIO": "Input/output error"}


def build_shim(work):
    so = os.path.join(work, "fault_shim.so")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_shim.c")
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O2", "-o", so, src, "-ldl"],
                   check=True)
    return so


def check_faulted_run(r, root, errno_name, ref):
    """What a run under a fault must show; returns a list of problems."""
    problems = []
    j = r.json() or {}
    _, wrong, failed = c.served(j, ref)
    if r.crashed():
        problems.append(f"crashed rc {r.rc}")
    if wrong:
        problems.append(f"{len(wrong)} wrong kernels")
    if failed:
        if r.rc != 1:
            problems.append(f"rc {r.rc} with failures")
        for v in failed:
            if root not in v["error"] or ERRNO_TEXT[errno_name] not in v["error"]:
                problems.append(f"unclear error: {v['error'][:200]}")
        warnings = [l for l in r.err.splitlines() if l.startswith("attnjit: warning:")]
        if len(warnings) != 1:
            problems.append(f"{len(warnings)} warnings, want 1")
    return problems, len(failed)


def check_after(root, ref, problems):
    """The cache after the fault, without it: valid, clean, serving, repairable."""
    _, vj = c.verify(root)
    if vj.get("corrupt") != 0:
        problems.append(f"verify: {vj.get('problems')}")
    if c.tmp_dirs(root):
        problems.append(f"tmp/ left: {c.tmp_dirs(root)}")
    _, hits, wrong, _ = c.strict_load(root, ref)
    if wrong:
        problems.append(f"{len(wrong)} wrong kernels after")
    rep = c.precompile(root, ref.manifest)
    _, wrong, failed = c.served(rep.json(), ref)
    if rep.rc != 0 or wrong or failed:
        problems.append(f"repair failed: rc {rep.rc}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fast", action="store_true")
    ap.add_argument("--gpu", action="store_true", help="also run `attnjit bench` under faults")
    ap.add_argument("--seed", type=int, default=23)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    started = time.monotonic()
    work = c.workdir("iofault")
    shim = build_shim(work)
    configs = c.tma_configs()
    manifest = c.write_manifest(os.path.join(work, "m.json"), configs)
    ref = c.Reference(work, manifest)

    cases = [(op, e, nth) for op in ("write", "fsync", "rename") for e in ("ENOSPC", "EIO")
             for nth in ((1, 3) if a.fast else (1, 2, 3, 4, 5, 6, 7, 8, 9))]
    trials, failures, refused = 0, [], 0
    for t, (op, errno_name, nth) in enumerate(cases):
        root = os.path.join(work, f"t{t}")
        ref.copy_to(root)
        for key in rng.sample(sorted(ref.sha), 3):  # three misses to publish
            shutil.rmtree(c.entry_dir(root, key))
        env = c.base_env(LD_PRELOAD=shim, FAULT_SHIM_OP=op, FAULT_SHIM_UNDER=root,
                         FAULT_SHIM_ERRNO=errno_name, FAULT_SHIM_NTH=nth)
        r = c.precompile(root, manifest, env=env)
        problems, n_failed = check_faulted_run(r, root, errno_name, ref)
        refused += n_failed
        check_after(root, ref, problems)
        trials += 1
        if problems:
            failures.append((op, errno_name, nth, problems))
        shutil.rmtree(root, ignore_errors=True)

    # A real full disk: tmpfs roots too small for the manifest.
    tmpfs_trials, tmpfs_note = 0, "not run (cannot mount here: not root?)"
    mnt = os.path.join(work, "tmpfs")
    os.makedirs(mnt)
    for size in (["96k"] if a.fast else ["48k", "96k", "160k"]):
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", mnt],
                          capture_output=True).returncode != 0:
            break
        try:
            root = os.path.join(mnt, "cache")
            r = c.precompile(root, manifest)
            problems, n_failed = check_faulted_run(r, root, "ENOSPC", ref)
            refused += n_failed
            if n_failed == 0:
                problems.append("the tmpfs did not fill up")
            # Free room the way a user would, then the same checks.
            subprocess.run(["mount", "-o", "remount,size=4m", mnt], check=True)
            check_after(root, ref, problems)
            tmpfs_trials += 1
            if problems:
                failures.append(("tmpfs", size, problems))
        finally:
            subprocess.run(["umount", mnt])
        tmpfs_note = f"{tmpfs_trials} (sizes {'96k' if a.fast else '48k, 96k, 160k'})"

    gpu_note = "not run (--gpu)"
    if a.gpu:
        root = os.path.join(work, "gpu")
        os.makedirs(root, mode=0o700)
        env = c.base_env(LD_PRELOAD=shim, FAULT_SHIM_OP="write", FAULT_SHIM_UNDER=root,
                         ATTNJIT_CACHE_DIR=root)
        r = c.run(["bench", "tma_copy", "--shape", "rows=4096,cols=4096,dtype=bf16", "--iters", "3"],
                  env=env)
        warnings = [l for l in r.err.splitlines() if l.startswith("attnjit: warning:")]
        gpu_note = f"bench rc {r.rc}, {len(warnings)} warning(s)"
        if r.rc != 0 or len(warnings) != 1:
            failures.append(("gpu", r.rc, r.err[-500:]))

    for f in failures[:6]:
        print("FAILURE", f)
    rows = [
        ("shim trials (write/fsync/rename x ENOSPC/EIO x Nth call)", trials),
        ("tmpfs full-disk trials", tmpfs_note),
        ("stores refused with a clear error", refused),
        ("failures", len(failures)),
        ("runtime op under faults (GPU)", gpu_note),
    ]
    rc = c.report("4 full disk and I/O faults", rows, not failures, started)
    if not failures:
        shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
