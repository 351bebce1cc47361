"""batchsim.run(): the same run as `batchsim run`, its summary.json as a dict and its CSV files as
DataFrames; bad input raises UserError with the CLI's message."""
import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

import batchsim
from conftest import SMALL_RUN, cli_error, cli_flags, run_cli


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The same run from Python and from the CLI, with the CLI's files."""
    out = tmp_path_factory.mktemp("cli")
    run_cli("run", *cli_flags(**SMALL_RUN), "--out", out, "--iteration-log")
    return batchsim.run(**SMALL_RUN), out


def test_summary_is_the_dict_of_summary_json(small):
    result, out = small
    assert result.summary == json.loads((out / "summary.json").read_text())
    assert result.summary["requests"]["total"] == SMALL_RUN["num_requests"]
    assert result.summary["preemptions"] > 0  # the small cache makes the run exercise preemption


def assert_frame_matches_csv(frame, csv_path):
    """Every column of the CSV, in its order, equal to the DataFrame's: integers and text exactly,
    seconds to the CSV's 9 decimals, empty cells where the DataFrame has NaN."""
    csv = pd.read_csv(csv_path, keep_default_na=False, na_values=[""])
    assert list(frame.columns) == list(csv.columns)
    for name in csv.columns:
        ours, theirs = frame[name].to_numpy(), csv[name].to_numpy()
        if frame[name].dtype.kind == "O" or frame[name].dtype == "category":
            # Text (state, reject_reason): an empty text is an empty cell.
            assert list(frame[name].astype(str)) == list(csv[name].fillna("").astype(str)), name
        elif frame[name].dtype.kind == "f" or csv[name].dtype.kind == "f":
            # Seconds are written with 9 decimals (requests.csv) or 9 significant digits.
            np.testing.assert_allclose(ours.astype(float), theirs.astype(float), rtol=1e-8, atol=6e-10,
                                       err_msg=name)
        else:
            assert [str(v) if not isinstance(v, (bool, np.bool_)) else str(int(v)) for v in ours] == \
                [str(v) for v in theirs], name


def test_requests_are_requests_csv(small):
    result, out = small
    assert_frame_matches_csv(result.requests.reset_index(drop=True), out / "requests.csv")
    assert result.requests["state"].dtype == "category"
    assert result.requests.index.name == "id"


def test_iterations_are_iterations_csv(small):
    result, out = small
    assert len(result.iterations) == result.summary["iterations"]
    assert_frame_matches_csv(result.iterations, out / "iterations.csv")


def test_result_writes_the_cli_files(small, tmp_path):
    result, out = small
    result.write(tmp_path)
    for name in ("summary.json", "requests.csv", "bench.json"):
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes(), name


def test_out_keyword_writes_the_files_as_the_cli_does(small, tmp_path):
    _, out = small
    batchsim.run(**SMALL_RUN, out=tmp_path / "run")
    assert (tmp_path / "run" / "summary.json").read_bytes() == (out / "summary.json").read_bytes()


def test_policy_options_and_cluster_keywords_reach_the_run():
    base = dict(SMALL_RUN, num_gpu_blocks=0)
    one_seq = batchsim.run(**base, policy="continuous", policy_opts={"max_num_seqs": 1})
    assert one_seq.summary["config"]["policy_opts"] == {"max_num_seqs": "1"}
    assert one_seq.iterations["num_requests"].max() == 1
    cluster = batchsim.run(**base, replicas=2, router="least-outstanding")
    assert cluster.summary["config"]["replicas"] == 2
    assert sorted(cluster.requests["replica"].unique()) == [0, 1]
    assert len(cluster.summary["replicas"]) == 2


def test_slo_and_goodput_as_dicts():
    r = batchsim.run(**SMALL_RUN, slo={"ttft_p99_s": 1000}, goodput={"ttft": 1e9})
    assert r.summary["slo"]["met"] is True
    assert r.summary["goodput"]["good_requests"] == r.summary["requests"]["completed"]


@pytest.mark.parametrize("options, cli_args", [
    (dict(model="no-such-model"), ["--model", "no-such-model"]),
    (dict(prompt_len="uniform:9:3"), ["--prompt-len", "uniform:9:3"]),
    (dict(policy="vllm", policy_opts={"max_num_seqz": 4}), ["--policy", "vllm", "--policy-opt", "max_num_seqz=4"]),
    (dict(num_requets=5), ["--num-requets", "5"]),
    (dict(tp=0), ["--tp", "0"]),
])
def test_bad_input_raises_user_error_with_the_cli_message(options, cli_args):
    with pytest.raises(batchsim.UserError) as error:
        batchsim.run(**options)
    assert str(error.value) == cli_error("run", *cli_args)
    assert isinstance(error.value, ValueError)


def test_lists_name_what_the_cli_lists():
    for frame, what in ((batchsim.list_models(), "models"), (batchsim.list_gpus(), "gpus"),
                        (batchsim.list_policies(), "policies")):
        text = run_cli("list", what).stdout
        names = list(frame["name"])
        assert len(names) == len(set(names)) > 1
        for name in names:
            assert f"\n{name} " in "\n" + text, (what, name)
    policies = batchsim.list_policies().set_index("name")
    assert policies.loc["vllm", "base"] in ("continuous", "chunked-prefill")


def test_a_thread_pool_sweep_gives_the_sequential_results():
    rates = [2, 4, 8, 16]
    kwargs = [dict(SMALL_RUN, arrival=f"poisson:{r}", num_gpu_blocks=0) for r in rates]
    sequential = [batchsim.run(**k).summary for k in kwargs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = [r.summary for r in pool.map(lambda k: batchsim.run(**k), kwargs)]
    assert parallel == sequential
    # More load, longer queues: the sweep measured what it was asked to.
    ttft = [s["latency"]["ttft_s"]["mean"] for s in sequential]
    assert ttft == sorted(ttft)


def test_the_gil_is_released_while_simulating():
    # While one thread simulates, the main thread keeps running Python. Were the GIL held, the
    # main thread could run only in the few milliseconds before the call enters C++ and after
    # it returns; here it must have run in the middle of the simulation too. (The middle half,
    # not "most of the run": a loaded machine may leave the main thread waiting for a core for
    # a while, which says nothing about the GIL.)
    window = {}

    def simulate():
        window["start"] = time.perf_counter()
        # Long enough to tell (~0.15 s on this project's 2-core machine; 40,000 requests took
        # 0.047 s there by 2026-12-06): the faster the simulator, the more requests this needs.
        batchsim.run(model="llama-2-7b", arrival="poisson:30", num_requests=120000, record_iterations=False)
        window["end"] = time.perf_counter()

    worker = threading.Thread(target=simulate)
    samples = []
    worker.start()
    while worker.is_alive():
        samples.append(time.perf_counter())
    worker.join()
    start, end = window["start"], window["end"]
    assert end - start > 0.05, "the run is too short to tell"
    quarter = (end - start) / 4
    middle = [t for t in samples if start + quarter < t < end - quarter]
    assert middle, "the main thread never ran while the simulation ran"


def test_a_view_of_the_env_kept_past_the_run_raises():
    kept = {}

    class KeepsEnv(batchsim.Policy):
        def attach(self, env):
            kept["env"] = env
            self.kv_cache = batchsim.PagedKvCache(env.num_requests, 100)

        def on_arrival(self, id, now_s):
            kept["env"].reject(id, "test: rejects everything")

        def schedule(self, now_s, batch):
            pass

        def on_iteration_end(self, batch, finished, now_s):
            pass

        def idle(self):
            return True

    r = batchsim.run(policy=KeepsEnv, num_requests=3)
    assert r.summary["requests"]["rejected"] == 3
    assert set(r.requests["reject_reason"]) == {"test: rejects everything"}
    with pytest.raises(batchsim.UserError, match="outside the run"):
        kept["env"].request(0)


def test_nan_marks_what_never_happened():
    # Prompts longer than llama-2-7b's 4096-token context: every request is rejected on arrival.
    r = batchsim.run(**dict(SMALL_RUN, num_gpu_blocks=0, prompt_len="fixed:5000"))
    rejected = r.requests[r.requests["state"] == "rejected"]
    assert len(rejected) == SMALL_RUN["num_requests"]
    assert rejected["ttft_s"].isna().all() and rejected["first_token_s"].isna().all()
    assert not math.isnan(rejected["arrival_s"].iloc[-1])


def test_an_interpreter_without_numpy_is_told_which_one_the_module_needs():
    """An interpreter that cannot import numpy (a pyenv python3 ahead of Debian's) gets a message
    naming itself, the interpreter the module is built for and the packages, not a bare
    ModuleNotFoundError."""
    import os
    import subprocess
    import sys
    code = "import sys; sys.modules['numpy'] = None\ntry:\n import batchsim\nexcept ModuleNotFoundError as e:\n print(e)"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(batchsim.__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert "batchsim needs numpy and pandas" in out
    assert sys.executable in out
    assert "cannot import numpy" in out
    assert "/usr/bin/python3" in out and "python3-numpy" in out
