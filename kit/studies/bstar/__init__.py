"""B-STaR (Zeng et al., ICLR 2025, "B-STaR: Monitoring and Balancing Exploration and Exploitation in
Self-Taught Reasoners") on the kit's tool tasks, issue #47, as a study of the series (its record:
:data:`kit.studies.BSTAR`); notebook 12 runs it (:mod:`kit.studies.bstar.chain`).

Files, one concept each:

- :mod:`kit.studies.bstar.loop`: the selection reward (vote share), the balance-score sweep over
  (temperature, threshold), the choice, the selected samples (pure functions over sampled pools);
- :mod:`kit.studies.bstar.chain`: what notebook 12 calls (both arms, the held-out samples of every policy,
  the tables, the findings); :mod:`kit.studies.bstar.figures`: its curves;
- :mod:`kit.studies.bstar.kinds`: the claims' test kind (``bstar_diff``); the balance score itself is
  :mod:`kit.analysis.bstar` (the authors' variant and the kit's monitor).

Differences from the paper (what the kit does instead, and why):

=======================  ===========================================  =====================================
paper                    kit                                          why
=======================  ===========================================  =====================================
selection reward: the    the vote share of the sample's final answer  the kit's verifier is 0/1: every
answer check and a       among its query's samples (self-            threshold below 1 selects the same
reward model's score     consistency); correctness only scores the    samples, and the threshold could not
                         selection and the evaluation                 be tuned
temperatures 0.50-1.20   ``bstar.temperatures`` (tiny: 0.6-1.2 by     sampling cost on 2 CPU cores
by 0.05, thresholds      0.2), ``bstar.thresholds`` (tiny: 0, 1/4,
by 0.01                  1/2, 3/4)
per-query cap grown to   no cap                                       the tiny pools are 8 samples
a target selected size
reference solution in    the gold answer joins every pool as a        the balance score only (it is never
every pool (score 1)     correct sample with score 1                  trained on); off (``bstar.reference``),
                         (``bstar.reference``, on)                    a query selecting nothing drops out
                                                                      and the strictest threshold wins
online RFT: a fixed      the fixed arm: the same vote-share           the issue's baseline ("the same loop
configuration            selection at T = 1 and threshold 1/2 (the   at a fixed temperature and
                         majority answer's samples); neither arm      threshold"); B-STaR reads the gold
                         selects by the gold answer                   answers to score its pairs, as the
                                                                      balance score needs them
accuracy: greedy Pass@1  accuracy of samples at T = 1, and pass@k,    pass@k and distinct correct answers
                         with k = ``bstar.eval_samples``              need samples; one stream for all
same sampling budget     the same training pools; B-STaR's dev        ``iterations.jsonl`` counts each
                         sweep is extra sampling                      iteration's trajectories
9 iterations x 500       ``bstar.iterations`` (tiny: 3) of a short     the tiny series' budget; the recipe
steps, 1k dev queries    fine-tune (15 steps, both arms, Agent-R's     is the one chosen on Agent-R's null
                         null-arm-chosen lr 1e-4, warm-up floor 10),   arm (benchmarks/agent_r_null_lr.py),
                         16 dev tasks                                 not tuned on B-STaR's outcome
=======================  ===========================================  =====================================

Does not: run the loop on VERL (the paper profiles' dry run prints how it would: the fine-tune through the kit's
VERL SFT path, the sampling through the paper profile's sampler).
"""

from kit.studies import BSTAR

#: the arms of notebook 12: B-STaR's adaptive loop and the fixed pair (online RFT), as its study record names them
ARMS = BSTAR.arms
#: the file the claims read (one row per policy, iteration and held-out task)
EVAL_FILE = "eval.jsonl"
