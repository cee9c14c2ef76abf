"""Agent-R (Yuan et al. 2025, "Agent-R: Training Language Model Agents to Reflect via Iterative
Self-Training") on the kit's tool tasks, issue #34, as a study of the series (its record:
:data:`kit.studies.AGENT_R`); notebook 11 runs it (:mod:`kit.studies.agent_r.chain`).

Files, one concept each:

- :mod:`kit.studies.agent_r.chain`: what notebook 11 calls (the arms, the held-out samples of every
  policy, the tables, the findings); :mod:`kit.studies.agent_r.views` and
  :mod:`kit.studies.agent_r.figures`: its search tree and policies figures;

- :mod:`kit.studies.agent_r.tree`: nodes at turn boundaries, UCT selection, backpropagation, insertion;
- :mod:`kit.studies.agent_r.replay`: continuing a node's prefix through the kit's unchanged agent loop, and
  the engine whose kept prefix KV survives reuse (siblings do not recompute their shared prefix);
- :mod:`kit.studies.agent_r.search`: Phase I, MCTS through the agent loop, sandbox and verifier;
- :mod:`kit.studies.agent_r.revision`: good/bad pairs, the transition point, revision rows with loss masks;
- :mod:`kit.studies.agent_r.iterate`: Phase II, the alpha schedule, the rows of each arm, training with the
  cold-start SFT trainer (:func:`kit.train.sft.fit_rows`);
- :mod:`kit.studies.agent_r.parquet`: the rows as a parquet with ids and loss mask, for VERL's SFT trainer
  (``kit.bridge.revision_sft``).

Differences from the paper (what the kit does instead, and why):

=======================  ===========================================  =====================================
paper                    kit                                          why
=======================  ===========================================  =====================================
actor names the first    a stated rule: the first failed tool call of  the tiny model cannot critique a
erroneous action         the bad branch, else the first turn whose     trajectory; ``agent_r.transition``
(transition point)       node value falls below beta                   picks the rule
rewards in [0, 1] from   score = verifier reward x (1 - failed calls   0/1 rewards leave alpha nothing to
the environment          / calls)                                      select; the score favours clean tools
MCTS with the env's      a node = prefix at a turn boundary; a whole   keeps every sampled trajectory as a
states; one node per     simulated path is inserted (identical turns   path, so pairs share exactly their
expansion                merged); ``width`` children per expansion     lowest common node; batches rounds
general data ShareGPT    the cold-start SFT data (task demos and       the kit's "general" data; a batch
weighted eta in the      function calling), a share eta/(1+eta) of     share instead of a loss weight (same
loss                     each batch                                    expected weight up to token counts)
revision signal in the   rs after the transition turn's observation,   the kit's chat format has no
assistant turn, trained  inside the next assistant turn, with loss      separate reflection message
every good/bad pair      a pair whose transition turn has no tool      rs follows an observation; a bad
gives a revision         observation (the bad branch ended on a wrong  branch that only answered wrongly has
trajectory               final answer) is skipped and counted          none to revise after (on tiny: most
                         (``skipped`` in iterations.jsonl)             pairs of iteration 1, see the log)
each iteration trains    continues in place (``agent_r.train_from =    the reference code stops at the rows
the current model        "previous"``); ``"cold_start"`` retrains the  (its training is Xtuner's) and the
                         cold start on every iteration's rows so far   paper's text is not reachable here:
                         (STaR, ReST-EM)                               a stated choice, not a verified one
eta weights the general  ``eta / (1 + eta)`` of each batch; whether    the same unverified reading of the
data in the loss         the paper's eta weights the general data or   paper's equation; AgentTuning's eta
                         the agent data is not verified here           weights the agent data
direct revision: the     the same pairs cut at the bad branch's last   a final answer has no observation
whole bad trajectory,    observed turn (the latest point a revision    after it: the agent loop never goes
then the revision        can follow one); pairs skipped as Agent-R's   past it, so a row revising there
                                                                       teaches an unreachable state
=======================  ===========================================  =====================================

Does not: run the search on VERL (the paper-scale route writes the collected rows as a parquet for
VERL's SFT trainer; a served policy would run the same search through ``OpenAIBackend``), or judge
transition points with a model.
"""
