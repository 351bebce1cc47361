#!/usr/bin/env python3
"""What a policy written in Python costs: the same workload under the C++ `continuous` policy and
under batchsim.examples.FcfsContinuous, its step-for-step Python rewrite (identical results),
timed over a few repeats; prints iterations and requests simulated per wall-second of each.

    PYTHONPATH=build/python python3 experiments/data/python/python_policy_speed.py [NUM_REQUESTS]
"""
import sys
import time

import batchsim
from batchsim.examples import FcfsContinuous

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
options = dict(model="llama-2-7b", gpu="a100-80gb", arrival="poisson:8", num_requests=n,
               prompt_len="uniform:64:1024", output_len="capexp:128:512", record_iterations=False)


def best_of(policy, repeat=3):
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = batchsim.run(policy=policy, **options)
        best = min(best, time.perf_counter() - start)
    return best, result


cpp_s, cpp = best_of("continuous")
py_s, py = best_of(FcfsContinuous)
assert py.summary["latency"] == cpp.summary["latency"], "the two policies should agree exactly"
iterations = cpp.summary["iterations"]
print(f"{n} requests, {iterations} iterations (identical results)")
for name, s in (("C++ continuous", cpp_s), ("Python FcfsContinuous", py_s)):
    print(f"{name:<22} {s * 1e3:9.1f} ms  {iterations / s:12.0f} iterations/s  {n / s:10.0f} requests/s")
print(f"Python policy: {py_s / cpp_s:.1f}x the C++ policy's time, "
      f"{(py_s - cpp_s) / iterations * 1e6:.1f} us more per iteration")
