"""Forking vs reflection classification on a constructed trajectory."""

from kit.analysis.tokens import classify_tokens, count_labels, counts_by_checkpoint

# model turn 1: reasoning, a change of approach ("Wait"), then a tool call;
# feedback block (mask 0); model turn 2: reads the output, then long plain text.
SEGMENTS = [
    (1, ["Let", " me", " think", " about", " sums", ".", " Wait", ",", " better", " to", " compute", ":",
         " <tool_call>", "{...}", "</tool_call>"]),
    (0, ["<|im_end|>", "\n<|im_start|>user\n", "<tool_response>", "\n55\n", "</tool_response>",
         "<|im_end|>", "\n<|im_start|>assistant\n<reason>"]),
    (1, ["The", " output", " is", " 55", "."] + [" filler"] * 30 + [" done", "</reason>"]),
]
PIECES = [p for _, ps in SEGMENTS for p in ps]
MASK = [m for m, ps in SEGMENTS for _ in ps]


def _high(*indices):
    return [i in indices for i in range(len(PIECES))]


def test_labels_follow_position_rules():
    t_let, t_wait, t_compute = 0, 6, 10
    t_the = PIECES.index("The")
    t_done = PIECES.index(" done")
    t_tool_out = PIECES.index("\n55\n")
    high = _high(t_let, t_wait, t_compute, t_the, t_done, t_tool_out)
    labels = classify_tokens(PIECES, MASK, high, reflection_window=8, forking_window=4, cue_window=2)
    assert labels[t_wait] == "forking"  # change of approach cue
    assert labels[t_compute] == "forking"  # just before <tool_call>
    assert labels[t_the] == "reflection"  # first tokens after the tool response
    assert labels[t_done] == "other"  # far from both
    assert labels[t_let] == "other"  # far from the call, no cue
    assert labels[t_tool_out] is None  # tool tokens are never labelled
    assert count_labels(labels) == {"forking": 2, "reflection": 1, "other": 2, "high": 5}


def test_windows_change_the_outcome():
    t_let = 0
    labels = classify_tokens(PIECES, MASK, _high(t_let), forking_window=20)
    assert labels[t_let] == "forking"  # a wide window reaches back to the start of the turn


def test_counts_by_checkpoint():
    rows = [{"checkpoint": "step_0", "forking": 2, "reflection": 1, "other": 1, "high": 4},
            {"checkpoint": "step_0", "forking": 0, "reflection": 1, "other": 3, "high": 4},
            {"checkpoint": "step_50", "forking": 3, "reflection": 3, "other": 0, "high": 6}]
    df = counts_by_checkpoint(rows)
    assert df.loc["step_0", "trajectories"] == 2 and df.loc["step_0", "forking"] == 2
    assert df.loc["step_0", "forking_share"] == 2 / 8 and df.loc["step_50", "reflection_share"] == 0.5


def test_analyze_trajectory_with_tiny_model():
    from kit import prompts
    from kit.analysis.entropy import entropy_html
    from kit.analysis.tokens import analyze_trajectory
    from kit.config import ModelConfig
    from kit.models import train_tokenizer
    from kit.models.tiny import build_tiny_model

    text = "".join(PIECES)
    tok = train_tokenizer([prompts.render_prompt("Sum 1..10?") + text] * 20, vocab_size=400)
    model = build_tiny_model(ModelConfig(name_or_path="tiny", hidden_size=32, num_layers=1, num_heads=2,
                                         num_kv_heads=1, intermediate_size=64), tok, seed=0).eval()
    ids, mask = [], []
    for m, ps in SEGMENTS:
        seg = tok.encode("".join(ps), add_special_tokens=False)
        ids += seg
        mask += [m] * len(seg)
    tr = {"prompt_ids": tok.encode(prompts.render_prompt("Sum 1..10?"), add_special_tokens=False),
          "response_ids": ids, "response_mask": mask}
    out = analyze_trajectory(model, tok, tr, top_frac=0.2)
    n_model = sum(mask)
    assert out["entropy"].shape == (len(ids),) and (out["entropy"] >= 0).all()
    assert out["high"].sum() >= round(0.2 * n_model) and not out["high"][[m == 0 for m in mask]].any()
    assert out["counts"]["high"] == out["high"].sum()
    assert "".join(out["pieces"]).count("<tool_response>") == 1
    assert "rgba(255,120,0" in entropy_html(out["pieces"], out["entropy"], out["mask"])
