"""batchsim.Policy: the base class of a scheduler written in Python.

The simulation calls a policy exactly as it calls a C++ one (sim/policy.h; policies/README.md,
"The interface and its call order"), for each replica:

1. ``attach(env)`` once, before anything arrives. Keep ``env`` (a :class:`batchsim._core.PolicyEnv`)
   and create the KV cache here: ``self.kv_cache = batchsim.PagedKvCache(env.num_requests,
   num_blocks, block_size)``, sized from ``env.kv_capacity_tokens`` (or ``env.num_gpu_blocks``
   when the run sets num_gpu_blocks). The simulation reads KV use from ``self.kv_cache``.
2. ``on_arrival(id, now_s)`` for every request the router sends to this replica, in arrival
   order: queue it, or reject it for good with ``env.reject(id, reason)`` (or the continuous
   policies' checks, ``env.reject_over_context(id)`` and ``env.reject_over_cache(kv, id, tokens)``).
3. ``schedule(now_s, batch)`` whenever the replica is free: ``batch.add(id, new_tokens)`` for
   each request that runs (a whole or partial prefill, or 1 token for a decode). Growing a
   running request's KV first (``self.kv_cache.try_grow``) and preempting when it fails
   (``env.preempt(id, keeps_kv=False)``: recompute) is the policy's job, as in C++. A policy
   that computes more than its requests' own tokens (padding, finished rows of a static batch)
   adds items untimed (``batch.add_item``) and times the work itself
   (``batch.add_prefill_work``, ``batch.add_decode_work``, ``batch.bubble_slots``); one that
   waits on a timeout sets ``batch.wake_at``. With prefix caching (a cache from
   ``env.prefix_caching_kv_cache``), admission shares what ``kv_cache.cached_prefix_tokens``
   finds and reports it with ``env.use_cached_prefix(id, tokens)``. An empty batch while
   requests wait, with no ``wake_at``, is a bug the simulation stops on.
4. ``on_iteration_end(batch, finished, now_s)`` after the iteration: ``finished`` lists the
   requests that produced their last token; release their KV and forget them.

and ``idle()`` at any time: True when the policy holds no waiting or running request.
Optionally ``profile_step(max_model_len)``, before ``attach``: the policy's largest step, which
sizes the KV pool as the engine's profile run would (see its docstring).

What a policy reads: ``env.request(id)`` (arrival_s, prompt_tokens, output_tokens, max_tokens,
priority), ``env.progress(id)`` (state, computed_tokens, generated_tokens, preemptions: a copy,
taken when called), ``env.known_tokens(id)`` (prompt + generated), ``env.computed_tokens(id)``,
``env.output_limit(id)``, ``env.max_model_len``, ``env.all_arrived()``.

A Python policy makes several calls into Python per iteration, so it is slower per iteration
than a C++ one (python/README.md gives the measured figures); the rest of the simulation (cost
model, event loop, metrics) is the same C++ code. Runs with a Python policy cannot be
fast-forwarded over decode runs (Policy::repeat_decode_step), which the results do not depend on.
"""


class Policy:
    """Subclass this and override on_arrival, schedule, on_iteration_end and idle."""

    #: The KV-cache manager the policy uses; set it in attach().
    kv_cache = None

    def attach(self, env):
        """Called once before the run; the default keeps `env` as self.env."""
        self.env = env

    def on_arrival(self, id, now_s):
        raise NotImplementedError(f"{type(self).__name__}.on_arrival")

    def schedule(self, now_s, batch):
        raise NotImplementedError(f"{type(self).__name__}.schedule")

    def on_iteration_end(self, batch, finished, now_s):
        raise NotImplementedError(f"{type(self).__name__}.on_iteration_end")

    def idle(self):
        raise NotImplementedError(f"{type(self).__name__}.idle")

    def unsupported_role_reason(self, role):
        """Why this policy cannot serve a disaggregated pool (`role`: "prefill" or "decode"), or "".

        A prefill replica sees each request with one output token; once it finishes, its KV
        stays held until ``release_held_kv(id)``. A decode replica gets requests whose prompt
        was computed elsewhere (``env.computed_tokens(id) > 0``); it allocates their KV, calls
        ``env.start_kv_transfer(id, tokens)``, and schedules them only after
        ``on_kv_received(id, now_s)``. ``env.role`` says which pool a replica is in. The default
        serves no pool; a subclass that does overrides this and the two calls
        (``batchsim.examples.FcfsContinuous`` does).
        """
        return (f"{type(self).__name__} serves colocated runs only: override unsupported_role_reason, "
                f"release_held_kv and on_kv_received to serve a {role} pool")

    def release_held_kv(self, id):
        raise NotImplementedError(f"{type(self).__name__}.release_held_kv")

    def on_kv_received(self, id, now_s):
        raise NotImplementedError(f"{type(self).__name__}.on_kv_received")

    def profile_step(self, max_model_len):
        """The largest step this policy runs, as ``(tokens, sequences)``, or None.

        Called before ``attach``, once per run (per pool). Engines measure the peak memory of
        such a step before they size the KV cache (vLLM's profile run of max_num_batched_tokens over
        min(max_num_batched_tokens, max_num_seqs) sampled sequences), so a policy that declares
        its own gets the pool its engine would have, as the C++ continuous policies do. None, the
        default, sizes the pool after a step of 8192 tokens in 256 sequences.
        """
        return None
