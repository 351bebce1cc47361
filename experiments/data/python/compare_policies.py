#!/usr/bin/env python3
"""Notebook-style example: how TTFT and time-between-tokens grow with the request rate under
static, continuous and chunked-prefill batching, from Python, with a matplotlib figure.

    PYTHONPATH=build/python python3 experiments/data/python/compare_policies.py [OUT.png]

Each cell below would be a notebook cell. The sweep runs on a thread pool: the simulator releases
the GIL, so the runs use every core.
"""
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import matplotlib
matplotlib.use("Agg")  # no display needed; a notebook shows the figure inline instead
import matplotlib.pyplot as plt
import pandas as pd

import batchsim

# %% The question: Llama-2-7B on one A100-80GB, prompts and outputs of the Azure conversation
# trace, Poisson arrivals at rising rates.
policies = ["ft-static", "vllm-v0", "sarathi"]
rates = [1, 2, 4, 6, 8]
trace = Path(__file__).resolve().parents[1] / "traces" / "azure-llm-2023" / "conv.csv.gz"
base = dict(model="llama-2-7b", gpu="a100-80gb", trace=trace,
            num_requests=400, record_iterations=False)

# %% The sweep: one run per (policy, rate), in parallel.
combinations = [(p, r) for p in policies for r in rates]
with ThreadPoolExecutor() as pool:
    results = list(pool.map(lambda pr: batchsim.run(policy=pr[0], arrival=f"poisson:{pr[1]}", **base),
                            combinations))

# %% One row per run: the figures a capacity planner reads.
table = pd.DataFrame([{
    "policy": p, "rate": r,
    "ttft_p50_s": res.summary["latency"]["ttft_s"]["p50"],
    "tbt_p99_ms": res.summary["latency"]["tbt_s"]["p99"] * 1e3,
    "throughput_tok_s": res.summary["throughput"]["output_tokens_per_s"],
} for (p, r), res in zip(combinations, results)])
print(table.to_string(index=False))

# %% The figure.
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
for policy, rows in table.groupby("policy", sort=False):
    left.plot(rows.rate, rows.ttft_p50_s, marker="o", label=policy)
    right.plot(rows.rate, rows.tbt_p99_ms, marker="o", label=policy)
left.set(xlabel="request rate (req/s)", ylabel="TTFT p50 (s)", yscale="log", title="time to first token")
right.set(xlabel="request rate (req/s)", ylabel="TBT p99 (ms)", title="time between tokens")
left.legend()
fig.tight_layout()
out = sys.argv[1] if len(sys.argv) > 1 else "results/python-compare.png"
os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
fig.savefig(out, dpi=120)
print(f"wrote {out}")
