#!/usr/bin/env python3
# Compares the ptxas figures (registers, spill bytes, static and dynamic shared memory) of
# every variant in two `attnjit cache ls --json` listings, e.g. the default set precompiled
# by the binaries from before and after a change:
#   attnjit precompile --arch sm_90a --cache-dir A; attnjit cache ls --json --cache-dir A > a.json
#   python3 tools/ptxas_diff.py a.json b.json
import json,sys
def load(p):
    out={}
    for e in json.load(open(p)):
        k=(e["op"], json.dumps(e["config"],sort_keys=True), e["arch"])
        out[k]=(e["registers"],e["spill_bytes"],e["static_smem_bytes"],e["dynamic_smem_bytes"])
    return out
a=load(sys.argv[1]); b=load(sys.argv[2])
diff=[k for k in a if a[k]!=b.get(k)]
print(f"{len(a)} vs {len(b)} variants, same configs: {a.keys()==b.keys()}, differing ptxas figures: {len(diff)}")
for k in diff: print(k,a[k],b.get(k))
print("max registers", max(v[0] for v in b.values()), "total spill bytes", sum(v[1] for v in b.values()))
