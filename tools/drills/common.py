"""Shared helpers for the cache drills (issue 23; docs/reliability.md).

The drills drive build/attnjit as a user would. "Loaded" on a machine without a GPU means
what a process gets from the cache before it would call cuLibraryLoadData: the bytes of a
verified entry. `attnjit precompile --json` reports the SHA-256 of the cubin each variant
was served (cubin_sha256), so a wrong kernel shows up as a hash that differs from a clean
reference cache built at the start of each drill. Stdlib only.
"""
import hashlib
import json
import re
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ATTNJIT = os.environ.get("ATTNJIT_BIN", os.path.join(REPO, "build", "attnjit"))


def base_env(**extra):
    env = dict(os.environ)
    # A drill controls these itself; the caller's settings must not leak in.
    for name in ("ATTNJIT_CACHE_DIR", "ATTNJIT_NO_COMPILE", "ATTNJIT_CACHE_READ_ONLY",
                 "ATTNJIT_CACHE", "ATTNJIT_CACHE_TEST_KILL_AT", "ATTNJIT_CACHE_MAX_SIZE",
                 "ATTNJIT_TUNING_DB", "LD_PRELOAD"):
        env.pop(name, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Result:
    def __init__(self, rc, out, err, wall):
        self.rc, self.out, self.err, self.wall = rc, out, err, wall

    def json(self):
        try:
            return json.loads(self.out)
        except ValueError:
            return None

    def crashed(self):
        # A signal other than the drill's own SIGKILL, or the shell's 128+N form.
        return self.rc < 0 or self.rc >= 128


def run(args, env=None, timeout=300, preexec=None):
    t = time.monotonic()
    p = subprocess.run([ATTNJIT] + list(args), capture_output=True, text=True, errors="replace",
                       env=env or base_env(), timeout=timeout, preexec_fn=preexec)
    return Result(p.returncode, p.stdout, p.stderr, time.monotonic() - t)


def tma_configs():
    """tma_copy's default set: cheap real kernels (~50 ms of NVRTC each)."""
    ops = json.loads(run(["list", "--json"]).out)
    return [o for o in ops if o["op"] == "tma_copy"][0]["default_set"]


def write_manifest(path, configs, op="tma_copy"):
    with open(path, "w") as f:
        json.dump([{"op": op, "config": c} for c in configs], f)
    return path


def precompile(root, manifest, jobs=1, env=None, extra=()):
    return run(["precompile", "--manifest", manifest, "--arch", "sm_90a", "--jobs", str(jobs),
                "--json", "--cache-dir", root] + list(extra), env=env)


class Reference:
    """A clean cache built from `manifest` in `workdir`/reference: key → cubin SHA-256."""

    def __init__(self, workdir, manifest, jobs=2):
        self.root = os.path.join(workdir, "reference")
        r = precompile(self.root, manifest, jobs=jobs)
        j = r.json()
        if r.rc != 0 or not j or j["failed"]:
            sys.exit(f"reference build failed (rc {r.rc}):\n{r.err[-2000:]}")
        self.sha = {v["key"]: v["cubin_sha256"] for v in j["variants"]}
        self.key_of = {json.dumps(v["config"], sort_keys=True): v["key"] for v in j["variants"]}
        self.manifest = manifest
        # NVRTC must be deterministic for "differs from the reference" to mean "wrong":
        # the bytes on disk are what the build returned.
        for key, sha in self.sha.items():
            with open(entry_dir(self.root, key) + "/kernel.cubin", "rb") as f:
                assert hashlib.sha256(f.read()).hexdigest() == sha, key

    def copy_to(self, root):
        shutil.copytree(self.root, root, symlinks=True)
        os.chmod(root, 0o700)
        return root


def entry_dir(root, key, arch="sm_90a"):
    return os.path.join(root, arch, key[:2], key)


def served(j, ref):
    """From a precompile --json: (served, wrong, failures). `wrong` lists variants whose
    served cubin differs from the reference's for the same key (a key the reference does
    not know is not judged here)."""
    n, wrong, failed = 0, [], []
    for v in (j or {}).get("variants", []):
        if v["status"] == "failed":
            # Strict mode's error names the key: "... (key 3f9c...)".
            m = re.search(r"\(key ([0-9a-f]{64})\)", v.get("error", ""))
            failed.append(dict(v, key=m.group(1) if m else None))
            continue
        n += 1
        want = ref.sha.get(v["key"])
        if want is not None and v["cubin_sha256"] != want:
            wrong.append(v)
    return n, wrong, failed


def strict_load(root, ref, env_extra=None):
    """Every kernel of the reference manifest, hits only (ATTNJIT_NO_COMPILE=1).
    Returns (result, hits, wrong, misses)."""
    # On a GPU machine, ATTNJIT_DRILL_LOAD=1 also hands every hit to the driver
    # (cuLibraryLoadData via `precompile --load`): "loaded" then means loaded for real.
    load = ["--load"] if os.environ.get("ATTNJIT_DRILL_LOAD") == "1" else []
    r = precompile(root, ref.manifest, env=base_env(ATTNJIT_NO_COMPILE=1, **(env_extra or {})),
                   extra=load)
    j = r.json()
    if load and j and j.get("loaded", 0) != sum(v["status"] == "cache_hit" for v in j["variants"]):
        raise RuntimeError(f"--load loaded {j.get('loaded')} of the hits in {root}")
    for v in (j or {}).get("variants", []) if load else []:
        if v["status"] == "failed" and "ATTNJIT_NO_COMPILE" not in v["error"]:
            raise RuntimeError(f"the driver refused a cached kernel: {v['error']}")
    hits, wrong, missing = served(r.json(), ref)
    return r, hits, wrong, missing


def verify(root, env=None):
    r = run(["cache", "verify", "--json", "--cache-dir", root], env=env)
    return r, r.json() or {}


def tmp_dirs(root):
    t = os.path.join(root, "tmp")
    if not os.path.isdir(t):
        return []
    return [n for n in os.listdir(t) if not n.endswith(".lock")]


def tree_digest(path):
    """Names, types and content hashes under `path` (no link is followed): to prove a
    drill wrote nothing there."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for n in sorted(dirnames + filenames):
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, path)
            if os.path.islink(p):
                out[rel] = "link:" + os.readlink(p)
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    out[rel] = hashlib.sha256(f.read()).hexdigest()
            else:
                out[rel] = "dir"
    return out


def workdir(name):
    return tempfile.mkdtemp(prefix=f"attnjit-drill-{name}-")


def report(drill, rows, ok, started):
    """Prints the drill's table and one JSON line (for docs/reliability.md)."""
    width = max(len(k) for k, _ in rows)
    print(f"== {drill}")
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    print(f"  {'result':<{width}}  {'PASS' if ok else 'FAIL'} ({time.monotonic() - started:.1f} s)")
    print("JSON " + json.dumps({"drill": drill, "ok": ok, "seconds": round(time.monotonic() - started, 1),
                                **{k: v for k, v in rows}}))
    sys.stdout.flush()
    return 0 if ok else 1
