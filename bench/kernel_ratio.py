#!/usr/bin/env python3
"""How close the host reduction kernels come to the a+b->c streaming bound.

Runs kernel_bench (bench/kernel_bench.cc) for the float32 and bfloat16 sums of every ISA this
CPU supports and for the bound (a plain float a+b->c loop), all at one size out of cache
(64 MiB per array by default), and prints GB/s and kernel / bound per ISA. The target is
>= 90% for the vector ISAs at 64 MiB. Each figure is the median of --repetitions runs,
interleaved at random so that a slow stretch of a shared machine hits all of them alike.

    bench/kernel_ratio.py [--bench build/bin/kernel_bench] [--size 67108864] [--repetitions 5]
                          [--min-time 0.2] [--strict]

--strict exits 1 when a vector ISA misses the target. Python 3 standard library only.
"""
import argparse
import json
import os
import re
import subprocess
import sys

from compare_table import human_size

TYPES = ("float", "bfloat16")  # kernel_bench's names for float32 and bfloat16
SIZES = (16 << 10, 256 << 10, 64 << 20)  # bytes per array: kernel_bench.cc's kSizes, all it registers
TARGET = 0.90


def default_bench():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for build in ("build", "build-kernels"):
        path = os.path.join(root, build, "bin", "kernel_bench")
        if os.path.exists(path):
            return path
    return os.path.join(root, "build", "bin", "kernel_bench")


def run_bench(args):
    pattern = r"^(bound/float_add|reduce/[^/]+/(%s)/sum)/%d(/|$)" % ("|".join(TYPES), args.size)
    command = [
        args.bench,
        "--benchmark_filter=" + pattern,
        "--benchmark_format=json",
        "--benchmark_repetitions=%d" % args.repetitions,
        "--benchmark_report_aggregates_only=true",
        "--benchmark_enable_random_interleaving=true",
        "--kernel_min_time=%g" % args.min_time,
    ]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        sys.exit("kernel_ratio: %s failed (%d):\n%s"
                 % (args.bench, result.returncode, result.stderr))
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError as e:
        sys.exit("kernel_ratio: %s printed no JSON report (%s); is --size one it registers?"
                 % (args.bench, e))


def medians(report):
    """{name without size and min_time: median bytes/s}"""
    rates = {}
    for entry in report.get("benchmarks", []):
        if entry.get("run_type") == "aggregate" and entry.get("aggregate_name") != "median":
            continue
        name = re.sub(r"/min_time:[^/]*$", "", entry["run_name"])
        name = re.sub(r"/\d+$", "", name)
        rates[name] = entry["bytes_per_second"]
    return rates


def positive(kind):
    """An argparse type: a finite number of `kind` (int or float) above 0."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("'%s' is not %s" % (text, "a whole number" if kind is int else "a number"))
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError("%s is not a finite number above 0" % text)
        return value
    return parse


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", default=default_bench(), help="kernel_bench binary")
    parser.add_argument("--size", type=int, choices=SIZES, default=64 << 20,
                        help="bytes per array, one kernel_bench registers (default: %(default)s)")
    parser.add_argument("--repetitions", type=positive(int), default=5, help="runs per figure (default: 5)")
    parser.add_argument("--min-time", type=positive(float), default=0.2, help="seconds per repetition")
    parser.add_argument("--strict", action="store_true", help="exit 1 below the target")
    args = parser.parse_args()
    if not os.path.exists(args.bench):
        sys.exit("kernel_ratio: no %s (build the kernel_bench target, or pass --bench)"
                 % args.bench)

    report = run_bench(args)
    rates = medians(report)
    bound = rates.get("bound/float_add")
    if not bound:
        sys.exit("kernel_ratio: the bound did not run")
    order = ["scalar", "avx2", "avx512", "avx512bf16"]  # kernels/cpu/isa.h's kCpuIsas
    isas = []
    for name in rates:
        parts = name.split("/")
        if parts[0] == "reduce" and parts[1] not in isas:
            isas.append(parts[1])
    isas.sort(key=lambda isa: (order.index(isa) if isa in order else len(order), isa))

    context = report.get("context", {})
    print("kernel_bench on %s CPUs at %s MHz, active ISA %s; %s per array, median of %d"
          % (context.get("num_cpus", "?"), context.get("mhz_per_cpu", "?"),
             context.get("weft_active_isa", "?"), human_size(args.size), args.repetitions))
    print("%-24s %8.2f GB/s" % ("bound (float a+b->c)", bound / 1e9))
    missed = False
    for isa in isas:
        for dtype in TYPES:
            rate = rates.get("reduce/%s/%s/sum" % (isa, dtype))
            if rate is None:
                continue
            ratio = rate / bound
            verdict = ""
            if isa != "scalar":
                verdict = "ok" if ratio >= TARGET else "below the %d%% target" % (TARGET * 100)
                missed = missed or ratio < TARGET
            print("%-24s %8.2f GB/s  %6.1f%% of bound  %s"
                  % ("%s %s sum" % (isa, dtype), rate / 1e9, 100 * ratio, verdict))
    return 1 if (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
