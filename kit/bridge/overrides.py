"""The one map from kit settings to VERL 0.9.1 Hydra overrides (``python -m verl.trainer.main_ppo``).

``to_hydra_overrides(config, stage)`` returns ``key=value`` strings for the report's recipe
(rStar2-Agent §4.3; values from ``kit.config`` and the profile): SGLang async multi-turn rollout
through the kit's agent loop (``kit.bridge.agent_loop``, registered as ``rstar2_kit``),
``rollout.n = G`` with 2G oversampling and RoC in the v1 trainer's custom sampler
(``kit.bridge.roc_hook``; why there is written in that module; plain GRPO gets its base class,
``kit.bridge.sampler.KitReplayBuffer``, so both log the step's tool metrics), the kit reward function
(``kit.bridge.reward_fn``), GRPO advantage, Clip-Higher 0.2/0.28 with VERL's dual clip c = 3,
token-mean loss, no KL and no entropy term, lr 1e-6, one optimizer step per RL step (with
``algorithm.adv_estimator = "gae"``, ReTool's PPO: VERL's own GAE and critic worker, ``critic.*`` from
the kit's ``[critic]``, the critic initialised from the same model as the actor, ``rollout.n = G`` and
no RoC unless ``algorithm.selection = "roc"``; :func:`kit.algo.sampling_plan`), and the
stage's response length, turn limit, step count and checkpoint resumption, and (``rollout.balancer =
"kv_cache"``, report §3.2) the kit's KV-cache-aware request balancer as VERL's router
(``rollout.router_config_path``, the YAML ``kit.bridge.launch.write_router_config`` writes):

* stage1 starts from ``model_path`` (the SFT checkpoint) and saves under ``run_dir/checkpoints``;
* stage2 resumes model and optimizer from ``global_step_<stage1 steps>``;
* stage3 resumes only the model weights from the end of stage 2 (``reset_optimizer``) and trains
  on the hard subset (its own ``train_files``).

When each stage has its own run directory (the notebooks), ``resume_from`` names the previous
stage's checkpoint there and ``start_step`` its step (``kit.bridge.stages``).

``trainer.total_training_steps`` is cumulative (300, 385, 510 for the paper) because VERL
resumes its step counter from the checkpoint folder name. Every override is checked against
VERL's composed config by ``tests/bridge/test_overrides.py`` and pinned by golden files in
``tests/bridge/golden/``. Keys VERL's YAML lacks carry a ``+``.

What it does not do: write the files it names (:mod:`kit.bridge.launch` writes the agent-loop YAML and
the parquet files), choose a cluster layout for you (``n_gpus_per_node``, ``nnodes``,
``rollout_tp`` are arguments), or set VERL's chat template (the kit agent loop renders prompts
from ``kit.prompts`` itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from kit.algo import adv_estimator, needs_critic, sampling_plan
from kit.config import check_minimums
from kit.train.tracking import tracking_env

AGENT_NAME = "rstar2_kit"  # kit.bridge.agent_loop.AGENT_NAME (kept literal: that module imports verl)
ROC_SAMPLER = ("pkg://kit.bridge.roc_hook", "RocReplayBuffer")
#: GRPO's v1 sampler: VERL's sync buffer plus the step's tool metrics (``kit.bridge.sampler``)
GRPO_SAMPLER = ("pkg://kit.bridge.sampler", "KitReplayBuffer")
ROC_MANAGER = "kit.bridge.roc_hook.RocAgentLoopManager"
REWARD_FN = ("pkg://kit.bridge.reward_fn", "compute_score")


@dataclass(frozen=True)
class RecipePaths:
    """Files a VERL run reads or writes, derived from ``run_dir`` unless given."""

    run_dir: str
    train_files: str
    val_files: str
    agent_loop_config: str
    checkpoints: str
    router_config: str = ""  # rollout.balancer = "kv_cache": the router YAML; "" -> beside agent_loop_config

    @classmethod
    def default(cls, run_dir: str, train_files: str | None = None, val_files: str | None = None, *,
                hard: bool = False) -> RecipePaths:
        """A stage trains on ``run_dir/data/curated.parquet`` (``kit.data.curate.write_curated``), a
        ``hard`` one (``problems = "hard"``, stage 3) on ``run_dir/data/hard.parquet``; validation on
        ``run_dir/data/val.parquet``."""
        d = PurePosixPath(run_dir)
        train = "hard.parquet" if hard else "curated.parquet"
        return cls(
            run_dir=str(d),
            train_files=train_files or str(d / "data" / train),
            val_files=val_files or str(d / "data" / "val.parquet"),
            agent_loop_config=str(d / "verl" / "agent_loop.yaml"),
            checkpoints=str(d / "checkpoints"),
            router_config=str(d / "verl" / "router.yaml"),
        )

    @property
    def router_yaml(self) -> str:
        """The router YAML (``router_config``, else ``router.yaml`` beside the agent-loop YAML)."""
        return self.router_config or str(PurePosixPath(self.agent_loop_config).with_name("router.yaml"))


def stage_step_offset(config: Any, stage: str) -> int:
    """Global steps done before ``stage`` (sum of the steps of the stages before it in ``config.stages``).

    Raises:
        ValueError: ``stage`` is not one of the config's stages.
    """
    names = _check_stage(config, stage)
    return sum(st.steps for st in list(config.stages)[: names.index(stage)])


def checkpoint_step(path: str) -> int:
    """N of a ``.../global_step_<N>`` folder (how VERL reads the step it resumes at).

    Raises:
        ValueError: the last path component is not ``global_step_<N>``.
    """
    name = PurePosixPath(str(path).rstrip("/")).name
    if not name.startswith("global_step_") or not name[len("global_step_"):].isdigit():
        raise ValueError(f"{path}: a resume path must end in global_step_<N> (VERL reads the step from it)")
    return int(name[len("global_step_"):])


def _check_stage(config: Any, stage: str) -> tuple[str, ...]:
    """The config's stage names; ValueError when ``stage`` is not one of them."""
    names = config.stages.names
    if stage not in names:
        raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(names)}")
    return names


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ",".join(_fmt(x) for x in v) + "]"
    return str(v)


def to_hydra_overrides(
    config: Any,
    stage: str,
    *,
    paths: RecipePaths | None = None,
    model_path: str | None = None,
    n_gpus_per_node: int = 8,
    nnodes: int = 1,
    rollout_tp: int = 4,
    gpu_memory_utilization: float = 0.8,
    save_freq: int = 50,
    test_freq: int = 50,
    logger: tuple[str, ...] | None = None,
    start_step: int | None = None,
    resume_from: str | None = None,
    metrics_file: str | None = None,
) -> list[str]:
    """Hydra overrides for ``python -m verl.trainer.main_ppo`` running one kit stage.

    Args:
        config: a ``kit.config.KitConfig`` (e.g. ``load("paper-14b")``).
        stage: a name of ``config.stages`` (``"stage1"`` ... of report §4.3).
        paths: files of the run; default :meth:`RecipePaths.default` under ``config.run_dir``
            (``runs/<profile>`` when empty).
        model_path: policy to start stage 1 from (the SFT checkpoint); default
            ``config.model.name_or_path``. Later stages load it only for the architecture and
            tokenizer; weights come from the checkpoint.
        n_gpus_per_node, nnodes: cluster layout (the report used 64 MI300X = 8 x 8).
        rollout_tp: SGLang tensor parallel size per replica (4 in the release for 14B).
        gpu_memory_utilization: SGLang's KV-cache share of GPU memory (0.8 in the release).
        save_freq, test_freq: checkpoint and validation every that many steps (the last step
            of a stage is always saved).
        logger: VERL loggers (``console``, ``wandb``, ...); default ``config.logging.backends``. Each
            tracker writes under ``<run_dir>/tracking`` and stays offline (environment of
            :func:`kit.train.tracking.tracking_env`, passed to the Ray workers), whatever is listed.
        start_step: global step at which this stage starts (default: the sum of the earlier
            stages' ``steps``); the stage ends at ``start_step + steps``. Pass the step of the
            checkpoint it starts from when earlier stages ran a different number of steps.
        resume_from: a ``global_step_<N>`` folder to resume from (default
            ``<checkpoints>/global_step_<start_step>`` for stages 2-3, nothing for stage 1), e.g.
            the previous stage's checkpoint in another run directory, or this stage's own last
            checkpoint after an interruption. ``reset_optimizer`` loads only the weights, and
            only when ``N == start_step`` (an interrupted stage 3 keeps its own optimizer).
        metrics_file: also log every step to this JSON-lines file (VERL's ``file`` logger, path
            passed to the Ray workers as ``VERL_FILE_LOGGER_PATH``).
    Returns:
        list of ``key=value`` strings, in a fixed order (golden-file friendly).
    Raises:
        ValueError: unknown stage, RoC settings that cannot keep G of 2G, or an unregistered
            ``algorithm.adv_estimator``.
    """
    _check_stage(config, stage)
    a, r, st = config.algorithm, config.rollout, config.stages[stage]
    G, oversample, P = a.group_size, a.oversample, a.prompts_per_step
    roc = a.selection == "roc"  # RoC's 2G -> G selection, whatever the estimator (PPO: selection = "all")
    if roc and oversample < G:
        raise ValueError(f"algorithm.oversample ({oversample}) must be >= algorithm.group_size ({G}) for RoC")
    if roc:
        check_minimums(G, a.min_positive, a.min_negative)
    adv_estimator(a.adv_estimator)  # registered in kit.algo.advantage, else a ValueError naming the key
    paths = paths or RecipePaths.default(config.run_dir or f"runs/{config.profile}",
                                          hard=config.stages[stage].problems == "hard")
    max_seq = r.max_prompt_tokens + st.max_response_tokens
    offset = stage_step_offset(config, stage) if start_step is None else int(start_step)
    logger = tuple(config.logging.backends) if logger is None else tuple(logger)
    if metrics_file and "file" not in logger:
        logger = (*logger, "file")
    out: list[tuple[str, Any]] = [
        # data (report §4.2 pools, written to parquet by kit.bridge.launch.prepare_data; kit.data.pool)
        ("data.train_files", paths.train_files),
        ("data.val_files", paths.val_files),
        ("data.train_batch_size", P),
        ("data.max_prompt_length", r.max_prompt_tokens),
        ("data.max_response_length", st.max_response_tokens),
        ("data.return_raw_chat", True),
        ("data.filter_overlong_prompts", True),
        ("data.truncation", "error"),
        ("data.seed", config.seed),
        # policy and optimizer (report §4.3)
        ("actor_rollout_ref.model.path", model_path or config.model.name_or_path),
        ("actor_rollout_ref.model.use_remove_padding", True),
        ("actor_rollout_ref.model.enable_gradient_checkpointing", True),
        ("actor_rollout_ref.actor.optim.lr", float(a.lr)),
        ("actor_rollout_ref.actor.optim.lr_warmup_steps", a.warmup_steps),
        ("actor_rollout_ref.actor.optim.weight_decay", float(a.weight_decay)),
        ("actor_rollout_ref.actor.optim.clip_grad", float(a.grad_clip)),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", P),
        ("actor_rollout_ref.actor.ppo_epochs", a.ppo_epochs),
        ("actor_rollout_ref.actor.use_dynamic_bsz", True),
        ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", max_seq),
        # GRPO loss (report §2.2.1): Clip-Higher, token-mean, no KL, no entropy
        ("actor_rollout_ref.actor.policy_loss.loss_mode", "vanilla"),
        ("actor_rollout_ref.actor.clip_ratio_low", float(a.clip_ratio_low)),
        ("actor_rollout_ref.actor.clip_ratio_high", float(a.clip_ratio_high)),
        ("actor_rollout_ref.actor.clip_ratio_c", float(a.clip_ratio_c)),
        ("actor_rollout_ref.actor.loss_agg_mode", a.loss_agg_mode),
        ("actor_rollout_ref.actor.use_kl_loss", a.kl_coef > 0),
        ("actor_rollout_ref.actor.kl_loss_coef", float(a.kl_coef)),
        ("actor_rollout_ref.actor.entropy_coeff", float(a.entropy_coef)),
        ("algorithm.adv_estimator", a.adv_estimator),  # VERL's own implementation of the registered name
        ("algorithm.norm_adv_by_std_in_grpo", True),
        ("algorithm.use_kl_in_reward", False),
        # rollout: SGLang, async multi-turn agent loop of the kit (report §2.1, §3)
        ("actor_rollout_ref.rollout.name", "sglang"),
        ("actor_rollout_ref.rollout.mode", "async"),
        ("actor_rollout_ref.rollout.n", G),
        ("actor_rollout_ref.rollout.temperature", float(r.temperature)),
        # the run's seed, not VERL's default 42: the rollout's sampling seeds follow --seed (issue #41; VERL seeds
        # its engine and, with rollout.full_determinism, torch's determinism with it)
        ("actor_rollout_ref.rollout.seed", config.seed),
        ("actor_rollout_ref.rollout.top_p", float(r.top_p)),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", rollout_tp),
        ("actor_rollout_ref.rollout.gpu_memory_utilization", float(gpu_memory_utilization)),
        ("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", max_seq),
        ("actor_rollout_ref.rollout.multi_turn.enable", True),
        ("actor_rollout_ref.rollout.multi_turn.max_assistant_turns", st.max_turns),
        ("actor_rollout_ref.rollout.agent.default_agent_loop", AGENT_NAME),
        ("actor_rollout_ref.rollout.agent.agent_loop_config_path", paths.agent_loop_config),
        ("actor_rollout_ref.rollout.val_kwargs.do_sample", True),
        ("actor_rollout_ref.rollout.val_kwargs.temperature", float(config.eval.temperature)),
        ("actor_rollout_ref.rollout.val_kwargs.top_p", float(config.eval.top_p)),
        ("actor_rollout_ref.rollout.val_kwargs.n", config.eval.n_samples),
        # reward: binary, kit.reward (report §2.2)
        ("reward.custom_reward_function.path", REWARD_FN[0]),
        ("reward.custom_reward_function.name", REWARD_FN[1]),
        # trainer (v1, sync)
        ("trainer.use_v1", True),
        ("trainer.v1.trainer_mode", "sync"),
        ("trainer.project_name", "rstar2-kit"),
        ("trainer.experiment_name", config.tracker_name(stage)),
        ("trainer.logger", list(logger)),
        ("trainer.n_gpus_per_node", n_gpus_per_node),
        ("trainer.nnodes", nnodes),
        ("trainer.total_training_steps", offset + st.steps),
        ("trainer.total_epochs", 1000),
        ("trainer.save_freq", save_freq),
        ("trainer.test_freq", test_freq),
        ("trainer.val_before_train", False),
        ("trainer.default_local_dir", paths.checkpoints),
    ]
    if stage == config.stages[0].name and resume_from is None:  # the first stage starts from model_path
        out.append(("trainer.resume_mode", "disable"))
    else:
        resume = resume_from or f"{paths.checkpoints}/global_step_{offset}"
        out += [("trainer.resume_mode", "resume_path"), ("trainer.resume_from_path", resume)]
        if st.reset_optimizer and checkpoint_step(resume) == offset:
            out.append(("actor_rollout_ref.actor.checkpoint.load_contents", ["model"]))
            if needs_critic(a):
                out.append(("critic.checkpoint.load_contents", ["model"]))
    if needs_critic(a):
        out += critic_overrides(config, model_path or config.model.name_or_path, max_seq)
    for key, value in tracking_env(config.logging, paths.run_dir, metrics_file).items():  # trackers stay local
        out.append((f"+ray_kwargs.ray_init.runtime_env.env_vars.{key}", value))
    if r.balancer == "kv_cache":  # report §3.2: the kit's balancer in VERL's server manager (kit.bridge.kv_router)
        out.append(("actor_rollout_ref.rollout.router_config_path", paths.router_yaml))
    if roc:
        out += [
            ("+actor_rollout_ref.rollout.agent.agent_loop_manager_class", ROC_MANAGER),
            ("trainer.v1.sampler.custom_sampler.path", ROC_SAMPLER[0]),
            ("trainer.v1.sampler.custom_sampler.name", ROC_SAMPLER[1]),
            ("+trainer.v1.sampler.sampler_kwargs.group_size", G),
            ("+trainer.v1.sampler.sampler_kwargs.oversample", oversample),
            ("+trainer.v1.sampler.sampler_kwargs.train_batch_size", P),
            ("+trainer.v1.sampler.sampler_kwargs.mode", a.roc_mode),
            ("+trainer.v1.sampler.sampler_kwargs.use_error_ratio", a.roc_use_error_ratio),
            ("+trainer.v1.sampler.sampler_kwargs.use_answer_format", a.roc_use_answer_format),
            ("+trainer.v1.sampler.sampler_kwargs.min_positive", a.min_positive),
            ("+trainer.v1.sampler.sampler_kwargs.min_negative", a.min_negative),
            ("+trainer.v1.sampler.sampler_kwargs.drop_equal_reward_groups", a.drop_equal_reward_groups),
            ("+trainer.v1.sampler.sampler_kwargs.reading", a.roc_reading),
            ("+trainer.v1.sampler.sampler_kwargs.seed", config.seed),
        ]
        if a.roc_negative_order != "random":  # only when set, so the default command lines stay as they were
            out.append(("+trainer.v1.sampler.sampler_kwargs.negative_order", a.roc_negative_order))
        if a.roc_reading == "text":  # the release's reading decodes responses with the policy's tokenizer
            out.append(("+trainer.v1.sampler.sampler_kwargs.tokenizer_path", model_path or config.model.name_or_path))
        if a.drop_equal_reward_groups:
            out.append(("data.gen_batch_size", 1))  # exact refill of dropped groups, one prompt at a time
    else:  # VERL's own buffer for these settings, plus the tool metrics of the step's rows
        out += [
            ("trainer.v1.sampler.custom_sampler.path", GRPO_SAMPLER[0]),
            ("trainer.v1.sampler.custom_sampler.name", GRPO_SAMPLER[1]),
            ("+trainer.v1.sampler.sampler_kwargs.train_batch_size", P),
        ]
    lg = config.logging
    if lg.records_every > 0:  # rollout records, written by the kit's replay buffer (kit.bridge.verl_records)
        out += [
            ("+trainer.v1.sampler.sampler_kwargs.records_dir", paths.run_dir),
            ("+trainer.v1.sampler.sampler_kwargs.records_every", lg.records_every),
            ("+trainer.v1.sampler.sampler_kwargs.records_max_prompts", lg.records_max_prompts),
            ("+trainer.v1.sampler.sampler_kwargs.records_stage", stage),
            ("+trainer.v1.sampler.sampler_kwargs.records_algorithm", sampling_plan(a)[2]),  # the local rows' label
            ("+trainer.v1.sampler.sampler_kwargs.records_seed", config.seed),
            ("+trainer.v1.sampler.sampler_kwargs.records_step_offset", offset),
            ("+trainer.v1.sampler.sampler_kwargs.records_tokenizer", model_path or config.model.name_or_path),
        ]
    return [f"{k}={_fmt(v)}" for k, v in out]


def critic_overrides(config: Any, model_path: str, max_seq: int) -> list[tuple[str, Any]]:
    """VERL's critic for PPO (``algorithm.adv_estimator = "gae"``, ReTool): its model from ``model_path``
    (the actor's, as VERL initialises it; a resumed stage loads ``global_step_<N>/critic``), the kit's
    ``[critic]`` optimiser and value clip, GAE's ``algorithm.gamma`` / ``algorithm.lam``."""
    a, c = config.algorithm, config.critic
    return [
        ("algorithm.gamma", float(a.gamma)),
        ("algorithm.lam", float(a.lam)),
        ("critic.enable", True),
        ("critic.model.path", model_path),
        ("critic.model.use_remove_padding", True),
        ("critic.model.enable_gradient_checkpointing", True),
        ("critic.optim.lr", float(c.lr)),
        ("critic.optim.weight_decay", float(c.weight_decay)),
        ("critic.optim.clip_grad", float(c.grad_clip)),
        ("critic.cliprange_value", float(c.cliprange_value)),
        ("critic.ppo_epochs", c.ppo_epochs),
        ("critic.loss_agg_mode", c.loss_agg_mode),
        ("critic.ppo_mini_batch_size", a.prompts_per_step),
        ("critic.use_dynamic_bsz", True),
        ("critic.ppo_max_token_len_per_gpu", max_seq),
    ]


def command(overrides: list[str], python: str = "python3") -> list[str]:
    """argv of the VERL launch: ``python -m verl.trainer.main_ppo <overrides>``."""
    return [python, "-m", "verl.trainer.main_ppo", *overrides]
