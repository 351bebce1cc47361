"""Policies written in Python: FCFS continuous batching in Python gives exactly the C++ policy's
results, and a broken policy is stopped with a message."""
import pandas as pd
import pytest

import batchsim
from batchsim.examples import FcfsContinuous
from conftest import SMALL_RUN


def summary_without_policy_name(result):
    s = dict(result.summary)
    s["config"] = {k: v for k, v in s["config"].items() if k != "policy"}
    return s


# Without num_gpu_blocks both pools are sized after a profile run of the policy's own largest step
# (FcfsContinuous.profile_step, ContinuousPolicy::kv_sizing).
RULE_SIZED_RUN = {k: v for k, v in SMALL_RUN.items() if k != "num_gpu_blocks"}
TIGHT_RULE_SIZED_RUN = dict(RULE_SIZED_RUN, gpu_memory_utilization=0.2)  # 3,989 KV tokens


@pytest.mark.parametrize("options", [
    SMALL_RUN,                                                  # preempts: 200 blocks
    TIGHT_RULE_SIZED_RUN,                                       # preempts, pool by the rule
    dict(RULE_SIZED_RUN, replicas=2),                           # plenty of KV, two replicas
    dict(RULE_SIZED_RUN, arrival="offline"),                    # everything at once
])
def test_python_fcfs_matches_the_cpp_continuous_policy_exactly(options):
    cpp = batchsim.run(policy="continuous", **options)
    python = batchsim.run(policy=FcfsContinuous, **options)
    assert python.summary["config"]["policy"] == "python:FcfsContinuous"
    assert summary_without_policy_name(python) == summary_without_policy_name(cpp)
    pd.testing.assert_frame_equal(python.requests, cpp.requests)
    pd.testing.assert_frame_equal(python.iterations, cpp.iterations)


def test_the_comparison_covers_preemption_and_a_full_batch():
    for options in (SMALL_RUN, TIGHT_RULE_SIZED_RUN):
        r = batchsim.run(policy=FcfsContinuous, **options)
        assert r.summary["preemptions"] > 0
        assert r.iterations["num_requests"].max() > 1


def test_profile_step_sizes_the_kv_pool_as_the_engine_would():
    class DefaultProfile(FcfsContinuous):
        def profile_step(self, max_model_len):
            return None

    class BigStep(FcfsContinuous):
        def profile_step(self, max_model_len):
            return 16384, 1024

    kv = {name: batchsim.run(policy=policy, **TIGHT_RULE_SIZED_RUN).summary["kv"]
          for name, policy in [("fcfs", FcfsContinuous), ("default", DefaultProfile), ("big", BigStep),
                               ("cpp", "continuous"), ("static", "static")]}
    # Llama-2-7B's budget is its 4,096-token context: a smaller step than the default's 8,192
    # tokens, so more KV, and the C++ policy's pool exactly.
    assert kv["fcfs"] == kv["cpp"]
    assert kv["fcfs"]["capacity_rule"] == "--gpu-memory-utilization 0.2 after a profile run of 4096 tokens in 256 sequences"
    assert kv["default"]["capacity_tokens"] == kv["static"]["capacity_tokens"]
    assert kv["default"]["capacity_rule"] == "--gpu-memory-utilization 0.2 after a profile run of 8192 tokens in 256 sequences"
    assert kv["big"]["capacity_tokens"] < kv["default"]["capacity_tokens"] < kv["fcfs"]["capacity_tokens"]


@pytest.mark.parametrize("step, message", [
    ("4096", "must return None or \\(tokens, sequences\\)"),
    ((0, 1), "at least one token"),
    ((64, 65), "1 to `tokens` sequences"),
])
def test_a_bad_profile_step_is_refused(step, message):
    class Bad(FcfsContinuous):
        def profile_step(self, max_model_len):
            return step

    with pytest.raises(batchsim.UserError, match=message):
        batchsim.run(policy=Bad, num_requests=3)


def test_a_python_policy_sees_the_call_order_of_the_interface():
    calls = []

    class Recording(FcfsContinuous):
        def attach(self, env):
            calls.append("attach")
            super().attach(env)

        def on_arrival(self, id, now_s):
            calls.append("on_arrival")
            super().on_arrival(id, now_s)

        def schedule(self, now_s, batch):
            calls.append("schedule")
            super().schedule(now_s, batch)

        def on_iteration_end(self, batch, finished, now_s):
            calls.append("on_iteration_end")
            assert len(batch) > 0 and all(n >= 1 for _, n, _ in batch.items)
            super().on_iteration_end(batch, finished, now_s)

    r = batchsim.run(policy=Recording, num_requests=5, arrival="offline")
    assert calls[0] == "attach" and calls[1] == "on_arrival"
    assert calls.count("on_arrival") == 5
    assert calls.count("on_iteration_end") == r.summary["iterations"]
    # Each iteration's end follows a schedule() that built it.
    ends = [i for i, c in enumerate(calls) if c == "on_iteration_end"]
    assert all(calls[i - 1] == "schedule" for i in ends)


def test_an_exception_in_a_policy_reaches_the_caller():
    class Broken(FcfsContinuous):
        def schedule(self, now_s, batch):
            raise RuntimeError("broken on purpose")

    with pytest.raises(RuntimeError, match="broken on purpose"):
        batchsim.run(policy=Broken, num_requests=3)


def test_a_policy_without_a_kv_cache_is_refused():
    class NoCache(FcfsContinuous):
        def attach(self, env):
            self.env = env

    with pytest.raises(batchsim.UserError, match="must set self.kv_cache"):
        batchsim.run(policy=NoCache, num_requests=3)


def test_an_instance_serves_one_run_and_one_replica():
    with pytest.raises(batchsim.UserError, match="pass the class"):
        batchsim.run(policy=FcfsContinuous(), replicas=2, num_requests=3)
    assert batchsim.run(policy=FcfsContinuous(), num_requests=3).summary["requests"]["completed"] == 3


def test_disaggregated_runs_refuse_a_python_policy():
    with pytest.raises(batchsim.UserError, match="colocated runs only"):
        batchsim.run(policy=FcfsContinuous, prefill_replicas=1, decode_replicas=1, num_requests=3)
