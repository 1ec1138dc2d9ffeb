#!/usr/bin/env python3
# A/B of kernel_bench binaries: rounds x binaries, each a JSON run; prints kernel/bound per run
import json, subprocess, sys, statistics, re
bins = sys.argv[1].split(',')
rounds = int(sys.argv[2]); filt = sys.argv[3]; reps = sys.argv[4] if len(sys.argv) > 4 else "5"
res = {b: {} for b in bins}
for r in range(rounds):
    for b in bins:
        out = subprocess.run([b, "--benchmark_filter=" + filt, "--benchmark_format=json",
                              "--benchmark_repetitions=" + reps, "--benchmark_report_aggregates_only=true",
                              "--benchmark_enable_random_interleaving=true", "--kernel_min_time=0.2"],
                             capture_output=True, text=True, check=True).stdout
        rates = {}
        for e in json.loads(out)["benchmarks"]:
            if e.get("aggregate_name") != "median": continue
            rates[re.sub(r"/min_time.*", "", e["run_name"])] = e["bytes_per_second"] / 1e9
        bounds = {k.split("/")[-1]: v for k, v in rates.items() if k.startswith("bound")}
        bound = list(bounds.values())[0]
        line = " ".join("%s %.2f(%.1f%%)" % ("/".join(k.split("/")[1:3] + k.split("/")[4:5]), v, 100 * v / bounds[k.split("/")[-1]])
                        for k, v in sorted(rates.items()) if not k.startswith("bound"))
        print("round %d %-28s bound %.2f  %s" % (r, b.split("/")[-1], bound, line), flush=True)
        for k, v in rates.items(): res[b].setdefault(k, []).append(v / bounds[k.split("/")[-1]])
for b in bins:
    print(b.split("/")[-1], " ".join("%s %.1f%%" % ("/".join(k.split("/")[1:3] + k.split("/")[4:5]), 100 * statistics.median(v))
                                     for k, v in sorted(res[b].items()) if not k.startswith("bound")))
