"""Times shell commands, interleaved, and prints each one's median, min and max wall time and
the ratio of the first two medians: `python3 docs/bench/timeit.py 31 hybrid "ava ... recall
..." none "ava --embedder none ... recall ..."` (used for BENCHMARKS.md's cold reads)."""
import subprocess, sys, time, statistics
n = int(sys.argv[1]); pairs = list(zip(sys.argv[2::2], sys.argv[3::2]))
res = {l: [] for l, _ in pairs}
for i in range(n):
    for l, c in pairs:
        t = time.perf_counter(); subprocess.run(c, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True); res[l].append((time.perf_counter() - t) * 1000)
for l, v in res.items():
    v.sort(); print(f"{l}: median {statistics.median(v):.1f} ms, min {v[0]:.1f}, max {v[-1]:.1f} (n={n})")
m = {l: statistics.median(v) for l, v in res.items()}
ls = list(m)
print("ratio", ls[0], "/", ls[1], f"{m[ls[0]]/m[ls[1]]:.2f}")
