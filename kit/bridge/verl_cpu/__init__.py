r"""VERL 0.9.1's own trainer on a CPU-only machine (issue #15).

Pieces, each in its module:

* :mod:`.platform`: VERL platform ``cpu`` (device ``cpu``, backend ``gloo``, fake Ray GPUs,
  a device module whose cache/memory/RNG calls work on a CPU);
* :mod:`.plugin`: the ``verl.plugins`` entry point that registers it in every VERL process;
* :mod:`.rollout`: a CPU rollout backend (``rollout.name=kit_cpu``) serving with the kit's
  continuous-batching engine and taking the FSDP2 actor's weights after every step;
* :mod:`.patches`: the three patches to VERL internals, named and checked (the third lets PPO's
  critic load with ``sdpa`` attention);
* :mod:`.ray_local`: a loopback-only Ray head started and stopped by the kit;
* :mod:`.runner`: the checks, the Hydra overrides, the session (``run_session``, ``run_cpu``);
* :mod:`.session`: what runs inside the namespace (Ray start, launches, watcher, Ray stop);
* :mod:`.tiny_run`: the tiny SFT policy and two-step config of the tests and the benchmark.

Nothing here is imported on a GPU run; selecting it on a machine with CUDA is refused
(:func:`.runner.require_cpu_machine`).

Choosing it. VERL on a CPU is chosen on purpose only: ``KIT_VERL_DEVICE=cpu``. A CPU-only machine asked
for a paper profile without it, or a GPU machine with it, stops with an error saying what to set
(``kit reproduce`` checks this before its first notebook, exit 2); with ``runtime=local`` the variable
is ignored, and said so. Ray runs inside a private network namespace that has only loopback (and a
private PID namespace), started by the kit and stopped afterwards; its start is retried (4 tries, then
one error saying what to do), because at load ~10 Ray 2.60's raylet aborts when its dashboard agent
takes more than ~16 s to start.

What runs. ``make test`` (``make test-verl`` alone, marker ``verl_cpu``) runs two GRPO-RoC steps of a
tiny SFT policy through the route the notebooks take (``kit.runtime.verl.run_stage`` ->
``kit.bridge.stages`` -> VERL -> ``verl.model_merger`` -> ``metrics.jsonl``), and the whole ``smoke``
notebook chain 00-20 through VERL's trainer as one command inside one kit session
(``kit.pipeline.run_in_verl_cpu_session``; log and ``session.json`` in ``<run>/verl_session/``; every
VERL stage of 03-06 uses its one Ray head). 02 takes the linked-checkpoint route; 03-05 chain through
VERL (stage 2 resumes stage 1's model and optimizer, stage 3 loads stage 2's weights with a fresh
optimizer and trains on ``hard.parquet``, built from the stage-2 policy the kit serves on loopback with
:mod:`kit.rollout.serve`); 06 trains both arms; each is merged into ``<stage>/policy`` with a
``metrics.jsonl``, and 07-11 and 20 analyse, evaluate and report on those policies. The test
(``tests/bridge/test_verl_cpu_chain.py``) uses one step per stage and arm on a 2-problem pool
(:data:`.tiny_run.SMOKE_CHAIN`); the smoke profile's own sizes are not meant for VERL on CPU (its stage 3
would sample every curated problem of all five pools 8 times). To run it by hand::

    python -m kit reproduce --profile smoke --run sft --until 02     # local: reports/smoke/sft/sft/policy
    SETS=$(python -c 'import json; from kit.bridge.verl_cpu.tiny_run import SMOKE_CHAIN as S
    print(" ".join("--set=%s=%s" % (k, json.dumps(v).replace(" ", "")) for k, v in S.items()))')
    KIT_VERL_DEVICE=cpu KIT_SFT_CHECKPOINT=reports/smoke/sft/sft/policy \
      python -m kit reproduce --profile smoke --run verl --set runtime=verl $SETS

PPO (``algorithm.adv_estimator = "gae"``, issue #33) runs VERL's own critic worker beside the actor: the
same CPU settings (:data:`.runner.CPU_CRITIC`), its value head loaded with ``sdpa`` (patch 3), its
checkpoint ``global_step_<N>/critic/`` merged into ``<run_dir>/critic/`` by VERL's merger
(:func:`kit.bridge.stages.run_stage`).

VERL rows carry a subset of the local ``metrics.jsonl`` keys plus VERL's ``turns_mean``: no
``time_verify_s`` (graded inside generation) or ``bstar_balance``; ``tool_calls_per_traj`` and
``time_tool_s`` on both algorithms (the kit's replay buffer, :mod:`kit.bridge.sampler`);
``tool_error_ratio_correct_*``, ``p_format_mean`` and ``kept`` only from the RoC hook.

Why a VERL step's generation was a multiple of 2 s. VERL 0.9.1's sync replay buffer waits for finished
trajectories by polling every 2.0 s (``verl/trainer/ppo/v1/replay_buffer.py``, ``poll_interval=2.0``, not
in the config), so ``timing_s/gen`` came in steps of 2 s. VERL builds the kit's replay buffers
(``kit.bridge.roc_hook.RocReplayBuffer``, and for GRPO ``kit.bridge.sampler.KitReplayBuffer``) with the
poll interval they pass on, so the CPU runtime sets ``sampler_kwargs.poll_interval_s=0.1``
(:data:`.runner.CPU_POLL_INTERVAL_S`) without a patch. The ``kit_cpu`` server decodes with one torch
thread (``KIT_CPU_ROLLOUT_THREADS`` overrides): a second OpenMP thread doubled the decode step on two
shared cores. Measured figures (``benchmarks/verl_cpu_step.py``) are in ``benchmarks/README.md``; each
launch spends ~67 s starting VERL (imports in every Ray worker, model, TransferQueue) before its first step.

Not run through VERL on CPU yet: VERL's SFT trainer. Checked against VERL's own code without running
it: every PPO override against 0.9.1's composed config (golden files in ``tests/bridge/golden/``), the
SFT overrides, the merge command against the merger's argument parser. No GPU has run any of it;
``scripts/gpu_smoke.sh`` is the first thing to run on a GPU machine.
"""
