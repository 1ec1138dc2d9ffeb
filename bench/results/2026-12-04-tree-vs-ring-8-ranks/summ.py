import sys, statistics, collections
d = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) < 3: continue
    algo = parts[1]
    for cell in parts[2:]:
        size, t = cell.split(":"); oop, ip = t.split("/")
        d[int(size)][algo].append((float(oop), float(ip)))
print("size  tree oop/ip (median)  ring oop/ip  tree/ring oop  tree/ring ip  tree oop/ip ratio per rep")
for size in sorted(d):
    t, r = d[size]["tree"], d[size]["ring"]
    mt = [statistics.median(x[i] for x in t) for i in (0, 1)]
    mr = [statistics.median(x[i] for x in r) for i in (0, 1)]
    print(f"{size>>10:5d}K {mt[0]:8.1f}/{mt[1]:8.1f} {mr[0]:8.1f}/{mr[1]:8.1f}  {mt[0]/mr[0]:5.2f}  {mt[1]/mr[1]:5.2f}  "
          + " ".join(f"{a/b:.2f}" for a, b in t))
