"""batchsim from Python: runs, sweeps and DataFrames, and policies written in Python.

The simulator is batchsim's C++ core (``batchsim._core``); this package gives it a notebook's
shape and adds nothing to what is simulated. Every keyword of :func:`run` is a ``batchsim run``
flag with dashes written as underscores (``num_requests=200`` is ``--num-requests 200``), parsed
by the CLI's own code, so the two accept the same names and refuse bad input with the same
message, raised here as :class:`UserError`.

>>> import batchsim
>>> r = batchsim.run(model="llama-2-7b", gpu="a100-80gb", policy="vllm",
...                  arrival="poisson:4", num_requests=200)
>>> r.summary["latency"]["ttft_s"]["p99"]          # summary.json, as a dict
>>> r.requests.ttft_s.describe()                   # requests.csv, as a DataFrame
>>> batchsim.compare("experiments/data/anyscale-throughput.yaml", num_requests=200)

The GIL is released while a simulation runs, so runs on the threads of a
``concurrent.futures.ThreadPoolExecutor`` use every core.
"""

import json
import os
import sys

try:
    import numpy as np
    import pandas as pd
except ModuleNotFoundError as missing:
    # Say which interpreter this is and which one the module was built for, rather than leave a
    # bare "No module named 'numpy'": a pyenv or conda python3 ahead of Debian's on PATH is the
    # usual cause.
    raise ModuleNotFoundError(
        f"batchsim needs numpy and pandas, and this Python ({sys.executable}, {sys.version.split()[0]}) cannot "
        f"import {missing.name}. The module is built for Debian's /usr/bin/python3, which has them as "
        f"python3-numpy and python3-pandas (scripts/setup-debian.sh installs them; CMake's -DPython_EXECUTABLE "
        f"chooses another interpreter that has them); run it with that interpreter, or from a venv made with "
        f"--system-site-packages (python/README.md)",
        name=missing.name) from missing

from . import _core
from ._core import KvCache, PagedKvCache, ReservedKvCache, UserError
from ._policy import Policy

# An installed package (`pip install .`) carries the report's figure scripts as batchsim/plots;
# the module built into build/python finds them in the source tree it was built from.
_PLOTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots")
if os.path.isdir(_PLOTS):
    os.environ.setdefault("BATCHSIM_PLOTS_DIR", _PLOTS)

__all__ = [
    "run", "compare", "Result", "Policy", "UserError", "PagedKvCache", "ReservedKvCache", "KvCache",
    "list_models", "list_gpus", "list_policies",
]
__version__ = "0.1.0"

# Keywords whose CLI flag differs from the keyword spelled with dashes. The issue's
# `policy_opts=` mirrors summary.json's config key; the CLI's flags are singular and repeatable.
_FLAG_NAMES = {
    "policy_opts": "policy-opt",
    "prefill_policy_opts": "prefill-policy-opt",
    "decode_policy_opts": "decode-policy-opt",
}
# Keywords that are a value-less switch on the CLI.
_SWITCHES = {"ignore-eos"}
# Flags whose value is optional on the CLI (a bare --iteration-log means true): the value must
# be attached with "=".
_IMPLICIT_VALUES = {"iteration-log"}


def _flag_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (os.PathLike,)):
        return os.fspath(value)
    if isinstance(value, np.generic):
        return str(value.item())
    return str(value)


def _cli_args(options):
    """The `batchsim run` flags for keyword arguments (see the module docstring)."""
    args = []
    for key, value in options.items():
        if value is None:
            continue
        flag = _FLAG_NAMES.get(key, key.replace("_", "-"))
        if flag in _SWITCHES:
            if value:
                args.append("--" + flag)
        elif isinstance(value, dict):
            if flag.endswith("policy-opt"):
                # --policy-opt KEY=VALUE, once per option
                for k, v in value.items():
                    args += [f"--{flag}", f"{k}={_flag_value(v)}"]
            else:
                # --slo ttft_p99_s=2,tbt_p99_ms=100 ; --goodput ttft:2000 tpot:100
                sep = ":" if flag == "goodput" else "="
                items = [f"{k}{sep}{_flag_value(v)}" for k, v in value.items()]
                args += [f"--{flag}"] + items if flag == "goodput" else [f"--{flag}", ",".join(items)]
        elif isinstance(value, (list, tuple)) and flag == "goodput":
            args += [f"--{flag}"] + [_flag_value(v) for v in value]
        elif isinstance(value, (list, tuple)):
            args += [f"--{flag}", ",".join(_flag_value(v) for v in value)]
        elif flag in _IMPLICIT_VALUES:
            args.append(f"--{flag}={_flag_value(value)}")
        else:
            # Two words, as a user types them, so that a message quotes the option as the CLI's does.
            args += [f"--{flag}", _flag_value(value)]
    return args


_WORKLOAD_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens", "max_tokens", "priority")


def _integer_column(name, values):
    a = np.asarray(values)
    if a.dtype.kind in "iu":
        return a.astype(np.int64, copy=False)
    if a.dtype.kind == "f" and np.all(np.isfinite(a)) and np.all(a == np.round(a)):
        return a.astype(np.int64)
    raise UserError(f"workload: {name} must be whole numbers (a {a.dtype} column was given)")


def _workload_columns(workload):
    """A workload as the columns of a generic CSV trace: a DataFrame (or a mapping) with columns
    arrival_s, prompt_tokens, output_tokens and optionally max_tokens and priority, or a tuple of
    three arrays (arrival_s, prompt_tokens, output_tokens)."""
    if workload is None:
        return None
    if isinstance(workload, (tuple, list)):
        if len(workload) != 3:
            raise UserError("workload: a tuple must be (arrival_s, prompt_tokens, output_tokens)")
        workload = dict(zip(_WORKLOAD_COLUMNS, workload))
    if isinstance(workload, pd.DataFrame):
        workload = {c: workload[c].to_numpy() for c in workload.columns}
    if not hasattr(workload, "keys"):
        raise UserError("workload: give a DataFrame, a dict of arrays or a tuple "
                        "(arrival_s, prompt_tokens, output_tokens)")
    unknown = [c for c in workload.keys() if c not in _WORKLOAD_COLUMNS]
    missing = [c for c in _WORKLOAD_COLUMNS[:3] if c not in workload]
    if unknown or missing:
        raise UserError(f"workload: columns are arrival_s, prompt_tokens, output_tokens[, max_tokens]"
                        f"[, priority]; {'missing ' + ', '.join(missing) if missing else ''}"
                        f"{'; ' if missing and unknown else ''}"
                        f"{'unknown ' + ', '.join(map(str, unknown)) if unknown else ''}")
    columns = {"arrival_s": np.asarray(workload["arrival_s"], dtype=np.float64)}
    for name in _WORKLOAD_COLUMNS[1:]:
        if name in workload:
            columns[name] = _integer_column(name, workload[name])
    return columns


class Result:
    """One run: ``summary`` (summary.json as a dict), ``requests`` and ``iterations`` (the rows of
    requests.csv and iterations.csv as DataFrames, built from the simulator's arrays on first use),
    ``warnings`` (what the CLI prints as warnings) and ``wall_s`` (the simulation's host time)."""

    def __init__(self, handle):
        self._handle = handle
        self._summary = None
        self._requests = None
        self._iterations = None

    @property
    def summary(self):
        if self._summary is None:
            self._summary = json.loads(self._handle.summary_json())
        return self._summary

    @property
    def config(self):
        return self.summary["config"]

    @property
    def requests(self):
        if self._requests is None:
            columns = self._handle.request_columns()
            frame = pd.DataFrame(columns)
            frame["state"] = frame["state"].astype("category")
            self._requests = frame.set_index("id", drop=False)
        return self._requests

    @property
    def iterations(self):
        if self._iterations is None:
            self._iterations = pd.DataFrame(self._handle.iteration_columns())
        return self._iterations

    @property
    def warnings(self):
        return list(self._handle.warnings)

    @property
    def wall_s(self):
        return self._handle.wall_s

    def write(self, out):
        """Writes summary.json, bench.json, requests.csv (and iterations.csv) into `out`."""
        self._handle.write(os.fspath(out))

    def __repr__(self):
        s = self.summary
        return (f"<batchsim.Result {s['config']['policy']} on {s['config']['model']} / {s['config']['gpu']}: "
                f"{s['requests']['completed']}/{s['requests']['total']} requests, "
                f"{s['throughput']['output_tokens_per_s']:.1f} output tok/s, "
                f"TTFT p99 {s['latency']['ttft_s']['p99']:.3f} s>")


def _python_policy(policy, replicas):
    """(factory, name) for a Policy subclass or instance, or (None, None) for a policy name."""
    if isinstance(policy, type) and issubclass(policy, Policy):
        return policy, f"python:{policy.__name__}"
    if isinstance(policy, Policy):
        if replicas not in (None, 1):
            raise UserError(f"--replicas {replicas}: each replica needs a policy of its own; pass the class "
                            f"{type(policy).__name__}, not an instance")
        used = []

        def once():
            if used:
                raise UserError(f"policy {type(policy).__name__}: an instance serves one run; pass the class")
            used.append(True)
            return policy
        return once, f"python:{type(policy).__name__}"
    if callable(policy) and not isinstance(policy, str):
        return policy, f"python:{getattr(policy, '__name__', type(policy).__name__)}"
    return None, None


def run(*, policy=None, workload=None, record_iterations=True, **options):
    """Simulates one run and returns its :class:`Result`.

    Keywords are ``batchsim run``'s flags (``batchsim run --help``; README "Run options"):
    ``model``, ``gpu``, ``tp``, ``engine``, ``policy_opts={KEY: VALUE}``, ``arrival``, ``trace``,
    ``num_requests``, ``prompt_len``, ``output_len``, ``seed``, ``replicas``, ``router``,
    ``max_concurrency``, ``think_time``, ``num_gpu_blocks``, ``slo={KEY: BOUND}``,
    ``goodput={KEY: MS}``, ``out`` (also write the CLI's files there), ``config`` (a YAML or
    summary.json to start from), ... .

    ``policy`` is a policy or preset name (``list_policies()``; default continuous), or a :class:`Policy` subclass
    written in Python (one instance per replica). ``workload`` replaces the generated requests
    with your own, as ``trace=`` would with a file: a DataFrame with columns arrival_s,
    prompt_tokens, output_tokens (and optionally max_tokens, priority), a dict of such arrays, or a
    tuple (arrival_s, prompt_tokens, output_tokens). ``record_iterations`` keeps each iteration
    for ``Result.iterations`` (one row per iteration; turn it off for very long runs).

    Raises :class:`UserError` with the CLI's message for bad input.
    """
    factory, policy_name = _python_policy(policy, options.get("replicas"))
    if factory is None and policy is not None:
        options = {"policy": policy, **options}
    columns = _workload_columns(workload)
    handle = _core.run(_cli_args(options), columns, options.get("num_requests") is not None,
                       factory, policy_name or "", bool(record_iterations))
    return Result(handle)


def _experiment_text(experiment):
    """A dict experiment as YAML text for the experiment parser: JSON is YAML, and indented JSON
    keeps one key a line, so the parser's messages point at a line that means something."""
    def plain(value):
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        raise UserError(f"experiment: {value!r} ({type(value).__name__}) is not a YAML value")
    return json.dumps(experiment, indent=2, default=plain)


def compare(experiment=None, *, policies=None, seeds=None, out=None, jobs=None, plots=False, workload=None,
            progress=False, **options):
    """Runs an experiment and returns its results table (results.csv) as a DataFrame.

    ``experiment`` is an experiment file's path or the same content as a dict (schema:
    experiments/README.md); without one, ``policies=[...]`` compares those policies on the
    workload the keywords describe, as ``batchsim compare --policies``; a :class:`Policy` subclass
    among them runs as its own policy (``python:ClassName``, on engine vllm unless ``engine=``),
    and ``seeds=[0, 1, 2]`` runs every policy on each seed's requests. Other keywords are run
    flags that patch the experiment's base, as on the CLI (``num_requests=200`` for a quick look);
    ``workload`` gives every run the same requests (see :func:`run`). ``out`` also writes the
    results folder (runs/, results.csv, report.md, and figures when ``plots``); ``jobs``
    simulations run in parallel (default: every core). Runs that could not run are listed in
    ``DataFrame.attrs["failed"]`` as (run, why).
    """
    if experiment is not None and policies is not None:
        raise UserError("--policies: not with an experiment file (set it in the file)")
    experiment_file, experiment_text = "", ""
    if isinstance(experiment, dict):
        experiment_text = _experiment_text(experiment)
    elif experiment is not None:
        experiment_file = os.fspath(experiment)
    elif policies is None:
        policies = ["hf-static", "continuous"]
    if isinstance(policies, str):
        policies = [p for p in policies.split(",") if p]
    if seeds is not None and experiment is not None:
        raise UserError("seeds=: set `seeds:` in the experiment")
    names, python_policies = [], {}
    for p in policies or []:
        factory, name = _python_policy(p, None)
        if factory is None:
            names.append(p)
        else:
            names.append(name)
            python_policies[name] = factory
    table = _core.compare(experiment_file, experiment_text, names, python_policies,
                          [int(s) for s in (seeds or [])], _cli_args(options),
                          _workload_columns(workload), options.get("num_requests") is not None,
                          os.fspath(out) if out is not None else "", int(jobs or os.cpu_count() or 1),
                          bool(plots), bool(progress))
    frame = pd.DataFrame(table["rows"], columns=table["columns"])
    frame.attrs["failed"] = list(table["failed"])
    return frame


def list_models():
    """The built-in models (``batchsim list models``) as a DataFrame."""
    return pd.DataFrame(_core.models())


def list_gpus():
    """The built-in GPUs and fitted profiles (``batchsim list gpus``) as a DataFrame."""
    return pd.DataFrame(_core.gpus())


def list_policies():
    """The registered policies and presets (``batchsim list policies``) as a DataFrame."""
    return pd.DataFrame(_core.policies())
