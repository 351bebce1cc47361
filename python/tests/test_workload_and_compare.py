"""Workloads given as a DataFrame or arrays, and batchsim.compare() on an experiment file or dict."""
import json

import numpy as np
import pandas as pd
import pytest

import batchsim
from conftest import cli_error, run_cli

RNG = np.random.default_rng(7)
N = 80
WORKLOAD = pd.DataFrame({
    "arrival_s": np.sort(RNG.uniform(0, 10, N)).round(6),
    "prompt_tokens": RNG.integers(16, 800, N),
    "output_tokens": RNG.integers(1, 300, N),
})


def without_trace_name(summary):
    s = json.loads(json.dumps(summary))
    s["config"].pop("trace")
    return s


def test_a_dataframe_workload_runs_as_the_same_rows_in_a_trace_file(tmp_path):
    trace = tmp_path / "trace.csv"
    WORKLOAD.to_csv(trace, index=False)
    from_file = batchsim.run(policy="vllm", trace=trace)
    from_frame = batchsim.run(policy="vllm", workload=WORKLOAD)
    assert from_frame.summary["config"]["trace"] == "workload"
    assert without_trace_name(from_frame.summary) == without_trace_name(from_file.summary)
    pd.testing.assert_frame_equal(from_frame.requests, from_file.requests)
    assert from_frame.summary["requests"]["total"] == N


def test_arrays_and_dicts_are_the_same_workload():
    frame = batchsim.run(workload=WORKLOAD).summary
    arrays = batchsim.run(workload=(WORKLOAD.arrival_s.to_numpy(), WORKLOAD.prompt_tokens.to_numpy(),
                                    WORKLOAD.output_tokens.to_numpy())).summary
    mapping = batchsim.run(workload={c: list(WORKLOAD[c]) for c in WORKLOAD.columns}).summary
    assert frame == arrays == mapping


def test_workload_options_apply_as_to_a_trace():
    # num_requests takes the first rows; an arrival process keeps the lengths, new arrivals.
    first = batchsim.run(workload=WORKLOAD, num_requests=10)
    assert list(first.requests.prompt_tokens) == list(WORKLOAD.prompt_tokens[:10])
    poisson = batchsim.run(workload=WORKLOAD, arrival="poisson:1")
    assert list(poisson.requests.prompt_tokens) == list(WORKLOAD.prompt_tokens)
    assert not np.allclose(poisson.requests.arrival_s, WORKLOAD.arrival_s - WORKLOAD.arrival_s[0])
    limited = batchsim.run(workload=WORKLOAD.assign(max_tokens=5, priority=np.arange(N) % 2))
    assert limited.requests.output_tokens.max() <= 5
    assert set(limited.summary["priority_classes"]) == {"0", "1"}


def test_a_bad_row_is_named_with_the_message_the_cli_gives_for_the_same_csv(tmp_path):
    bad = WORKLOAD.copy()
    bad.loc[3, "prompt_tokens"] = -5
    trace = tmp_path / "bad.csv"
    bad.to_csv(trace, index=False)
    with pytest.raises(batchsim.UserError) as error:
        batchsim.run(workload=bad)
    cli = cli_error("run", "--trace", trace)
    # The CLI names file:line (line 5: header, then rows 0..3); Python names the row.
    assert str(error.value) == "workload row 3: prompt_tokens must be >= 0, got -5"
    assert cli == f"{trace}:5: prompt_tokens must be >= 0, got -5"


@pytest.mark.parametrize("workload, message", [
    (WORKLOAD.drop(columns="output_tokens"), "missing output_tokens"),
    (WORKLOAD.assign(prompt_tokens=WORKLOAD.prompt_tokens + 0.5), "prompt_tokens must be whole numbers"),
    ((WORKLOAD.arrival_s, WORKLOAD.prompt_tokens), "a tuple must be"),
])
def test_malformed_workloads_raise_user_error(workload, message):
    with pytest.raises(batchsim.UserError, match=message):
        batchsim.run(workload=workload)


EXPERIMENT = {
    "name": "python-compare",
    "base": {"model": "llama-2-7b", "gpu": "a100-80gb", "num-requests": 60,
             "prompt-len": "uniform:64:512", "output-len": "uniform:16:200"},
    "policies": ["continuous", {"policy": "sarathi", "label": "sarathi-512",
                                "policy-opt": {"max_num_batched_tokens": 512}}],
    "axes": {"rate": [2, 8]},
    "seeds": [0],
}


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory):
    d = tmp_path_factory.mktemp("compare")
    (d / "experiment.yaml").write_text(json.dumps(EXPERIMENT, indent=2))
    run_cli("compare", d / "experiment.yaml", "--out", d / "out", "--jobs", 2, "--no-plots")
    return d


def csv_cell_holds(text, value):
    """Whether a results.csv cell (text as written) holds the DataFrame's value: numbers keep
    their round-trip text, so they must be equal exactly."""
    if value is None:
        return text == ""
    if isinstance(value, bool):
        return text == ("true" if value else "false")
    if isinstance(value, str):
        return text == value
    if isinstance(value, list):
        return json.loads(text) == value
    return float(text) == value


def test_compare_returns_results_csv_as_a_dataframe(cli_results):
    table = batchsim.compare(EXPERIMENT, jobs=2)
    csv = pd.read_csv(cli_results / "out" / "results.csv", dtype=str, keep_default_na=False)
    assert list(table.columns) == list(csv.columns)
    assert len(table) == 4 == len(csv)
    for name in csv.columns:
        for text, value in zip(csv[name], table[name].astype(object)):
            value = None if isinstance(value, float) and np.isnan(value) else value
            assert csv_cell_holds(text, value), (name, text, value)
    assert list(table["experiment.policy"]) == ["continuous", "sarathi-512"] * 2
    assert table["latency.ttft_s.p50"].dtype.kind == "f"
    assert table.attrs["failed"] == []


def test_compare_reads_a_yaml_path_like_the_dict(cli_results):
    from_path = batchsim.compare(cli_results / "experiment.yaml", jobs=1)
    pd.testing.assert_frame_equal(from_path, batchsim.compare(EXPERIMENT, jobs=2))


def test_compare_run_flags_patch_the_base_and_out_writes_the_folder(tmp_path):
    table = batchsim.compare(EXPERIMENT, num_requests=20, out=tmp_path / "r")
    assert set(table["requests.total"]) == {20}
    assert (tmp_path / "r" / "report.md").exists()
    assert len(pd.read_csv(tmp_path / "r" / "results.csv")) == 4


def test_compare_policies_on_a_dataframe_workload():
    table = batchsim.compare(policies=["continuous", "vllm"], workload=WORKLOAD)
    assert list(table["config.policy"]) == ["continuous", "vllm"]
    assert set(table["requests.total"]) == {N}
    assert table["config.trace"].iloc[0] == "workload"


def test_a_bad_experiment_raises_user_error():
    with pytest.raises(batchsim.UserError, match="rate"):
        batchsim.compare(dict(EXPERIMENT, axes={"rate": ["fast"]}))
