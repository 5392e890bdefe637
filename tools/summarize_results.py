#!/usr/bin/env python3
"""Summarize a gpu_run.sh output directory into results.json and a short table.

Counts passed/failed/skipped test cases from the Catch2 JUnit files (a case whose
output says SKIPPED counts as skipped, and any skip fails the run), and collects the
benchmark JSON lines.

    summarize_results.py OUT [--build-failed]
    summarize_results.py MERGED PART_OUT...   (a run made in parts, gpu_run.sh's header)

With parts, MERGED gets their union: the tests from the parts that ran them, every part's
benchmark lines; the parts must come from one build (their version.txt agree)."""
import json
import os
import shutil
import sys
import xml.etree.ElementTree as ET


def junit_counts(path):
    counts = {"passed": 0, "failed": 0, "skipped": 0, "failures": []}
    if not os.path.exists(path):
        counts["failed"] += 1
        counts["failures"].append(f"{os.path.basename(path)} missing (the test binary crashed?)")
        return counts
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        counts["failed"] += 1
        counts["failures"].append(f"{os.path.basename(path)} unreadable: {e}")
        return counts
    for case in root.iter("testcase"):
        name = f"{case.get('classname')}/{case.get('name')}"
        bad = case.findall("failure") + case.findall("error")
        text = " ".join((c.text or "") for c in case.iter() if c.tag in ("system-out", "system-err"))
        if bad:
            counts["failed"] += 1
            msg = (bad[0].get("message") or "") + " " + (bad[0].text or "")
            counts["failures"].append(f"{name}: {msg.strip()[:400]}")
        elif case.findall("skipped") or "SKIPPED" in text:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def mha_key(sh):
    """One mha_fwd row's name, the same for attnjit and the torch peer."""
    hkv = f"/{sh['h_kv']}" if sh.get("h_kv", sh["h"]) != sh["h"] else ""
    dv = f"/{sh['dv']}" if sh.get("dv", sh["d"]) != sh["d"] else ""
    return (f"b{sh['b']} s{sh['s_q']}x{sh['s_k']} h{sh['h']}{hkv} d{sh['d']}{dv}"
            f"{' causal' if sh.get('causal') and sh['s_q'] > 1 else ''}")


def mha_ratios(benchmarks):
    """cuDNN time / attnjit time per mha_fwd row measured by both (> 1: attnjit faster)."""
    ours = {mha_key(b["shape"]): b for b in benchmarks if b.get("op") == "mha_fwd" and "median_us" in b}
    rows = []
    for b in benchmarks:
        if b.get("op") == "mha_fwd_torch" and b.get("impl") == "cudnn" and "us" in b:
            key = mha_key(b["shape"])
            if key in ours:
                rows.append({"row": key, "attnjit_us": ours[key]["median_us"], "cudnn_us": b["us"],
                             "ratio": b["us"] / ours[key]["median_us"]})
    return rows


def merge_parts(out, parts):
    """Copies the parts' results into `out`: each test kind's JUnit file from the one part
    that has it, the benchmark lines of all, gpu.txt and version.txt from the first part.
    Returns "" or what makes the parts unmergeable."""
    os.makedirs(out, exist_ok=True)
    versions = {open(os.path.join(p, "version.txt")).read().strip()
                for p in parts if os.path.exists(os.path.join(p, "version.txt"))}
    if len(versions) > 1:
        return f"parts come from different builds: {sorted(versions)}"
    for name in ("gpu.txt", "version.txt"):
        for p in parts:
            if os.path.exists(os.path.join(p, name)):
                shutil.copy(os.path.join(p, name), os.path.join(out, name))
                break
    for kind in ("cpu", "gpu"):
        have = [p for p in parts if os.path.exists(os.path.join(p, f"tests-{kind}.xml"))]
        if len(have) > 1:
            return f"tests-{kind}.xml is in more than one part: {have}"
        if have:
            shutil.copy(os.path.join(have[0], f"tests-{kind}.xml"), os.path.join(out, f"tests-{kind}.xml"))
    for p in parts:  # a part that ran the sanitizers (a failed one wins)
        path = os.path.join(p, "sanitize-status.txt")
        if os.path.exists(path) and (not os.path.exists(os.path.join(out, "sanitize-status.txt"))
                                     or open(path).read().strip() != "0"):
            shutil.copy(path, os.path.join(out, "sanitize-status.txt"))
    with open(os.path.join(out, "bench.jsonl"), "w") as merged:
        for p in parts:
            path = os.path.join(p, "bench.jsonl")
            if os.path.exists(path):
                merged.write(open(path).read())
    return ""


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out = args[0]
    build_failed = "--build-failed" in sys.argv
    if len(args) > 1:
        why = merge_parts(out, args[1:])
        if why:
            print("RESULT: FAIL:", why)
            return 1
    gpu = open(os.path.join(out, "gpu.txt")).read().strip() if os.path.exists(os.path.join(out, "gpu.txt")) else "?"
    version_path = os.path.join(out, "version.txt")  # `attnjit --version`: commit and templates digest
    version = open(version_path).read().strip() if os.path.exists(version_path) else "?"
    results = {"gpu": gpu, "commit": os.environ.get("ATTNJIT_COMMIT", "unknown"), "version": version,
               "build_failed": build_failed, "tests": {}, "benchmarks": []}
    ok = not build_failed
    if not build_failed:
        for kind in ("cpu", "gpu"):
            c = junit_counts(os.path.join(out, f"tests-{kind}.xml"))
            results["tests"][kind] = c
            ok = ok and c["failed"] == 0 and c["skipped"] == 0
        sanitize = os.path.join(out, "sanitize-status.txt")
        if os.path.exists(sanitize):
            results["sanitizers_ok"] = open(sanitize).read().strip() == "0"
            ok = ok and results["sanitizers_ok"]
        bench = os.path.join(out, "bench.jsonl")
        if os.path.exists(bench):
            for line in open(bench):
                line = line.strip()
                if line:
                    results["benchmarks"].append(json.loads(line))
    results["ok"] = ok
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)

    print(f"GPU: {gpu.splitlines()[-1] if gpu else '?'}  commit {results['commit']}  ({version})")
    for kind, c in results["tests"].items():
        print(f"{kind} tests: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped")
        for f in c["failures"]:
            print("  FAILED", f)
    if "sanitizers_ok" in results:
        print("sanitizers:", "clean (or known reports only)" if results["sanitizers_ok"] else "FAILED")
    for b in results["benchmarks"]:
        if b.get("op") == "tma_copy" and "median_us" not in b:
            print(f"tma_copy {json.dumps(b.get('shape'))}: {b.get('error', 'no timing')}")
        elif b.get("op") == "tma_copy":
            print(f"tma_copy {b['shape']['rows']}x{b['shape']['cols']} {b['shape']['dtype']} "
                  f"{json.dumps(b['config'], separators=(',', ':'))}: {b['median_us']:.1f} us "
                  f"{b['gbps']:.0f} GB/s, copy {b['copy_gbps']:.0f} GB/s, ratio "
                  f"{b['ratio_to_copy']:.3f}, exact {b['check']['bit_exact']}")
        elif b.get("op") == "dispatch":
            print(f"dispatch: raw {b['raw_launch_us']:.3f} us, op {b['op_call_us']:.3f} us, "
                  f"overhead {b['overhead_us']:.3f} us")
        elif b.get("op") == "mla_decode":
            sh = b["shape"]
            cfg = b.get("config", {})
            name = (f"b{sh['b']} q{sh['q_len']} h{sh['h']} s_k{sh['s_k']}"
                    f"{' varlen' if sh.get('varlen') else ''} {cfg.get('schedule', '')} n{cfg.get('block_n')}x{cfg.get('stages')}")
            if "median_us" in b:
                print(f"mla_decode {name:<34} splits {b['num_splits']:>3}: {b['median_us']:8.1f} us "
                      f"{b['gbps']:7.0f} GB/s ({100 * b['ratio_to_copy']:4.0f}% of copy) "
                      f"{b['tflops']:6.1f} TFLOP/s  rel_l2 {b['check']['rel_l2']:.1e}")
            else:
                print(f"mla_decode {name}: {b.get('error', 'no timing')}")
        elif b.get("op") == "mla_decode_torch":
            sh = b.get("shape", {})
            if "median_us" in b:
                print(f"torch[{b.get('impl')}] {json.dumps(sh, separators=(',', ':'))}: "
                      f"{b['median_us']:8.1f} us {b['gbps']:7.0f} GB/s {b['tflops']:6.1f} TFLOP/s")
            else:
                print(f"torch[{b.get('impl')}] {json.dumps(sh, separators=(',', ':'))}: {b.get('error')}")
        elif b.get("op") == "mha_fwd":
            sh = b["shape"]
            if "median_us" in b:
                print(f"mha_fwd {mha_key(sh):<40} n{b['config']['block_n']} splits {b['num_splits']:>2}: "
                      f"{b['median_us']:9.1f} us {b['tflops']:6.1f} TFLOP/s  rel_l2 {b['check']['rel_l2']:.1e}")
            else:
                print(f"mha_fwd {mha_key(sh)}: {b.get('error', 'no timing')}")
        elif b.get("op") == "mha_fwd_torch":
            sh = b.get("shape", {})
            if "us" in b:
                print(f"torch[{b.get('impl')}] {mha_key(sh):<40} {b['us']:9.1f} us {b['tflops']:6.1f} TFLOP/s")
            else:
                print(f"torch[{b.get('impl')}] {json.dumps(sh, separators=(',', ':'))}: {b.get('error')}")
        elif b.get("op") == "merge_states":
            sh = b["shape"]
            name = f"{sh['tokens']}x{sh['heads']}x{sh['head_dim']} {sh['dtype']}{' log2' if sh.get('lse_log2') else ''}"
            if "median_us" in b:
                print(f"merge_states {name:<24}: {b['median_us']:8.1f} us {b['gbps']:6.0f} GB/s "
                      f"({100 * b['ratio_to_copy']:4.0f}% of copy)  rel_l2 {b['check']['rel_l2']:.1e}")
            else:
                print(f"merge_states {name}: {b.get('error', 'no timing')}")
        elif b.get("op") == "merge_states_torch":
            print(f"torch[{b['impl']}] merge {b['tokens']}x{b['heads']}x{b['head_dim']} {b['dtype']}: "
                  f"{b['median_us']:8.1f} us {b['gbps']:6.0f} GB/s")
        elif b.get("op") == "cache_load":
            keys = {k: v for k, v in b.items() if k.endswith("_ms") or "ms" in k}
            print("cache_load:", json.dumps(keys, separators=(",", ":"))[:600])
        elif b.get("op") == "ceiling":
            val = f"{b['gbps']:.0f} GB/s" if "gbps" in b else f"{b['tflops']:.0f} TFLOP/s"
            print(f"ceiling {b['kind']}: {val}")
        else:
            print(json.dumps(b))
    ratios = mha_ratios(results["benchmarks"])
    if ratios:
        results["mha_fwd_vs_cudnn"] = ratios
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump(results, f, indent=2)
        print("mha_fwd vs SDPA cuDNN (same run; issue bar 0.85):")
        for r in ratios:
            print(f"  {r['row']:<40} attnjit {r['attnjit_us']:9.1f} us  cudnn {r['cudnn_us']:9.1f} us"
                  f"  ratio {r['ratio']:.2f}{'' if r['ratio'] >= 0.85 else '  < 0.85'}")
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
