"""Policies written in Python, as examples to copy and as the reference the tests hold to C++.

FcfsContinuous is the C++ `continuous` policy with its defaults (policies/continuous/continuous_policy.h:
paged KV of 16-token blocks, Orca's mixed iterations of decodes and whole prefills, first come
first served, at most 256 running requests and max(max_model_len, 2048) tokens an iteration, the
newest running request preempted by recompute when a decode finds no free block; with
`prefix_caching = True`, full blocks of equal prompt prefixes shared as vLLM v1 shares them; in
a disaggregated run, either pool's role), rewritten in Python step for step. StaticBatching is
the C++ `static` policy (policies/static/static_policy.cpp): batches that start and end together, padded to their longest prompt, one reservation per row
for the batch's longest prompt and output, and an optional timeout; its class attributes are
the C++ policy's options, so the `hf-static` and `ft-static` presets are subclasses away. On the
same workload each gives its C++ policy's results, request for request (python/tests/test_policy.py).
"""
from collections import deque

from ._core import DEFAULT_BLOCK_SIZE, PagedKvCache, ReservedKvCache
from ._policy import Policy


class FcfsContinuous(Policy):
    """First come, first served continuous batching (Orca, vLLM without chunked prefill)."""

    max_num_seqs = 256
    prefix_caching = False  # share full blocks of equal prompt prefixes (the C++ option of that name)

    def attach(self, env):
        self.env = env
        blocks = env.num_gpu_blocks or env.kv_capacity_tokens // DEFAULT_BLOCK_SIZE
        if self.prefix_caching:
            self.kv_cache = env.prefix_caching_kv_cache(blocks, DEFAULT_BLOCK_SIZE)
        else:
            self.kv_cache = PagedKvCache(env.num_requests, blocks, DEFAULT_BLOCK_SIZE)
        self.budget = self.token_budget(env.max_model_len)
        self.waiting = deque()
        self.running = []  # admission order: the newest at the back
        # Disaggregated pools (env.role): a prefill replica holds a finished request's KV until
        # its transfer lands; a decode replica admits prefilled requests, pulls their KV and runs
        # them once it has landed (vLLM v1's WAITING_FOR_REMOTE_KVS).
        self.held = set()
        self.remote = set()     # decode: waiting requests prefilled elsewhere
        self.receiving = 0      # decode: transfers under way
        self.received = deque()  # decode: landed, to join the running requests

    @staticmethod
    def token_budget(max_model_len):
        return max(max_model_len, 2048)  # vLLM v0's max_num_batched_tokens default

    def footprint(self, id):
        """A request's whole KV: prompt + output - 1 (the last token is sampled, never written)."""
        r = self.env.request(id)
        return r.prompt_tokens + r.output_tokens - 1

    def profile_step(self, max_model_len):
        # vLLM's profile run of the budget over min(budget, max_num_seqs) sequences, as the C++
        # policy sizes its pool (ContinuousPolicy::kv_sizing).
        budget = self.token_budget(max_model_len)
        return budget, min(budget, self.max_num_seqs)

    def unsupported_role_reason(self, role):
        return ""

    def release_held_kv(self, id):
        self.held.remove(id)
        self.kv_cache.release(id)

    def on_kv_received(self, id, now_s):
        self.receiving -= 1
        self.received.append(id)

    def on_arrival(self, id, now_s):
        env, r = self.env, self.env.request(id)
        if env.reject_over_context(id):
            return
        if env.role == "decode" and env.computed_tokens(id) > 0:
            # Prefilled elsewhere: only whether its KV can ever fit.
            if env.reject_over_cache(self.kv_cache, id, self.footprint(id)):
                return
            self.remote.add(id)
            self.waiting.append(id)
            return
        if r.prompt_tokens > self.budget:
            env.reject(id, f"prompt exceeds max_num_batched_tokens {self.budget} (chunked prefill is off): "
                           f"{r.prompt_tokens} tokens")
            return
        if env.reject_over_cache(self.kv_cache, id, self.footprint(id)):
            return
        self.waiting.append(id)

    def step_tokens(self, need, budget):
        # A whole prefill or nothing; only a re-prefill longer than the whole budget is split.
        if need <= budget:
            return need
        return budget if need > self.budget else 0

    def schedule(self, now_s, batch):
        env, kv = self.env, self.kv_cache
        while self.received and len(self.running) < self.max_num_seqs:
            self.running.append(self.received.popleft())  # their next step is a decode
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
            if id in self.remote:
                # Blocks for its prompt, none of it computed here; the link brings what the
                # cache does not already hold.
                prompt = env.request(id).prompt_tokens
                if not kv.try_admit(id, prompt, self.footprint(id)):
                    break
                shared = kv.shared_tokens_of(id) if self.prefix_caching else 0
                self.remote.remove(id)
                self.waiting.popleft()
                self.receiving += 1
                env.start_kv_transfer(id, prompt - shared)
                continue
            # A prefix whose KV the cache holds is not computed again (0 without caching).
            cached = kv.cached_prefix_tokens(id, env.known_tokens(id))
            need = env.known_tokens(id) - env.computed_tokens(id) - cached
            n = self.step_tokens(need, budget)
            if n == 0:
                break
            footprint = self.footprint(id)
            # Room for the whole prefill, even when an over-long re-prefill runs a chunk of it.
            if n < need and not kv.can_admit(id, cached + need, footprint):
                break
            if not kv.try_admit(id, cached + n, footprint):
                break
            if cached:
                env.use_cached_prefix(id, cached)
            self.waiting.popleft()
            self.running.append(id)
            batch.add(id, n)
            budget -= n

    def on_iteration_end(self, batch, finished, now_s):
        if not finished:
            return
        done = set(finished)
        for id in finished:
            if self.env.role == "prefill":
                self.held.add(id)  # until its transfer lands (release_held_kv)
            else:
                self.kv_cache.release(id)
        self.running = [id for id in self.running if id not in done]

    def idle(self):
        return not self.waiting and not self.running and not self.received and self.receiving == 0


class StaticBatching(Policy):
    """Static batching: a batch is formed, prefilled and decoded together until its last row ends."""

    batch_size = 8
    batch_timeout_s = 0.0      # 0: wait for a full batch (or for every remaining request)
    pad = True                 # pad prompts (and so every row's context) to the batch's longest
    release_per_request = False  # False: a finished row still computes until the batch ends
    max_new_tokens = 0         # output tokens each row reserves; 0: the request's max_tokens

    def attach(self, env):
        self.env = env
        self.kv_cache = ReservedKvCache(env.num_requests, env.kv_capacity_tokens)
        self.waiting = deque()
        self.batch = []
        self.unfinished = 0

    def output_allowance(self, id):
        if self.max_new_tokens > 0:
            return max(self.env.request(id).output_tokens, self.max_new_tokens)
        return self.env.output_limit(id)

    def on_arrival(self, id, now_s):
        env, r = self.env, self.env.request(id)
        if env.max_model_len > 0 and r.prompt_tokens + r.output_tokens > env.max_model_len:
            env.reject(id, f"prompt + output exceed the model's context of {env.max_model_len}: "
                           f"{r.prompt_tokens} + {r.output_tokens} tokens")
            return
        need = r.prompt_tokens + self.output_allowance(id)
        if not self.kv_cache.fits_when_empty(need):
            env.reject(id, f"needs more KV than the whole cache holds ({self.kv_cache.capacity_tokens} tokens): "
                           f"{need} tokens")
            return
        self.waiting.append(id)

    def form_batch(self, now_s, batch):
        env = self.env
        if not self.waiting:
            return False
        if len(self.waiting) < self.batch_size and not env.all_arrived():
            if self.batch_timeout_s <= 0:
                return False  # wait for more arrivals
            deadline = env.request(self.waiting[0]).arrival_s + self.batch_timeout_s
            if now_s < deadline:
                batch.wake_at = deadline
                return False
        # FCFS while every row's reservation, the batch's longest prompt + output, fits.
        chosen = max_prompt = max_output = 0
        for i, id in enumerate(list(self.waiting)[:self.batch_size]):
            p = max(max_prompt, env.request(id).prompt_tokens)
            o = max(max_output, self.output_allowance(id))
            if i > 0 and (i + 1) * (p + o) > self.kv_cache.capacity_tokens:
                break
            max_prompt, max_output, chosen = p, o, i + 1
        self.padded_prompt, self.steps = max_prompt, 0
        self.batch = [self.waiting.popleft() for _ in range(chosen)]
        self.unfinished = chosen
        for id in self.batch:
            if not self.kv_cache.try_admit(id, env.request(id).prompt_tokens, max_prompt + max_output):
                raise RuntimeError("static batch reservation did not fit after sizing")
        return True

    def schedule(self, now_s, batch):
        env = self.env
        if not self.batch:
            if not self.form_batch(now_s, batch):
                return
            # The prefill: every prompt at once, timed as padded to the longest when pad is on.
            for id in self.batch:
                prompt = env.request(id).prompt_tokens
                batch.add_item(id, prompt)
                batch.add_prefill_work(self.padded_prompt if self.pad else prompt)
            return
        self.steps += 1
        for id in self.batch:
            prompt = env.request(id).prompt_tokens
            if env.progress(id).state == "finished":
                batch.bubble_slots += 1
                if not self.release_per_request:
                    # The row still runs a padding token over its padded length.
                    batch.add_decode_work((self.padded_prompt if self.pad else prompt) + self.steps - 1)
                continue
            context = env.computed_tokens(id)
            if not self.kv_cache.try_grow(id, context + 1):
                raise RuntimeError("static batch row outgrew its reservation")
            batch.add_item(id, 1)
            batch.add_decode_work(self.padded_prompt + self.steps - 1 if self.pad else context)

    def on_iteration_end(self, batch, finished, now_s):
        # The batch's KV is one preallocated tensor: its rows are freed together when it ends.
        self.unfinished -= len(finished)
        if self.unfinished == 0:
            for id in self.batch:
                self.kv_cache.release(id)
            self.batch = []

    def idle(self):
        return not self.waiting and not self.batch
