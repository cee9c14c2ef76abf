"""A CPU rollout backend behind VERL 0.9.1's rollout-replica interface (``rollout.name=kit_cpu``).

VERL's agent-loop rollout talks to inference servers through three classes; this module gives
each a CPU version that serves with the kit's own continuous-batching engine
(:class:`kit.rollout.engine.ContinuousBatchingEngine`: concurrent trajectories share decode steps,
a trajectory's next turn reuses its KV prefix), so generation is batched as SGLang batches it on
a GPU (rStar2-Agent §3.2):

* :class:`KitCpuServer`: the Ray actor the agent loops call (``generate(prompt_ids,
  sampling_params, request_id, ...) -> TokenOutput`` with per-token log-probs and
  ``extra_fields["global_steps"]``, the weight version it sampled with). VERL's control calls
  (sleep, wake-up, KV-cache release, abort, profile) are no-ops: the model stays in host memory.
* :class:`KitCpuReplica`: the ``RolloutReplica`` VERL's ``LLMServerManager`` builds (registered
  with VERL's public ``RolloutReplicaRegistry``); it launches one server per replica.
* :class:`KitCpuRolloutAdapter`: the ``BaseRollout`` in each trainer worker (hybrid engine).
  After every optimizer step VERL's "naive" weight sync calls ``update_weights`` with the FSDP2
  actor's parameters; the adapter materialises them (``DTensor.full_tensor()``) and the first
  rank of the replica sends them to its server, which loads them and drops its prefix cache.
  It is found through VERL's *private* ``_ROLLOUT_REGISTRY`` (:mod:`kit.bridge.verl_cpu.patches`).

Sampling: ``temperature``, ``top_p``, ``max_new_tokens`` (or VERL's ``max_tokens``; default the
rollout's ``response_length``) and ``stop_token_ids``; ``top_k`` and ``repetition_penalty`` are
ignored (the kit recipe sets neither). Log-probs are ``log softmax(logits / T)`` of the sampled
ids, what VERL's actor recomputes (their correlation is logged as
``training/rollout_actor_probs_pearson_corr``).

What it does not do: tensor/pipeline parallelism (one process per replica), multimodal input,
partial-rollout resumption (``abort_all_requests`` does not interrupt a running decode), IPC or
bucketed weight transfer (the whole state dict goes through Ray's object store: fine for the
tiny model, not for a 14B one).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from typing import Any

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

ROLLOUT_NAME = "kit_cpu"
#: torch threads of each rollout server (default :data:`DEFAULT_SERVER_THREADS`)
THREADS_ENV = "KIT_CPU_ROLLOUT_THREADS"
#: One thread: a decode step of the tiny model is a chain of small ops (hidden size 128) that a
#: second OpenMP thread slows down whenever another process holds the other core (fork/join waits
#: on a preempted thread), and during generation the agent loop, sandbox and reward workers want
#: that core. Measured on this 2-core machine under load ~3 (16 requests x 200 tokens of the tiny
#: SFT policy, kit.rollout.engine): 2.4 ms per decode step with 1 thread, 5.3 ms with 2.
DEFAULT_SERVER_THREADS = 1
#: when set, every weight update appends ``{"time", "global_steps", "tensors", "seconds", "digest"}`` and the server's
#: running totals (``requests``, sampled ``tokens``, ``generate_s`` summed over requests, ``engine_busy_s``
#: inside model forwards, decode ``engine_steps``) to this file
UPDATE_LOG_ENV = "KIT_CPU_ROLLOUT_UPDATE_LOG"


def server_name(replica_rank: int, suffix: str = "") -> str:
    """Ray actor name of replica ``replica_rank``'s server (the adapter looks it up by name)."""
    return f"kit_cpu_server_{replica_rank}{suffix}"


def _cfg(obj: Any, key: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    getter = getattr(obj, "get", None)
    if callable(getter):
        try:
            return getter(key, default)
        except Exception:  # noqa: BLE001 - dataclass configs with a different get()
            pass
    return getattr(obj, key, default)


class KitCpuServer:
    """One CPU inference server (a Ray actor; see the module docstring).

    Args:
        model_path: HF folder of the policy (``actor_rollout_ref.model.path``).
        slots: rows decoded together (``rollout.max_num_seqs``, capped at 64).
        response_length: default ``max_new_tokens`` (tokens).
        seed: base sampling seed of the engine.
        threads: torch CPU threads for the forward passes (the replica passes ``KIT_CPU_ROLLOUT_THREADS``,
            default :data:`DEFAULT_SERVER_THREADS`).
    """

    def __init__(self, model_path: str, slots: int = 64, response_length: int = 256, seed: int = 0,
                 threads: int | None = None):
        from kit.models import load_policy
        from kit.rollout.engine import ContinuousBatchingEngine

        torch.set_num_threads(max(1, int(threads or DEFAULT_SERVER_THREADS)))
        self.model, self.tokenizer = load_policy(model_path)
        self.model.eval()
        self.engine = ContinuousBatchingEngine(self.model, self.tokenizer, slots=slots, seed=seed)
        self.response_length = int(response_length)
        self.global_steps: int = 0
        self.counters = {"requests": 0, "tokens": 0, "weight_updates": 0, "generate_s": 0.0, "update_s": 0.0}
        self._updating = asyncio.Lock()

    async def ready(self) -> dict[str, Any]:
        """Model facts (parameter count, slots); awaited by the replica at launch."""
        return {"params": sum(p.numel() for p in self.model.parameters()), "slots": self.engine.slots}

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Any = None, video_data: Any = None, **kwargs: Any) -> TokenOutput:
        """Sample one turn for ``prompt_ids`` (token ids); returns VERL's ``TokenOutput``.

        Raises:
            ValueError: multimodal input, or a prompt that fills the model's context.
        """
        if image_data or video_data:
            raise ValueError("kit_cpu rollout: multimodal input is not supported")
        sp = dict(sampling_params or {})
        max_new = sp.get("max_new_tokens", sp.get("max_tokens"))
        max_new = self.response_length if max_new is None else int(max_new)
        stop = [int(t) for t in (sp.get("stop_token_ids") or [])]
        eos = self.tokenizer.eos_token_id
        if eos is not None and eos not in stop:
            stop.append(int(eos))
        async with self._updating:  # never sample while weights are being replaced
            pass
        t0 = time.perf_counter()
        gen = await self.engine.generate(list(prompt_ids), max_new, float(sp.get("temperature", 1.0)),
                                         float(sp.get("top_p", 1.0)), stop)
        self.counters["requests"] += 1
        self.counters["tokens"] += len(gen.token_ids)
        self.counters["generate_s"] += time.perf_counter() - t0
        return TokenOutput(token_ids=list(gen.token_ids), log_probs=list(gen.logprobs) if gen.logprobs is not None else None,
                           stop_reason="completed", extra_fields={"global_steps": self.global_steps})

    async def load_weights(self, state: dict[str, torch.Tensor], global_steps: int | None = None) -> dict[str, Any]:
        """Replace the policy weights (names as the HF model's ``state_dict``).

        Returns:
            ``{"loaded": n_tensors, "seconds": s}``.
        Raises:
            KeyError: names the model does not have, or model weights missing from ``state``
                (tied embeddings excepted).
        """
        t0 = time.perf_counter()
        async with self._updating:
            missing, unexpected = self.model.load_state_dict(state, strict=False)
            tied = {k for k in missing if "lm_head" in k and getattr(self.model.config, "tie_word_embeddings", False)}
            if unexpected or set(missing) - tied:
                raise KeyError(f"kit_cpu rollout: weight names do not match the model: unexpected "
                               f"{sorted(unexpected)[:5]}, missing {sorted(set(missing) - tied)[:5]}")
            self.engine.clear_prefix_cache()  # KV computed with the old weights
            if global_steps is not None:
                self.global_steps = int(global_steps)
        dt = time.perf_counter() - t0
        self.counters["weight_updates"] += 1
        self.counters["update_s"] += dt
        log = os.environ.get(UPDATE_LOG_ENV)
        if log:  # one line per update: the run's record that the server follows the actor
            import json

            with open(log, "a") as fh:
                fh.write(json.dumps({"time": time.time(), "global_steps": self.global_steps, "tensors": len(state), "seconds": dt,
                                     "digest": await self.state_dict_digest(), "requests": self.counters["requests"],
                                     "tokens": self.counters["tokens"], "generate_s": self.counters["generate_s"],
                                     "engine_busy_s": self.engine.stats["busy_s"],
                                     "engine_steps": self.engine.stats["steps"]}) + "\n")
        return {"loaded": len(state), "seconds": dt}

    async def kv_load(self) -> dict[str, int]:
        """KV report for the kit's balancer (``kit.bridge.kv_router``, report §3.2), in tokens:
        ``used_tokens`` = context + sampled tokens of the engine's running rows plus the prompts
        of its queued requests; ``capacity_tokens`` = slots x the model's context (what the
        engine's rows can hold at most). Read from the engine's state between decode steps."""
        eng = self.engine
        rows = getattr(eng, "_rows", None)  # the engine's running rows and queue (kit.rollout.engine)
        running = sum(len(r.prompt_ids) + len(r.out) for r in (rows.reqs if rows is not None else ()) if not r.done)
        queued = sum(len(r.prompt_ids) for r in getattr(eng, "_pending", ()))
        cap = int(eng.slots) * int(eng.max_context)
        return {"used_tokens": min(running + queued, cap), "capacity_tokens": cap}

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = int(global_steps)

    async def stats(self) -> dict[str, Any]:
        """Request/token counters, seconds generating and loading weights, the engine's counters."""
        return {**self.counters, "global_steps": self.global_steps, "engine": dict(self.engine.stats)}

    async def state_dict_digest(self) -> float:
        """Sum of all weights (a cheap fingerprint tests use to see an update land)."""
        return float(sum(p.double().sum() for p in self.model.state_dict().values()))

    # VERL's control calls: nothing to release or resume on a CPU server
    async def wake_up(self) -> None: ...
    async def sleep(self) -> None: ...
    async def clear_kv_cache(self) -> None:
        self.engine.clear_prefix_cache()
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def abort_all_requests(self, reject_request: bool = False) -> None: ...
    async def resume_generation(self) -> None: ...
    async def start_profile(self, **kwargs: Any) -> None: ...
    async def stop_profile(self) -> None: ...


class KitCpuReplica(RolloutReplica):
    """VERL rollout replica that launches one :class:`KitCpuServer` (``rollout.name=kit_cpu``)."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        name = server_name(self.replica_rank, self.name_suffix)
        threads = max(1, int(os.environ.get(THREADS_ENV) or DEFAULT_SERVER_THREADS))
        actor = ray.remote(KitCpuServer).options(
            name=name, num_cpus=0, max_concurrency=self.max_concurrency,
            runtime_env={"env_vars": {"OMP_NUM_THREADS": str(threads)}},
        ).remote(str(_cfg(self.model_config, "path")), slots=min(64, int(self.config.max_num_seqs or 64)),
                 response_length=int(self.config.response_length), seed=int(_cfg(self.config, "seed", 0) or 0),
                 threads=threads)
        await actor.ready.remote()
        self.servers = [actor]
        self._server_handle = actor
        self._server_address = name


class KitCpuRolloutAdapter(BaseRollout):
    """The trainer worker's side of ``kit_cpu`` (see the module docstring)."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1, **kwargs: Any):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.is_sender = rank % world == 0
        self._server: Any = None

    def _handle(self) -> Any:
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], wire_format: str = "named_tensors",
                             global_steps: int | None = None, **kwargs: Any) -> None:
        """Send the actor's weights to this replica's server (every rank iterates: FSDP2 gathers
        are collective; only the replica's first rank sends).

        Raises:
            NotImplementedError: a ``wire_format`` other than ``named_tensors`` or LoRA adapters.
        """
        if wire_format != "named_tensors":
            raise NotImplementedError(f"kit_cpu rollout: wire_format {wire_format!r} (only named_tensors)")
        if kwargs.get("peft_config") is not None:
            raise NotImplementedError("kit_cpu rollout: LoRA adapters are not supported")
        state: dict[str, torch.Tensor] = {}
        for name, tensor in weights:
            if hasattr(tensor, "full_tensor"):  # FSDP2 DTensor shard -> the whole parameter
                tensor = tensor.full_tensor()
            if self.is_sender:
                state[name] = tensor.detach().to("cpu", copy=True)
        if self.is_sender:
            await self._handle().load_weights.remote(state, global_steps)
