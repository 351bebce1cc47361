#!/usr/bin/env python3
"""Fit an engine's host time per eager kernel launch on measured serving benchmarks.

An engine that graphs only decode-only iterations (`cuda_graphs: {decode_only: true}`, TensorRT-LLM's
PyTorch backend) launches every prefill or mixed iteration eagerly: kernels_per_layer x layers +
kernels_per_iteration launches of `launch.per_kernel_s` each, on the iteration's critical path
where they outlast the GPU's work (hwmodel/engine_profile.h). No table here times TensorRT-LLM's
eager launches, so this script fits `per_kernel_s` to what such launches cost end to end:

  for each candidate, validate-serving replays the FIT file's rows of the backend with the engine
  at that value; the value with the least mean of TTFT and TPOT MAPE wins; the HELD-OUT file's
  rows (other models, other campaigns) are then scored at the winner and at the base value.

  scripts/fit-eager-launch.py --batchsim build/experiments/batchsim --engine hwmodel/engines/trtllm.yaml \\
      --fit hwmodel/measured/aiconfigurator/silicon/h100_sxm_dense_agg.csv.gz \\
      --held-out hwmodel/measured/aiconfigurator/silicon/h100_sxm_moe.csv.gz --backend trtllm

It prints one line per candidate and the held-out figures; it writes nothing.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def engine_with(base_text, per_kernel_s, name):
    text = re.sub(r"(\n\s*per_kernel_s:\s*)[0-9.eE+-]+", lambda m: m.group(1) + repr(per_kernel_s), base_text, count=1)
    if "decode_only:" not in text:
        raise SystemExit("the engine file must set cuda_graphs: {decode_only: true} for this fit to mean anything")
    return re.sub(r"^name:.*$", f"name: {name}", text, count=1, flags=re.M)


def replay(batchsim, measurements, gpu, backend, engine_file, workdir):
    out = os.path.join(workdir, "replay.json")
    cmd = [batchsim, "validate-serving", "--measurements", measurements, "--gpu", gpu, "--backend", backend,
           "--engine", f"{backend}={engine_file}", "--out", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        d = json.load(f)
    # The MoE report counts each measurement once ("distinct"); a dense report has every row.
    if "distinct" in d:
        g = d["distinct"]
        return g["ttft_mape"], g["tpot_mape"], g["count"]
    return d["ttft"]["mape"], d["tpot"]["mape"], d["ttft"]["count"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batchsim", required=True)
    p.add_argument("--engine", required=True, help="the base engine file (decode_only graphs)")
    p.add_argument("--fit", required=True, help="the measurements the value is fitted on")
    p.add_argument("--held-out", required=True, help="measurements scored at the fitted value only")
    p.add_argument("--backend", required=True)
    p.add_argument("--gpu", default="h100-sxm-fitted")
    p.add_argument("--candidates-us", default="5,25,50,60,70,80,90,100,110,120,130,140,150,160,180,200",
                   help="per_kernel_s candidates in microseconds")
    a = p.parse_args()
    with open(a.engine) as f:
        base_text = f.read()
    base = float(re.search(r"\n\s*per_kernel_s:\s*([0-9.eE+-]+)", base_text).group(1))
    results = []
    with tempfile.TemporaryDirectory() as work:
        def score(measurements, per_kernel_s):
            path = os.path.join(work, "engine.yaml")
            with open(path, "w") as f:
                f.write(engine_with(base_text, per_kernel_s, f"fit-{per_kernel_s:g}"))
            return replay(a.batchsim, measurements, a.gpu, a.backend, path, work)

        print(f"fit on {a.fit} ({a.backend} rows): per_kernel_s -> TTFT MAPE %, TPOT MAPE %, their mean")
        for us in [float(x) for x in a.candidates_us.split(",")]:
            ttft, tpot, n = score(a.fit, us * 1e-6)
            results.append((0.5 * (ttft + tpot), us, ttft, tpot, n))
            print(f"  {us:6.1f} us  {ttft:6.1f}  {tpot:6.1f}  {0.5 * (ttft + tpot):6.1f}  ({n} rows)")
            sys.stdout.flush()
        best = min(results)
        print(f"fitted: per_kernel_s {best[1]:g} us (mean MAPE {best[0]:.1f}%)")
        for label, value in (("base", base), ("fitted", best[1] * 1e-6)):
            ttft, tpot, n = score(a.held_out, value)
            print(f"held out {a.held_out} at {label} {value * 1e6:g} us: TTFT {ttft:.1f}%, TPOT {tpot:.1f}% ({n} rows)")


if __name__ == "__main__":
    main()
