#!/usr/bin/env python3
"""Judges compute-sanitizer logs against tools/sanitizer_known.txt.

  tools/sanitizer_check.py LOG...      exit 0: every report is a known one (printed as such)

A racecheck report is known when every kernel it names is listed for racecheck; its
access counts are printed per kernel. Any other tool's error (ERROR SUMMARY above 0) fails:
memcheck, initcheck and synccheck have no known reports.
"""
import collections
import os
import re
import sys

ACCESS = re.compile(r"(?:between|and) (\w+) access at (?:void )?(.+?)\+0x[0-9a-f]+(?: \[(\d+) hazards\])?$", re.M)


def template_of(name):
    """'ns::kernel<...>(args)' -> 'ns::kernel'."""
    out, depth = [], 0
    for ch in name.strip():
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            if ch == "(":
                break
            out.append(ch)
    return "".join(out).strip()


def known_entries(path):
    known = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            tool, kernel, why = line.split(None, 2)
            known[(tool, kernel)] = why
    return known


def main():
    known = known_entries(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sanitizer_known.txt"))
    ok = True
    for path in sys.argv[1:]:
        name, text = os.path.basename(path), open(path, errors="replace").read()
        tool = "racecheck" if "RACECHECK SUMMARY" in text else "other"
        hazards = collections.Counter()
        for kind, kernel, count in ACCESS.findall(text):
            hazards[template_of(kernel)] += int(count or 0)
        for kernel, count in sorted(hazards.items()):
            why = known.get((tool, kernel))
            ok = ok and why is not None
            print(f"{name}: {'known' if why else 'UNKNOWN'}: {kernel}, {count} hazards{': ' + why if why else ''}")
        errors = sum(int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) error", text))
        if errors:
            ok = False
            print(f"{name}: {errors} errors (no known list for this tool)")
        if not re.search(r"(ERROR|RACECHECK) SUMMARY", text):
            ok = False
            print(f"{name}: no summary line: the run did not finish")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
