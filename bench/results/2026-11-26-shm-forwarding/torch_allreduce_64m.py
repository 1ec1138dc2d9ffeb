# dist.all_reduce of a 64 MiB float32 tensor (16.8M elements), 2 warm-up and 10 timed calls;
# prints the slowest rank's median ms. Run under weftrun -n 2 with --backend weft|gloo.
import sys, time, statistics, torch, torch.distributed as dist
import weft_torch  # noqa: F401  registers "weft"
backend = sys.argv[1]
dist.init_process_group(backend)
t = torch.ones(16 * 1024 * 1024)
times = []
for i in range(12):
    dist.barrier()
    start = time.perf_counter()
    dist.all_reduce(t)
    times.append((time.perf_counter() - start) * 1e3)
med = torch.tensor([statistics.median(times[2:])])
dist.all_reduce(med, op=dist.ReduceOp.MAX)
if dist.get_rank() == 0:
    print(f"{backend}: 64 MiB all_reduce median {med.item():.2f} ms (slowest rank)")
dist.destroy_process_group()
