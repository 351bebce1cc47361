"""Shared fixtures: the CLI binary (the tests compare Python's results with its files) and the
source tree (for the shipped traces and experiments). ctest sets both (python/CMakeLists.txt)."""
import os
import subprocess
from pathlib import Path

import pytest

SOURCE_DIR = Path(os.environ.get("BATCHSIM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
CLI = os.environ.get("BATCHSIM_CLI", str(SOURCE_DIR / "build" / "experiments" / "batchsim"))

# A small run that still queues, preempts (a KV cache of 200 blocks) and finishes quickly.
SMALL_RUN = dict(model="llama-2-7b", gpu="a100-80gb", arrival="poisson:20", num_requests=120,
                 prompt_len="uniform:64:512", output_len="uniform:16:256", num_gpu_blocks=200, seed=3)


def cli_flags(**options):
    """--key value flags for the CLI from keywords, as a user would type them."""
    args = []
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return args


def run_cli(*args, check=True):
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"batchsim {' '.join(map(str, args))} failed ({r.returncode}): {r.stderr}")
    return r


def cli_error(*args):
    """The message `batchsim` prints for bad input, without its "batchsim: error: " prefix."""
    r = run_cli(*args, check=False)
    assert r.returncode == 2, r.stderr
    prefix = "batchsim: error: "
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith(prefix), line
    return line[len(prefix):]


@pytest.fixture(scope="session")
def source_dir():
    return SOURCE_DIR
