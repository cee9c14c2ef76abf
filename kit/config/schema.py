"""Every knob of the kit, in frozen dataclasses, with the paper's values as defaults.

rStar2-Agent report (arXiv 2508.20722), section cited beside each group: the model (§4.1), data
and curation (§4.2), the sandbox (§3.1), the rollout (§2, §2.1, §3.2), GRPO-RoC and the optimizer
(§2.2, §4.3), cold-start SFT (§4.1), the three RL stages (§4.3), the RoC ablation (§5.3),
evaluation (§5), experiment tracking. :class:`KitConfig` is the whole resolved configuration of
one run. Profiles, overrides and type checks are :mod:`kit.config.loading`; the rules between
keys :mod:`kit.config.checks`; :mod:`kit.config` re-exports every name.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal


@dataclass(frozen=True)
class ModelConfig:
    """The policy model (report §4.1: Qwen3-14B-Base; Table 6: Qwen2.5-32B-Instruct).

    ``name_or_path = "tiny"`` builds a Qwen3ForCausalLM from scratch with the sizes below and a
    locally trained tokenizer; anything else is a local path or a hub id loaded with
    ``from_pretrained`` (the tiny path never downloads).
    """

    name_or_path: str = "Qwen/Qwen3-14B-Base"  # "tiny" (built from scratch) or a local path / hub id
    hidden_size: int = 128  # tiny model only, like the sizes below: width of the residual stream
    num_layers: int = 2  # decoder layers
    num_heads: int = 4  # attention (query) heads
    num_kv_heads: int = 2  # key/value heads (grouped-query attention)
    intermediate_size: int = 384  # MLP hidden width
    max_position_embeddings: int = 2048  # context length, tokens (prompt + response + tool output)
    tokenizer_vocab_size: int = 1024  # tiny tokenizer target; the trained vocab may be smaller
    tie_word_embeddings: bool = True  # share the input embedding and the output head
    dtype: str = "bfloat16"  # tiny: float32 (CPU)
    # n > 0: n threads, fixed (bitwise-repeatable runs); -n: the load-adaptive speed mode, up to n (not repeatable);
    # 0: torch's default (the machine's cores). kit.train.common.set_threads; kit.pipeline.fingerprint stamps the run
    torch_threads: int = 0


@dataclass(frozen=True)
class DataConfig:
    """Data directory, curation filters and the tiny task family (report §4.2)."""

    data_dir: str = ""  # empty: KIT_DATA_DIR, else kit.config.paths' default beside the checkout
    # the RL stages' pool (kit.data.pool): "curated" = <01 run>/data/curated.parquet (both runtimes),
    # "tasks" = the generated task family at each stage's difficulty (local runtime only),
    # "auto" = "tasks" on the local runtime, "curated" on VERL
    source: Literal["auto", "tasks", "curated"] = "auto"
    # report §4.2 training pools (kit.data.pools), read from data_dir
    train_pools: tuple[str, ...] = ("dapo", "openmathreasoning", "project_euler", "aime_history", "gsm8k")
    max_answer_digits: int = 18  # report §4.2 drops answers too large for the verifier (6.5e27330467)
    decontam_ngram: int = 8  # drop training problems sharing an 8-gram with a benchmark
    # benchmarks the 8-gram decontamination checks against
    decontam_benchmarks: tuple[str, ...] = ("aime24", "aime25", "math500", "hmmt25")
    consistency_samples: int = 16  # report §4.2: keep when >= 2 of 16 answers match the label
    consistency_min_matches: int = 2  # of consistency_samples answers, at least this many must match the label
    # tiny task family (kit.data.tasks): generated integer-answer problems that need the tool
    task_train_size: int = 4000  # training problems generated (SFT demos and the RL stages' pools)
    # seed of the tiny task family's train/held-out split; -1: the run's seed. An ablation arm
    # (kit.plan.ablation_arms) sets its run's, so every arm trains on the run's problems
    split_seed: int = -1
    task_heldout_size: int = 128  # held-out tiny tasks (rewards at each stage's end, pass@k curves)
    # tiny task generators drawn from (kit.data.tasks)
    task_families: tuple[str, ...] = ("product", "digit_sum_factorial", "divisor_count", "mod_pow",
                                      "gcd_lcm", "prime_count", "range_sum")
    demo_error_fraction: float = 0.25  # SFT demos whose first tool call fails and is then fixed
    demo_direct_fraction: float = 0.2  # SFT demos that answer without the tool (a guess RL can fix)
    # a tool demo opens with 0 to this many reasoning sentences (uniform) before its first call; 0 = one opener
    # sentence only, the call pinned near the start (ReTool's clean cold start varies it, issue #45)
    demo_preamble_max: int = 0


@dataclass(frozen=True)
class SandboxConfig:
    """The code execution service (report §3.1)."""

    isolation: Literal["bwrap", "none"] = "bwrap"  # "none" only when asked for explicitly
    timeout_s: float = 10.0  # per call: used time (CPU of its processes, or wall minus run-queue wait); the wall-clock backstop is 4x (kit.sandbox.limits)
    cpu_s: float = 10.0  # RLIMIT_CPU per call
    memory_mb: int = 1024  # RLIMIT_AS per call (256 MB hangs scipy imports)
    max_output_chars: int = 8192  # stdout/stderr cap per call, with a visible marker
    max_procs: int = 64  # processes per call (PID namespace / pids cgroup; NPROC ignores root)
    num_workers: int = 0  # warm workers; 0 = one per core
    recycle_after: int = 500  # calls before a worker is replaced
    batch_size: int = 64  # calls per send-worker batch (report §3.1)
    send_workers: int = 32  # report §3.1
    # who runs the pool: "local" processes on this machine, or Ray actors
    backend: Literal["local", "ray"] = "local"
    # modules every worker imports once beyond the standard library, shared copy-on-write by the
    # calls; each costs every call fork + exit time (kit.sandbox.worker.SCIENCE_PREIMPORTS)
    preimport: tuple[str, ...] = ("numpy", "scipy", "scipy.special", "scipy.linalg", "sympy")
    # answer a code call whose code and input already ran in the same rollout batch (one local RL step, one
    # held-out evaluation) with that result, marked cached, where a rerun could not differ
    # (kit.sandbox.step_cache: deterministic code, ok/error well within the limit); never across steps.
    # The feedback every trajectory sees is the same either way; off (the release's behaviour): every call runs
    step_cache: bool = False


@dataclass(frozen=True)
class RolloutConfig:
    """Multi-turn agent rollout (report §2, §2.1)."""

    max_prompt_tokens: int = 2048  # longest prompt a rollout accepts, tokens (a longer one raises)
    # the training budget shared across turns (tool tokens included) and the turn limit: the one
    # source of every RL stage that does not set its own (stages.<s>.max_response_tokens /
    # max_turns override it explicitly); evaluation always uses eval.max_tokens / max_turns
    max_response_tokens: int = 8192
    max_turns: int = 10  # assistant turns per trajectory
    temperature: float = 1.0  # report §4.3: training temperature 1.0
    top_p: float = 1.0  # nucleus sampling during training (1.0 = off)
    max_calls_per_turn: int = 4  # tool calls run per assistant turn; later ones get an error message
    tool_response_max_tokens: int = 1024  # truncation of tool feedback, by tokens, with a marker
    # the Python tool's function name in the chat template (report §2.1)
    tool_name: str = "execute_python_code_with_standard_io"
    batch_size: int = 64  # tiny engine: concurrent rows (continuous batching slots)
    scheduler: Literal["dynamic", "static"] = "dynamic"  # report §3.2 load balancing
    # tiny engine ("dynamic"): the tool latency its schedule assumes, in decode steps; a turn that ends at
    # step c is admitted again at c + this (other rows decode meanwhile), so batches follow a logical clock,
    # never the wall clock (kit.rollout.cohort; issue #41). A slower tool call costs wall time, not a different batch
    tool_delay_steps: int = 8
    # VERL runtime (report §3.2): which balancer routes rollout requests across inference engines.
    # "kv_cache": the kit's KV-cache-aware balancer (kit.sched.KvCacheBalancer through
    # kit.bridge.kv_router: most free KV first, a trajectory stays on the engine holding its prefix
    # unless that engine is overloaded); "verl": VERL 0.9.1's own (sticky + fewest in-flight)
    balancer: Literal["kv_cache", "verl"] = "kv_cache"


#: an advantage estimator whose arms carry another name than the estimator's (VERL's "gae" is PPO's)
ESTIMATOR_FAMILY = {"gae": "ppo"}


@dataclass(frozen=True)
class AlgorithmConfig:
    """GRPO-RoC (report §2.2) and the optimizer (report §4.3).

    Two knobs, one meaning each (issue #43): ``selection`` is which of a group's sampled trajectories the
    update keeps, ``adv_estimator`` how their advantages are computed; an arm's label (:attr:`label`) is
    derived from both, the same on both runtimes.
    """

    # which trajectories of a group the update keeps: "roc" samples 2G (oversample) and keeps G by Resample-on-Correct
    # (report §2.2); "all" samples G and keeps every one (plain GRPO; ReTool's PPO)
    selection: Literal["roc", "all"] = "roc"
    group_size: int = 16  # G, trajectories kept per prompt
    oversample: int = 32  # 2G trajectories sampled per prompt when RoC is on
    prompts_per_step: int = 512  # P
    roc_mode: Literal["sample", "rank"] = "sample"  # report: sample by 1/p_total; release: rank
    roc_use_error_ratio: bool = True  # RoC: score positives by p_err, their tool-error ratio
    roc_use_answer_format: bool = True  # RoC: score positives by p_format, their answer-format violations
    roc_reading: Literal["counters", "text"] = "counters"  # text: the release's decoded-text p_err/p_format
    roc_negative_order: Literal["random", "rollout"] = "random"  # release (PR #50): first k negatives in rollout order
    min_positive: int = 2  # release: min_non_zero_reward_trace_num
    min_negative: int = 2  # release: min_zero_reward_trace_num
    drop_equal_reward_groups: bool = True  # DAPO-style, as released
    # advantage estimator, by VERL's algorithm.adv_estimator name (kit.algo.advantage.ADV_ESTIMATORS;
    # report §2.2.1: "grpo"); an unregistered name fails where a trainer reads it, listing the registered ones
    adv_estimator: str = "grpo"
    adv_eps: float = 1e-6  # epsilon in the group advantage (r - mean) / (std + eps)
    clip_ratio_low: float = 0.2  # Clip-Higher (report §2.2.1)
    clip_ratio_high: float = 0.28  # Clip-Higher upper bound: ratios above 1 + this are clipped
    clip_ratio_c: float = 3.0  # VERL's dual clip on negative advantages (kept on by default)
    # how token losses average into the batch loss (report: token-mean)
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    kl_coef: float = 0.0  # no KL term (report §2.2.1)
    entropy_coef: float = 0.0  # no entropy term
    lr: float = 1e-6  # policy learning rate (AdamW)
    weight_decay: float = 0.01  # AdamW weight decay
    grad_clip: float = 1.0  # gradient norm clip
    warmup_steps: int = 20  # linear learning-rate warm-up, RL steps
    ppo_epochs: int = 1  # passes of the policy update over each step's batch
    # local trainer: padded tokens per micro-batch of the policy update (rows sorted by length; gradients summed).
    # Smaller pads less: 2048 took 0.71 of 16384's CPU s on 48 tiny RL rows (issue #35, benchmarks/step_profile.py),
    # but sums the gradient in another order (weights differ at ~1e-6 after 4 updates), so it is opt-in
    update_micro_tokens: int = 16384
    # PPO's GAE (adv_estimator = "gae", ReTool; VERL's algorithm.gamma / algorithm.lam, defaults 1.0)
    gamma: float = 1.0  # discount over response tokens
    lam: float = 1.0  # GAE lambda (1.0: Monte-Carlo return minus the critic's value)

    @property
    def label(self) -> str:
        """The arm's name in metrics rows, rollout records, run folders and claims: the estimator's family
        (``ppo`` for GAE with a critic, else the estimator's own name: ``grpo``, or e.g. ``rloo`` once
        registered) with ``_roc`` under RoC's selection: ``grpo_roc``, ``grpo``, ``ppo``, ``ppo_roc``. Two
        estimators never share a label (``tests/algo/test_advantage.py`` holds it for every registered one)."""
        return ESTIMATOR_FAMILY.get(self.adv_estimator, self.adv_estimator) + ("_roc" if self.selection == "roc" else "")


@dataclass(frozen=True)
class CriticConfig:
    """PPO's value model (ReTool §3.2; VERL's ``critic.*``), used when ``algorithm.adv_estimator = "gae"``.

    The critic is the policy's architecture with a scalar value head (``Qwen3ForTokenClassification``,
    one label, as VERL builds it), its backbone initialised from the policy the first PPO stage starts
    from (VERL: ``critic.model.path`` = the actor's); it trains on the same rows as the policy.
    """

    lr: float = 1e-5  # critic learning rate (AdamW; VERL's critic.optim.lr default)
    weight_decay: float = 0.01  # AdamW weight decay (VERL's critic.optim.weight_decay)
    cliprange_value: float = 0.5  # value clip around the rollout's values (VERL's critic.cliprange_value)
    ppo_epochs: int = 1  # passes of the critic update over each step's batch (VERL's critic.ppo_epochs)
    grad_clip: float = 1.0  # critic gradient norm clip (VERL's critic.optim.clip_grad)
    # how token value losses average into the batch loss (VERL's critic.loss_agg_mode)
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"


@dataclass(frozen=True)
class SFTConfig:
    """Non-reasoning cold-start SFT (report §4.1)."""

    lr: float = 5e-6  # peak learning rate
    batch_size: int = 128  # rows per optimizer step
    steps: int = 0  # 0: derive from epochs
    epochs: int = 3  # passes over the SFT data when steps = 0
    warmup_ratio: float = 0.04  # share of the steps with a linear warm-up
    schedule: Literal["cosine", "constant"] = "cosine"  # learning-rate schedule after the warm-up
    max_seq_tokens: int = 8192  # longer rows are cut here, tokens
    # the function-calling datasets of the cold-start mix (report §4.1)
    function_calling_sets: tuple[str, ...] = ("glaive", "toolace", "xlam", "reason_tool_use")
    task_demo_fraction: float = 0.8  # share of SFT rows that are task tool-use demonstrations
    min_lr_ratio: float = 0.1  # cosine floor, as a share of lr
    checkpoint_every: int = 100  # steps between checkpoints (0 = only the final policy)


@dataclass(frozen=True)
class StageConfig:
    """One RL stage (report §4.3), named in the profile's ``[[stages]]`` list. A budget or turn
    limit of 0 takes ``rollout``'s (resolved when the :class:`KitConfig` is built, so a loaded
    config holds the number)."""

    name: str = ""  # the stage's run folder and its key in overrides: stages.<name>.steps
    max_response_tokens: int = 0  # 0: rollout.max_response_tokens
    max_turns: int = 0  # 0: rollout.max_turns
    steps: int = 300  # RL steps of this stage
    # "all": the curated pool; "hard": only the problems the previous policy does not solve every time
    problems: Literal["all", "hard"] = "all"
    difficulty: int = 1  # tiny task level for this stage
    reset_optimizer: bool = False  # start the stage with a fresh optimizer (report §4.3, stage 3)
    hard_filter_samples: int = 8  # a "hard" stage: drop problems solved 8/8 by the latest policy
    checkpoint_every: int = 10  # steps between checkpoints (0 = none); resume starts at the last one


#: the recipe's RL stages (report §4.3; 300 + 85 + 125 = 510 steps; budgets 8K (``rollout``'s),
#: 12K, 12K tokens; 10, 10, 15 turns); a profile's ``[[stages]]`` table of the same name sets
#: keys of one of them, a table with a new name adds a stage after them
PAPER_STAGES: tuple[StageConfig, ...] = (
    StageConfig("stage1", 0, 0, 300, "all", 1, False),
    StageConfig("stage2", 12288, 0, 85, "all", 2, False),
    StageConfig("stage3", 12288, 15, 125, "hard", 3, True),
)


@dataclass(frozen=True)
class StagesConfig:
    """The RL stages in training order (each a :class:`StageConfig`): a sequence (``for st in
    cfg.stages``, ``cfg.stages[0]``) with lookup by name (``cfg.stages["stage2"]``)."""

    items: tuple[StageConfig, ...] = PAPER_STAGES

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, key: int | str) -> StageConfig:
        """The stage at index ``key`` or named ``key``.

        Raises:
            KeyError: no stage has the name ``key`` (the message lists the names).
        """
        if isinstance(key, int):
            return self.items[key]
        for st in self.items:
            if st.name == key:
                return st
        raise KeyError(f"unknown stage {key!r}; the profile's stages are {list(self.names)}")

    @property
    def names(self) -> tuple[str, ...]:
        """The stages' names in training order."""
        return tuple(st.name for st in self.items)

    def replace(self, name: str, **changes: Any) -> StagesConfig:
        """A copy with stage ``name``'s fields changed (``dataclasses.replace``).

        Raises:
            KeyError: no stage has that name.
        """
        self[name]  # noqa: B018 - raises the KeyError naming the stages
        return StagesConfig(tuple(dataclasses.replace(st, **changes) if st.name == name else st for st in self.items))


@dataclass(frozen=True)
class AblationConfig:
    """The RoC ablation (report §5.3, Figure 9): GRPO against GRPO-RoC, same seed and steps."""

    steps: int = 300  # RL steps of each arm
    seeds: tuple[int, ...] = (0,)  # one GRPO and one GRPO-RoC arm per seed
    # local engine: arms trained at once in separate processes, each with
    # model.torch_threads // workers threads (a step is latency-bound, so 2 on 2 cores ~1.5x)
    workers: int = 1


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation protocol (report §5: avg@16, temperature 0.6, up to 30K tokens and 30 turns)."""

    # math benchmarks evaluated (read from the data dir)
    benchmarks: tuple[str, ...] = ("aime24", "aime25", "math500", "hmmt25")
    n_samples: int = 16  # samples per problem (avg@n)
    temperature: float = 0.6  # sampling temperature
    top_p: float = 0.95  # nucleus sampling
    max_tokens: int = 30000  # response budget per sample, tokens
    max_turns: int = 30  # assistant turns per sample
    max_problems: int = 0  # 0 = all problems of each benchmark
    gpqa_path: str = ""  # GPQA-Diamond is user-supplied (its licence forbids redistribution)
    bootstrap_samples: int = 1000  # resamples of the bootstrap confidence intervals
    # report §4.2 consistency filter (keep a problem when >= data.consistency_min_matches of
    # data.consistency_samples answers match its label), run in 08_evaluation with the profile's
    # policy on a sample of the curated pool; 0 = the whole pool, as the report (~42K problems x 16
    # rollouts: a cluster job, set a sample size when the policy is served for a quick check)
    consistency_problems: int = 0
    # pass@k boundary curves, base (cold-start SFT) vs RL on the same problems (Yue et al. 2025):
    # problems (0 = all of the source: the first benchmark on paper profiles, held-out tasks on CPU
    # ones) and samples per problem (k = 1..passk_n; the report's n = 16)
    passk_problems: int = 0
    passk_n: int = 16  # samples per problem of the pass@k curves
    # the pass@k crossing on a hard subset (issue #45, claims.yaml passk_crossing_on_hard_problems):
    # the first passk_hard_pool problems of the source are screened with passk_hard_select_n samples of
    # the cold start (a selection draw, seeded apart from the evaluation draw); those it solved at most
    # passk_hard_max_correct times, the first passk_hard_problems of them in source order, are then
    # evaluated with passk_hard_n samples per policy into eval/passk_hard/. 0 problems = off
    passk_hard_problems: int = 0
    passk_hard_pool: int = 128  # problems screened (0 = all of the source)
    passk_hard_select_n: int = 8  # cold-start samples per screened problem
    passk_hard_max_correct: int = 1  # a problem is hard when the cold start solved it at most this often
    passk_hard_n: int = 128  # samples per problem per policy on the hard subset (pass@k for k = 1..n)


@dataclass(frozen=True)
class AgentRConfig:
    """Agent-R (Yuan et al. 2025; issue #34, notebook 11): MCTS revision trajectories and iterative
    self-training from the cold-start policy (:mod:`kit.studies.agent_r`). Checked by ``kit.config.check``."""

    iterations: int = 3  # Phase II iterations (paper: 3), each collecting new trees with the current model
    # good-trajectory threshold alpha per iteration, r(good) >= alpha (paper: 0.5, 0.7, 1.0); later iterations
    # take the last value. Scores are reward x (1 - failed/calls) on the kit's 0/1 tool tasks; the tiny runs' were
    # 0, 1/2, 2/3 or 1 (issue #46), where 0.7 and 1.0 keep the same trajectories: only a 3/4 (one failed call of
    # four) lies between them, so the schedule bites once, between iterations 1 and 2
    alphas: tuple[float, ...] = (0.5, 0.7, 1.0)
    beta: float = 0.5  # bad-trajectory threshold, r(bad) < beta < r(good)
    eta: float = 0.2  # weight of the general (cold-start SFT) data (paper: 0.2): a share eta/(1+eta) of each batch
    c_uct: float = 1.0  # UCT exploration constant, Q(s) + c_uct * sqrt(log N_parent / N(s))
    simulations: int = 8  # rollouts per task per search (the sampling budget both baselines share)
    width: int = 2  # children sampled per expansion (rollouts per round per task)
    tasks: int = 64  # training tasks searched per iteration (a different slice of the train split each time)
    max_pairs: int = 2  # good/bad pairs (revision trajectories) per tree
    # transition point rule on models that cannot critique: "first_failed_call" (fallback "value_drop")
    # or "value_drop" (the first turn whose node value Q falls below beta)
    transition: str = "first_failed_call"
    temperature: float = 1.0  # sampling temperature of the search
    max_response_tokens: int = 0  # search budget, tokens (0 = rollout.max_response_tokens)
    max_turns: int = 0  # search turn limit (0 = rollout.max_turns)
    sft_steps: int = 40  # at most this many SFT steps per iteration (the cold-start trainer's loop, kit.train.sft.fit_rows)
    # passes over an iteration's own rows (the reference trains a few epochs, Xtuner "e3"): steps = ceil(passes x own
    # rows / own rows per batch), at most sft_steps; 0 = always sft_steps (the kit's v1 loop, 21-92 passes a row)
    passes: float = 3.0
    lr: float = 0.0  # SFT peak learning rate (0 = sft.lr); chosen on the null arm (kit.studies.agent_r, issue #46)
    warmup_ratio: float = 0.1  # linear warm-up over this share of an iteration's steps, then `schedule`
    # at least this many warm-up steps (0 = the ratio alone): a fresh AdamW's first steps move every weight by about
    # the lr, whatever its gradient, and a 1-5 step iteration has no warm-up from the ratio (issue #46); an
    # iteration shorter than this ends inside its warm-up, below the peak lr
    warmup_steps: int = 0
    schedule: Literal["cosine", "constant"] = "cosine"  # after the warm-up: cosine decay to 0.1 x lr, or constant
    # where iteration k starts: "previous" (fine-tune iteration k-1's policy on iteration k's rows) or "cold_start"
    # (retrain the cold start on the rows of iterations 1..k, as STaR and ReST-EM do)
    train_from: Literal["previous", "cold_start"] = "previous"
    # the policy every arm starts from: "run" (notebook 02's: a quarter of its tool demos fail and are then fixed,
    # so recovery is taught before Agent-R runs) or "clean" (a cold start trained in agent_r/cold_start/ with the
    # run's recipe and seed and data.demo_error_fraction = 0: recovery is left to be learned, the paper's premise;
    # the tiny model only; issue #46 item 4). Its demos are then the general data as well
    cold_start: Literal["run", "clean"] = "run"
    train_signal: bool = True  # loss on the revision signal (the reference's path_collection.py trains that turn)
    batch_size: int = 0  # SFT rows per step (0 = sft.batch_size)
    eval_problems: int = 0  # held-out tasks every policy is sampled on (0 = all of data.task_heldout_size)
    eval_samples: int = 4  # samples per held-out task and policy, at T = 1 (the policies' own distribution)
    # forced-error probes (kit.studies.agent_r.probes): continuations per held-out task and policy of the same
    # failing call in every policy's context, at T = 1; 0 = none
    probe_samples: int = 0


@dataclass(frozen=True)
class RetoolConfig:
    """ReTool (Feng et al. 2025; notebook 10, :mod:`kit.studies.retool`): its emergence arm (issue #45). Beside
    the PPO arms from the run's cold start, notebook 10 trains a *clean* cold start (the same recipe with
    ``data.demo_error_fraction = 0``, no demo whose call fails and is then fixed, and ``data.demo_preamble_max =
    clean_preamble_max``, so the first call is not pinned) and PPO from it, then samples both on the same held-out
    tasks: whether self-correction and an earlier first call *emerge* under RL, as ReTool reports."""

    emergence_seeds: int = 1  # PPO seeds trained from the clean cold start (the ReTool arms' first); 0 = no emergence arm
    clean_preamble_max: int = 3  # the clean cold start's data.demo_preamble_max (0-6 reasoning sentences before a call)
    clean_sft_steps: int = 0  # the clean cold start's sft.steps (0 = the run's: the two cold starts differ in their demos only)
    eval_problems: int = 0  # held-out tasks both policies are sampled on (0 = all of data.task_heldout_size)
    eval_samples: int = 4  # samples per held-out task and policy, at T = 1 (the policies' own distribution)


@dataclass(frozen=True)
class BStarConfig:
    """B-STaR (Zeng et al., ICLR 2025; issue #47, notebook 12, :mod:`kit.studies.bstar`): self-training that
    retunes the sampling temperature and the reward threshold every iteration to the pair with the highest
    balance score, against the same loop at a fixed pair (the paper's online RFT).

    The reward a sample is selected by is its *vote share*, the share of its query's samples with the same final
    answer (self-consistency): the kit's verifier is 0/1, under which every threshold below 1 selects the same
    samples and the threshold could not be tuned. Correctness (the verifier, against the gold answer) is only
    read to score the selection (the balance score's exploitation factor is its precision) and to evaluate."""

    iterations: int = 3  # self-training iterations, each on new training tasks with the current policy
    tasks: int = 32  # training tasks sampled per iteration and arm (the next slice of the training split)
    samples: int = 8  # samples per task, in the sweep and in the iteration's pool
    dev_problems: int = 16  # the dev subset the sweep samples (the training split's last tasks, never trained on)
    temperatures: tuple[float, ...] = (0.6, 0.8, 1.0, 1.2)  # swept (the authors': 0.50-1.20 by 0.05)
    thresholds: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75)  # swept vote-share thresholds, selected when strictly above
    n_star: int = 8  # correct selected samples at which the exploration factor saturates (the authors' 8)
    # join the gold answer to every pool as a correct sample with score 1, as the authors' code does: every query then
    # counts in the balance score (without it a query that selects nothing drops out of the mean, which favours the
    # strictest threshold); the reference scores the pool only, it is never trained on
    reference: bool = True
    fixed_temperature: float = 1.0  # the fixed arm's sampling temperature (online RFT's fixed configuration)
    fixed_threshold: float = 0.5  # the fixed arm's vote-share threshold: above 1/2, the majority answer's samples
    lr: float = 0.0  # the continuation fine-tune's peak lr (0 = sft.lr; kit.train.sft.fit_rows, fresh AdamW each iteration)
    warmup_steps: int = 0  # warm-up floor (steps); cosine decay to sft.min_lr_ratio of lr after it
    # optimizer steps per iteration: passes over the selected rows, at most sft_steps; 0 = sft_steps every iteration
    # (the paper's fixed steps per iteration: both arms train as long whatever their selected sets' sizes)
    passes: float = 0.0
    sft_steps: int = 30  # optimizer steps per iteration (bstar.passes = 0), else the most an iteration takes
    batch_size: int = 0  # rows per step (0 = sft.batch_size)
    eval_problems: int = 64  # held-out tasks every policy is sampled on after every iteration (0 = all)
    eval_samples: int = 4  # samples per held-out task at T = 1: accuracy, pass@eval_samples, distinct correct


#: Experiment trackers the kit passes to VERL's ``verl.utils.tracking.Tracking`` (VERL 0.9.1 also knows
#: swanlab, clearml, vemlp_wandb and rl_insight; they are left out because they log to a server by
#: default). ``tests/bridge/test_tracking.py`` checks each name against VERL's ``supported_backend``.
LogBackend = Literal["console", "file", "tensorboard", "wandb", "mlflow", "trackio"]
LOG_BACKENDS: tuple[str, ...] = typing.get_args(LogBackend)


@dataclass(frozen=True)
class LoggingConfig:
    """Experiment tracking through VERL's tracker, on both runtimes (``kit.train.tracking``).

    ``backends`` becomes VERL's ``trainer.logger`` on the VERL runtime; the local trainer logs
    the same metric names through the same tracker class. Every backend writes under the run
    folder (``run_dir/tracking/``) and nothing reaches the network unless asked for here:
    wandb runs with ``WANDB_MODE=wandb_mode`` (offline by default), mlflow uses a local file store
    unless ``mlflow_tracking_uri`` names a server. ``metrics.jsonl`` is written whatever this says.
    """

    # VERL tracker backends (trainer.logger): console, file, tensorboard, wandb, mlflow, trackio
    backends: tuple[LogBackend, ...] = ("console", "file", "tensorboard")
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"  # "online" syncs to your W&B account
    mlflow_tracking_uri: str = ""  # empty: file:<run_dir>/tracking/mlruns; a server URI sends metrics there
    # rollout records (kit.records, the explorer kit.explore): every records_every-th RL step (steps 1,
    # 1 + every, ...) writes its trajectories to <run_dir>/rollouts/; 0 = none
    records_every: int = 1
    # groups (prompts) recorded per recorded step, all 2G trajectories of each, the step's first ones;
    # 0 = every prompt of the step (the tiny profiles; paper profiles record a sample)
    records_max_prompts: int = 4


@dataclass(frozen=True)
class KitConfig:
    """The whole resolved configuration of one run; :func:`load` and :func:`from_json` check the rules
    between its keys (:func:`kit.config.check`)."""

    profile: str = "paper-14b"  # the profile file this config was resolved from (kit/profiles/<name>.toml)
    run_dir: str = ""  # where a run writes config.json, checkpoints and metrics
    seed: int = 0  # the run's seed (sampling, initialisation, data order)
    device: str = "cuda"  # "cpu" or "cuda"
    # who trains (kit.runtime): "local" = the CPU engine of kit.train in this process (tiny,
    # smoke); "verl" = VERL through kit.bridge (paper profiles). The one switch between them.
    runtime: Literal["local", "verl"] = "verl"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    stages: StagesConfig = field(default_factory=StagesConfig)
    ablation: AblationConfig = field(default_factory=AblationConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    agent_r: AgentRConfig = field(default_factory=AgentRConfig)
    retool: RetoolConfig = field(default_factory=RetoolConfig)
    bstar: BStarConfig = field(default_factory=BStarConfig)

    def __post_init__(self) -> None:
        # stages without their own budget or turn limit take rollout's (the one source)
        r = self.rollout
        resolved = tuple(dataclasses.replace(st, max_response_tokens=st.max_response_tokens or r.max_response_tokens,
                                             max_turns=st.max_turns or r.max_turns) for st in self.stages)
        if resolved != self.stages.items:
            object.__setattr__(self, "stages", StagesConfig(resolved))

    def tracker_name(self, stage: str) -> str:
        """The run's name in the tracker (wandb, tensorboard, VERL's ``trainer.experiment_name``), the same
        on both runtimes: ``<profile>[-<where>]-<stage>-<label>-seed<seed>`` for an RL stage and
        ``<profile>[-<where>]-sft-seed<seed>`` for the cold start. ``<where>`` is the run folder's place in
        the pipeline run, the folders of :attr:`run_dir` after ``<profile>/`` less the last
        (``reports/tiny/main/stage1`` -> ``main``, ``reports/tiny/main/ablation/grpo_seed3`` ->
        ``main-ablation``), so the main chain's stage 1, an ablation arm of the same label and seed, and two
        pipeline runs never share a tracker run (issue #43); empty outside a pipeline run folder
        (``tiny-stage1-grpo_roc-seed3``)."""
        parts = Path(self.run_dir).parts if self.run_dir else ()
        inner = parts[len(parts) - parts[::-1].index(self.profile):-1] if self.profile in parts else ()
        head = "-".join((self.profile, *inner))
        if stage == "sft":
            return f"{head}-sft-seed{self.seed}"
        return f"{head}-{stage}-{self.algorithm.label}-seed{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (tuples become lists; ``stages`` a list of tables), as written to ``config.json``."""
        out = json.loads(json.dumps(dataclasses.asdict(self)))
        out["stages"] = out["stages"]["items"]
        return out
