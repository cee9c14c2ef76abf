"""Local CPU training engine: SFT, RL stages, the RoC ablation.

Entry points for notebooks (each writes only under its ``run_dir``; see docs/contracts.md)::

    from kit.train.sft import build_tokenizer_and_model, run_sft
    from kit.train.rl import run_stage
    from kit.train.ablation import run_ablation
    model, tok = build_tokenizer_and_model(cfg, run_dir)            # run_dir/init
    run_sft(cfg, run_dir, progress=None) -> summary                 # run_dir/policy
    run_stage(cfg, "stage1", policy_dir, run_dir, progress=None) -> summary
    run_ablation(cfg, policy_dir, run_dir, seeds=None, progress=None) -> summary

Modules: ``sft`` (cold start), ``rl`` (a stage: the loop over steps, the hard subset), ``step``
(one RL step, ``rl_step``: sample, verify, select, update), ``update`` (one RL step's selection
and policy update), ``ablation`` (the RoC ablation's arms, ``kit.plan.ablation_arms``, and
their worker processes), ``rollouts`` (the agent
loop, sandbox and verifier behind one ``collect``), ``recording`` (the step's rollout records,
``kit.records``), ``common`` (seeds, schedule, metrics file,
checkpoints). The continuous-batching rollout engine is :mod:`kit.rollout.engine`; the cluster
scheduler simulator is :mod:`kit.sim`.
"""
