"""Policies written in Python, as examples to copy and as the reference the tests hold to C++.

FcfsContinuous is the C++ `continuous` policy with its defaults (policies/continuous_policy.h:
paged KV of 16-token blocks, Orca's mixed iterations of decodes and whole prefills, first come
first served, at most 256 running requests and max(max_model_len, 2048) tokens an iteration, the
newest running request preempted by recompute when a decode finds no free block), rewritten in
Python step for step. On the same workload it gives the same results, request for request
(python/tests/test_policy.py).
"""
from collections import deque

from ._core import DEFAULT_BLOCK_SIZE, PagedKvCache
from ._policy import Policy


class FcfsContinuous(Policy):
    """First come, first served continuous batching (Orca, vLLM without chunked prefill)."""

    max_num_seqs = 256

    def attach(self, env):
        self.env = env
        blocks = env.num_gpu_blocks or env.kv_capacity_tokens // DEFAULT_BLOCK_SIZE
        self.kv_cache = PagedKvCache(env.num_requests, blocks, DEFAULT_BLOCK_SIZE)
        self.budget = max(env.max_model_len, 2048)  # vLLM v0's max_num_batched_tokens default
        self.waiting = deque()
        self.running = []  # admission order: the newest at the back

    def profile_step(self, max_model_len):
        # vLLM's profile run of the budget over min(budget, max_num_seqs) sequences, as the C++
        # policy sizes its pool (ContinuousPolicy::kv_sizing).
        budget = max(max_model_len, 2048)
        return budget, min(budget, self.max_num_seqs)

    def on_arrival(self, id, now_s):
        env, r = self.env, self.env.request(id)
        if env.reject_over_context(id):
            return
        if r.prompt_tokens > self.budget:
            env.reject(id, f"prompt exceeds max_num_batched_tokens {self.budget} (chunked prefill is off): "
                           f"{r.prompt_tokens} tokens")
            return
        # The whole footprint: prompt + output - 1 (the last token is sampled, never written).
        if env.reject_over_cache(self.kv_cache, id, r.prompt_tokens + r.output_tokens - 1):
            return
        self.waiting.append(id)

    def step_tokens(self, need, budget):
        # A whole prefill or nothing; only a re-prefill longer than the whole budget is split.
        if need <= budget:
            return need
        return budget if need > self.budget else 0

    def schedule(self, now_s, batch):
        env, kv = self.env, self.kv_cache
        budget = self.budget
        preempted = False
        # 1. Running requests in admission order; when one cannot grow, preempt the newest.
        i = 0
        while i < len(self.running) and budget > 0:
            id = self.running[i]
            computed = env.computed_tokens(id)
            n = self.step_tokens(env.known_tokens(id) - computed, budget)
            if n == 0:
                break
            scheduled = True
            while not kv.try_grow(id, computed + n):
                victim = self.running.pop()
                kv.release(victim)
                self.waiting.appendleft(victim)
                env.preempt(victim, keeps_kv=False)
                preempted = True
                if victim == id:
                    scheduled = False
                    break
            if not scheduled:
                break
            batch.add(id, n)
            budget -= n
            i += 1
        if preempted:
            return  # a step that preempted admits nobody
        # 2. Admit waiting requests first come, first served, while they fit (head of line).
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            id = self.waiting[0]
            need = env.known_tokens(id) - env.computed_tokens(id)
            n = self.step_tokens(need, budget)
            if n == 0:
                break
            r = env.request(id)
            footprint = r.prompt_tokens + r.output_tokens - 1
            # Room for the whole prefill, even when an over-long re-prefill runs a chunk of it.
            if n < need and not kv.can_admit(id, need, footprint):
                break
            if not kv.try_admit(id, n, footprint):
                break
            self.waiting.popleft()
            self.running.append(id)
            batch.add(id, n)
            budget -= n

    def on_iteration_end(self, batch, finished, now_s):
        if not finished:
            return
        done = set(finished)
        for id in finished:
            self.kv_cache.release(id)
        self.running = [id for id in self.running if id not in done]

    def idle(self):
        return not self.waiting and not self.running
