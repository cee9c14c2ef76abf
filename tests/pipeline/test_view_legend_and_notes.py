"""What the notebooks show beside their results (issue #20): the trajectory view's legend, the
anatomy's coloured trajectory, and the line a profile too small to learn adds."""

from __future__ import annotations

import re

import pandas as pd

from kit import chain
from kit.chain.anatomy import RocAnatomy
from kit.config import load
from kit.rollout import legend_html, show_trajectory
from kit.rollout.loop import Trajectory
from kit.rollout.view import LEGEND


class CharTokenizer:
    def decode(self, ids, skip_special_tokens=False):
        return "".join(map(chr, ids))


def _traj(tool: bool) -> Trajectory:
    model = "<tool_call>print(6*7)</tool_call>" if tool else "thinking"
    resp = "<tool_response>42</tool_response>" if tool else ""
    answer = "<answer>\\boxed{42}</answer>"
    ids = [ord(c) for c in model + resp + answer]
    mask = [1] * len(model) + [0] * len(resp) + [1] * len(answer)
    return Trajectory(problem="p", prompt_ids=[1], response_ids=ids, response_mask=mask, turns=2 if tool else 1,
                      tool_calls=int(tool), finish_reason="answer")


def test_trajectory_view_has_a_legend_for_every_colour():
    html = chain.TrajectoryView(_traj(True), CharTokenizer(), title="demo")._repr_html_()
    body = html.split("kit-traj-legend", 1)[1]
    assert [k for k, _ in LEGEND] == ["model", "call", "tool", "answer"]
    for kind, text in LEGEND:
        assert f'data-kind="{kind}"' in legend_html() and text.split(" (")[0] in html.split("<pre")[0]
    # the spans of the trajectory carry their kind: what the legend's colours refer to
    assert re.search(r'data-kind="tool" style="[^"]*background:#e3ecfa">&lt;tool_response&gt;42', body)
    assert re.search(r'data-kind="call" style="[^"]*">&lt;tool_call&gt;', body)
    assert "grey: tool response" in chain.TrajectoryView(_traj(True), CharTokenizer())._repr_latex_()


def test_a_view_with_its_prompt_names_the_prompt_s_grey():
    with_prompt = show_trajectory(_traj(True), CharTokenizer(), show_prompt=True).data
    legend, body = with_prompt.split("</div>", 1)
    assert 'data-kind="prompt"' in legend and 'data-kind="prompt" style="color:#888"' in body
    assert 'data-kind="prompt"' not in show_trajectory(_traj(True), CharTokenizer()).data  # no prompt shown, none named


def test_too_small_profile_says_so_beside_its_results():
    smoke, tiny, paper = load("smoke", write=False), load("tiny", write=False), load("paper-14b", write=False)
    note = chain.learning_note(smoke)
    assert "too small to learn" in note and "40 cold-start steps" in note and "\n" not in note
    assert chain.learning_note(tiny) == "" and chain.learning_note(paper) == ""
    md = chain.summary_markdown({"steps": 40, "final_loss": float("nan")}, smoke).data
    assert md.splitlines()[-1] == f"*{note}*"
    assert chain.summary_markdown({"steps": 600}, tiny).data.splitlines()[-1] == "| steps | 600 |"


def test_anatomy_view_shows_a_kept_trajectory_that_called_the_tool():
    trajs = [_traj(False), _traj(True), _traj(True)]
    trajs.append(_traj(True))  # called the tool in its only turn: no response came back
    table = pd.DataFrame({"reward": [1.0, 1.0, 0.0, 1.0], "tool_calls": [0, 1, 1, 2], "turns": [1, 2, 2, 1],
                          "kept": [True, False, True, True]}, index=pd.RangeIndex(4, name="trajectory"))
    an = RocAnatomy(problem=None, table=table, trajectories=trajs, tokenizer=CharTokenizer(), stage="stage1",
                    step=0, group=0, note="")
    view = an.view()
    assert view.tr is trajs[2] and view.title == "trajectory 2: reward 0, kept by RoC"
    table.loc[2, "kept"] = False
    assert an.view().tr is trajs[1]
    assert an.view(0).tr is trajs[0]
