"""Self time per operator in a Chrome trace written by `bench_train --profile DIR`.

usage: profile_summary.py TRACE.json [TOP]
Self time = an op's duration minus that of the ops nested inside it on the same thread,
the column PyTorch's profiler sorts by (`self_cpu_time_total`). A trace of a CUDA run also
gets a table of GPU kernel time by kernel name, and the GPU's busy share of the traced span.
"""
import collections
import json
import sys


def main():
    events = json.load(open(sys.argv[1]))["traceEvents"]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    by_thread = collections.defaultdict(list)
    for e in ops:
        by_thread[(e["pid"], e["tid"])].append(e)
    self_us, calls = collections.Counter(), collections.Counter()
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # [(end, name)] of the enclosing ops
        for e in thread_ops:
            while stack and stack[-1][0] <= e["ts"]:
                stack.pop()
            if stack:
                self_us[stack[-1][1]] -= e["dur"]
            self_us[e["name"]] += e["dur"]
            calls[e["name"]] += 1
            stack.append((e["ts"] + e["dur"], e["name"]))
    total = sum(self_us.values())
    print(f"{'op':<48} {'self ms':>10} {'%':>6} {'calls':>7}")
    for name, us in self_us.most_common(top):
        print(f"{name[:48]:<48} {us / 1000:10.1f} {100 * us / total:6.1f} {calls[name]:7d}")
    print(f"{'total':<48} {total / 1000:10.1f}")
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    if kernels:
        gpu_us, launches = collections.Counter(), collections.Counter()
        for e in kernels:
            gpu_us[e["name"]] += e["dur"]
            launches[e["name"]] += 1
        busy = sum(gpu_us.values())
        span = max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)
        print(f"\nGPU kernels: {len(kernels)} launches, busy {busy / 1000:.1f} ms of a {span / 1000:.1f} ms span "
              f"({100 * busy / span:.0f}%)")
        print(f"{'kernel':<72} {'ms':>9} {'%':>6} {'calls':>6}")
        for name, us in gpu_us.most_common(top):
            print(f"{name[:72]:<72} {us / 1000:9.1f} {100 * us / busy:6.1f} {launches[name]:6d}")


if __name__ == "__main__":
    main()
