#!/usr/bin/env python3
"""Per size, the median new/base busbw ratio over ab.sh's rounds (each round one pair), and in
how many pairs "new" was ahead.   Usage: pairs.py AB_OUTPUT.txt"""
import re
import statistics
import sys

rounds = {}
for line in open(sys.argv[1], encoding="utf-8"):
    m = re.match(r"round (\d+) (\w+)", line)
    if m:
        rounds.setdefault(m.group(1), {})[m.group(2)] = {s: float(b) for s, b in re.findall(r"(\d+M):([\d.]+)", line)}
pairs = [r for r in rounds.values() if "new" in r and "base" in r]
for size in pairs[0]["base"]:
    ratios = [r["new"][size] / r["base"][size] for r in pairs]
    print(f"{size}: {len(ratios)} pairs, median new/base {statistics.median(ratios):.2f}, "
          f"new ahead in {sum(x > 1 for x in ratios)}")
