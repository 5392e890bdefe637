#!/usr/bin/env bash
# Whether two attnjit binaries compile the same machine code: each precompiles the default
# set (sm_90a) into its own cache, then cuobjdump's SASS of every variant is compared with
# the mangled names masked (they carry the Params type's name). Needs cuobjdump (the GPU
# machine has it). A change meant to leave the kernels alone should print "different: 0".
#   tools/gpu_sass_diff.sh BASE_BIN NEW_BIN
set -euo pipefail
base="$1" new="$2"
T=$(mktemp -d)
for which in base new; do
  bin="$base"; [ "$which" = new ] && bin="$new"
  "$bin" precompile --arch sm_90a --jobs "$(nproc)" --cache-dir "$T/$which" >/dev/null
  "$bin" cache ls --json --cache-dir "$T/$which" >"$T/$which.json"
done
CUOBJDUMP="${ATTNJIT_CUOBJDUMP:-$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)}"
python3 - "$T" "$CUOBJDUMP" <<'PY'
import glob, json, re, subprocess, sys
root, cuobjdump = sys.argv[1], sys.argv[2]

def cubins(which):
    out = {}
    for e in json.load(open(f"{root}/{which}.json")):
        found = glob.glob(f"{root}/{which}/**/{e['key']}*/*.cubin", recursive=True)
        out[(e["op"], json.dumps(e["config"], sort_keys=True))] = found[0] if found else None
    return out

def sass(path):
    text = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True, check=True).stdout
    return [re.sub(r"_Z\w+", "SYM", l) for l in text.splitlines()
            if l.strip() and "Function :" not in l and ".text." not in l and "code for" not in l]

a, b = cubins("base"), cubins("new")
same = different = unmatched = empty = lines = 0
for k in sorted(a):
    if not a[k] or not b.get(k):
        unmatched += 1
        continue
    sa, sb = sass(a[k]), sass(b[k])
    lines += len(sa)
    if not sa or not sb:
        empty += 1
    elif sa == sb:
        same += 1
    else:
        different += 1
        print("differs:", k)
print(f"{len(a)} variants: SASS identical (names masked) {same}, different {different}, "
      f"unmatched {unmatched}, empty listings {empty}; {lines} SASS lines compared")
sys.exit(1 if different or unmatched or empty else 0)
PY
