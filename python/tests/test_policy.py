"""Policies written in Python: FCFS continuous batching in Python gives exactly the C++ policy's
results, and a broken policy is stopped with a message."""
import pandas as pd
import pytest

import batchsim
from batchsim.examples import FcfsContinuous, StaticBatching
from conftest import SMALL_RUN


def summary_without_policy_name(result):
    """The summary less the policy's name and options, wherever they are echoed (the run's
    config, each pool's config and each pool's figures)."""
    def without(d, keys=("policy", "policy_opts")):
        return {k: v for k, v in d.items() if k not in keys}

    s = dict(result.summary)
    s["config"] = without(s["config"])
    for role in ("prefill", "decode"):
        if isinstance(s["config"].get(role), dict):
            s["config"][role] = without(s["config"][role])
        if "pools" in s:
            s["pools"] = dict(s["pools"], **{role: without(s["pools"][role])})
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


class CachingFcfs(FcfsContinuous):
    prefix_caching = True


@pytest.mark.parametrize("options", [
    dict(SMALL_RUN, prefix="groups:256:4"),       # shared prefixes under a KV pool that preempts
    dict(RULE_SIZED_RUN, prefix="shared:512"),    # one system prompt, plenty of KV
])
def test_python_prefix_caching_matches_the_cpp_policy_exactly(options):
    cpp = batchsim.run(policy="continuous", policy_opts={"prefix_caching": "true"}, **options)
    python = batchsim.run(policy=CachingFcfs, **options)
    assert summary_without_policy_name(python) == summary_without_policy_name(cpp)
    pd.testing.assert_frame_equal(python.requests, cpp.requests)
    pd.testing.assert_frame_equal(python.iterations, cpp.iterations)
    # The caches did share: most prompts found their prefix, and the run is faster for it.
    assert (python.requests["cached_tokens"] > 0).mean() > 0.5
    uncached = batchsim.run(policy=FcfsContinuous, **options)
    assert python.summary["makespan_s"] < uncached.summary["makespan_s"]


def test_use_cached_prefix_is_checked():
    class Overclaiming(CachingFcfs):
        def schedule(self, now_s, batch):
            self.env.use_cached_prefix(self.waiting[0], 10**6)

    with pytest.raises(batchsim.UserError, match="use_cached_prefix"):
        batchsim.run(policy=Overclaiming, num_requests=3, prefix="shared:64")


def test_a_prefix_cache_outlives_its_run():
    policy = CachingFcfs()
    batchsim.run(policy=policy, num_requests=20, prefix="shared:256")
    # The cache keeps its own copy of the prompts and hashes: still readable after the run.
    assert policy.kv_cache.prefix_caching
    # Request 0's blocks stay cached after it finished: the shared 256 tokens and its own
    # suffix's full blocks, never all 300 of the tokens asked about.
    cached = policy.kv_cache.cached_prefix_tokens(0, 300)
    assert 256 <= cached < 300 and cached % 16 == 0


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


def test_a_python_policy_serves_a_pool_only_when_it_says_so():
    with pytest.raises(batchsim.UserError, match="prefill pool: StaticBatching serves colocated runs only"):
        batchsim.run(policy=StaticBatching, prefill_replicas=1, decode_replicas=1, num_requests=3)

    class NoDecode(FcfsContinuous):
        def unsupported_role_reason(self, role):
            return "no decode pool here" if role == "decode" else ""

    with pytest.raises(batchsim.UserError, match="decode pool: no decode pool here"):
        batchsim.run(policy=NoDecode, prefill_replicas=1, decode_replicas=1, num_requests=3)


@pytest.mark.parametrize("options", [
    dict(SMALL_RUN, prefill_replicas=1, decode_replicas=2),        # 200 blocks a replica: decodes preempt
    dict(RULE_SIZED_RUN, prefill_replicas=2, decode_replicas=1),   # plenty of KV
    dict(SMALL_RUN, prefill_replicas=1, decode_replicas=1, prefix="groups:256:4"),
])
def test_python_fcfs_in_disaggregated_pools_matches_the_cpp_policy_exactly(options):
    policy_class = CachingFcfs if "prefix" in options else FcfsContinuous
    cpp_opts = {"prefix_caching": "true"} if "prefix" in options else {}
    cpp = batchsim.run(policy="continuous", policy_opts=cpp_opts, **options)
    python = batchsim.run(policy=policy_class, **options)
    assert summary_without_policy_name(python) == summary_without_policy_name(cpp)
    pd.testing.assert_frame_equal(python.requests, cpp.requests)
    pd.testing.assert_frame_equal(python.iterations, cpp.iterations)
    assert python.summary["requests"]["completed"] == options["num_requests"]
    assert python.requests["kv_transfer_s"].notna().all()  # every request crossed the link


def test_start_kv_transfer_is_for_decode_replicas():
    class Misusing(FcfsContinuous):
        def schedule(self, now_s, batch):
            self.env.start_kv_transfer(self.waiting[0], 1)

    with pytest.raises(batchsim.UserError, match="start_kv_transfer is for a decode pool"):
        batchsim.run(policy=Misusing, num_requests=3)


class UnpaddedStatic(StaticBatching):  # FasterTransformer's way (the ft-static preset's options)
    pad = False
    release_per_request = True


class TimedOutStatic(StaticBatching):
    batch_size = 16
    batch_timeout_s = 0.5


@pytest.mark.parametrize("python_policy, cpp_opts, options", [
    (StaticBatching, {}, SMALL_RUN),  # padded rows held to the end; KV binds the batch (200 blocks)
    (UnpaddedStatic, {"pad": "false", "release": "request"}, RULE_SIZED_RUN),
    (TimedOutStatic, {"batch_size": "16", "batch_timeout_s": "0.5"}, dict(RULE_SIZED_RUN, arrival="poisson:4")),
])
def test_python_static_batching_matches_the_cpp_static_policy_exactly(python_policy, cpp_opts, options):
    cpp = batchsim.run(policy="static", policy_opts=cpp_opts, **options)
    python = batchsim.run(policy=python_policy, **options)
    py_summary, cpp_summary = summary_without_policy_name(python), summary_without_policy_name(cpp)
    # The one-line diagnosis names the static batcher's own cause (its base), which a policy
    # written in Python does not declare; every figure beside it must match.
    for s in (py_summary, cpp_summary):
        s["latency_breakdown"] = {k: v for k, v in s["latency_breakdown"].items() if k != "diagnosis"}
    assert py_summary == cpp_summary
    pd.testing.assert_frame_equal(python.requests, cpp.requests)
    pd.testing.assert_frame_equal(python.iterations, cpp.iterations)


def test_the_static_comparison_covers_padding_bubbles_and_timeouts():
    padded = batchsim.run(policy=StaticBatching, **SMALL_RUN)
    unpadded = batchsim.run(policy=UnpaddedStatic, **SMALL_RUN)
    assert padded.summary["bubble_fraction"] > 0
    # Padded prompts and held rows compute more, so the same batches take longer.
    assert padded.summary["makespan_s"] > unpadded.summary["makespan_s"]
    timed = batchsim.run(policy=TimedOutStatic, **dict(RULE_SIZED_RUN, arrival="poisson:4"))
    prefills = timed.iterations[timed.iterations["num_prefills"] > 0]
    # Batches start before they are full: the timeout woke the policy with nothing arriving.
    assert (prefills["num_prefills"] < TimedOutStatic.batch_size).sum() > 1


@pytest.mark.parametrize("misuse, message", [
    (lambda batch: batch.add_item(10**6, 1), "batch: no request 1000000"),
    (lambda batch: batch.add_item(0, 0), "new_tokens of request 0 must be in \\[1, "),
    (lambda batch: batch.add_item(0, 10**9), "new_tokens of request 0 must be in \\[1, "),
    (lambda batch: batch.add_prefill_work(0), "tokens must be >= 1"),
    (lambda batch: batch.add_decode_work(-1), "context_before must be >= 0"),
    (lambda batch: setattr(batch, "bubble_slots", -1), "bubble_slots must be >= 0"),
    (lambda batch: setattr(batch, "wake_at", float("nan")), "wake_at must be a time"),
    (lambda batch: setattr(batch, "extra_time_s", -0.5), "extra_time_s must be >= 0"),
])
def test_bad_batch_calls_are_refused_by_name(misuse, message):
    class Misusing(StaticBatching):
        def schedule(self, now_s, batch):
            misuse(batch)

    with pytest.raises(batchsim.UserError, match=message):
        batchsim.run(policy=Misusing, num_requests=3, arrival="offline")


def test_a_wake_up_not_in_the_future_stops_the_run_naming_the_policy():
    class Past(StaticBatching):
        def schedule(self, now_s, batch):
            batch.wake_at = now_s

    with pytest.raises(RuntimeError, match="policy 'python:Past' asked to wake at a time not in the future"):
        batchsim.run(policy=Past, num_requests=3, arrival="poisson:1")


def test_extra_time_lengthens_the_iteration_it_is_set_on():
    class Slower(StaticBatching):
        def schedule(self, now_s, batch):
            super().schedule(now_s, batch)
            if len(batch):
                batch.extra_time_s = 0.25

    fast = batchsim.run(policy=StaticBatching, num_requests=8, arrival="offline")
    slow = batchsim.run(policy=Slower, num_requests=8, arrival="offline")
    assert len(slow.iterations) == len(fast.iterations)
    added = slow.iterations["duration_s"] - fast.iterations["duration_s"]
    assert added.round(9).eq(0.25).all()


def test_a_python_policy_goes_through_compare_with_seeds_report_and_figures(tmp_path):
    """compare(policies=[...]) takes a Policy class beside registered names: each seed's run of it
    gives exactly the C++ policy's figures on the same requests, and the results folder has its
    report and figures."""
    table = batchsim.compare(policies=[FcfsContinuous, "continuous"], seeds=[0, 1], engine="vllm",
                             out=tmp_path / "cmp", plots=True, jobs=2,
                             **{k: v for k, v in RULE_SIZED_RUN.items() if k != "seed"})
    assert sorted(table["experiment.policy"].unique()) == ["continuous", "python:FcfsContinuous"]
    assert sorted(table["experiment.seed"].unique()) == [0, 1]
    for seed in (0, 1):
        rows = table[table["experiment.seed"] == seed].set_index("experiment.policy")
        for column in ("throughput.output_tokens_per_s", "latency.ttft_s.p99", "latency.tbt_s.p99"):
            assert rows.loc["python:FcfsContinuous", column] == rows.loc["continuous", column], (seed, column)
    report = (tmp_path / "cmp" / "report.md").read_text()
    assert "python:FcfsContinuous" in report
    assert (tmp_path / "cmp" / "figures" / "throughput.png").exists()
    with pytest.raises(batchsim.UserError, match="seeds="):
        batchsim.compare({"name": "x", "policies": ["vllm"]}, seeds=[1])
