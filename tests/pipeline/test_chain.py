"""kit.chain: the trajectory view the notebooks and the PDF show, and the paper-profile guards."""

from __future__ import annotations

import pytest

from kit import chain, preflight
from kit.config import load
from kit.rollout.loop import Trajectory


class CharTokenizer:
    """One token per character (ids are code points)."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(map(chr, ids))


def _traj() -> Trajectory:
    model = "run <code> 50% & x_1\n"
    tool = "<tool_response>42</tool_response>"
    answer = "so \\boxed{42}"
    ids = [ord(c) for c in model + tool + answer]
    mask = [1] * len(model) + [0] * len(tool) + [1] * len(answer)
    return Trajectory(problem="p", prompt_ids=[1], response_ids=ids, response_mask=mask, turns=2, tool_calls=1,
                      finish_reason="answer")


def test_view_marks_tool_tokens_in_text_and_latex():
    view = chain.TrajectoryView(_traj(), CharTokenizer(), title="demo")
    text = repr(view)
    assert "[tool response, mask 0]<tool_response>42</tool_response>[/tool response]" in text
    assert text.splitlines()[0].startswith("demo: answer, 2 turns, 1 tool calls")
    tex = view._repr_latex_()
    assert r"\textcolor{gray}{<\allowbreak{}tool\_\allowbreak{}response>" in tex
    assert r"50\%\allowbreak{} \allowbreak{}\&\allowbreak{} \allowbreak{}x\_" in tex
    assert r"\textbackslash{}\allowbreak{}boxed\{\allowbreak{}42\}" in tex
    assert "demo" in view._repr_html_()


def test_summary_markdown_keeps_scalars():
    md = chain.summary_markdown({"steps": 40, "final_loss": 1.234567, "rows": {"a": 1}, "policy_dir": "x|y"}).data
    assert md.splitlines() == ["| key | value |", "|---|---|", "| steps | 40 |", "| final_loss | 1.235 |",
                               "| policy_dir | x/y |"]


def test_paper_profile_sft_needs_a_checkpoint(tmp_path):
    cfg = load("paper-14b", write=False)
    with pytest.raises(RuntimeError, match="sft_checkpoint"):
        chain.cold_start(cfg, tmp_path)
    with pytest.raises(FileNotFoundError, match="nope"):
        chain.cold_start(cfg, tmp_path, sft_checkpoint=str(tmp_path / "nope"))
    ck = tmp_path / "ck"
    ck.mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        chain.cold_start(cfg, tmp_path / "run", sft_checkpoint=str(ck))
    (ck / "config.json").write_text("{}")
    out = chain.cold_start(cfg, tmp_path / "run", sft_checkpoint=str(ck))
    assert (tmp_path / "run" / "policy").resolve() == ck.resolve() and out["sft_checkpoint"] == str(ck.resolve())
    assert (tmp_path / "run" / "summary.json").exists()


def test_paper_stage3_builds_the_hard_subset_before_verl(tmp_path, monkeypatch):
    from kit.bridge import hard_subset, stages

    cfg = load("paper-14b", write=False)
    calls = []
    monkeypatch.setattr(hard_subset, "prepare_stage3_data", lambda *a, **k: calls.append(("hard", k)))
    monkeypatch.setattr(stages, "run_stage", lambda cfg, stage, *a, **k: calls.append((stage, a)) or {"stage": stage})
    assert chain.train_stage(cfg, "stage3", tmp_path / "s3", tmp_path / "s2", tmp_path / "d", hard_counts="c.json")
    assert calls[0][1]["hard_counts"] == "c.json" and calls[1][0] == "stage3"


def test_missing_policy_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="upstream training notebook"):
        chain.load_run_policy(tmp_path / "stage3" / "policy")


def test_gpqa_joins_the_benchmarks_only_when_supplied():
    assert chain.eval_benchmarks(load("smoke", write=False)) == ["aime24", "aime25", "math500", "hmmt25"]
    cfg = load("smoke", {"eval.gpqa_path": "/x/gpqa.csv"}, write=False)
    assert chain.eval_benchmarks(cfg)[-1] == "gpqa"


def test_count_parameters_reads_safetensors_headers(tmp_path):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=8, tie_word_embeddings=True)
    model = Qwen3ForCausalLM(cfg)
    model.save_pretrained(tmp_path)
    assert chain.count_parameters(tmp_path) == sum(p.numel() for p in model.parameters())
    assert chain.count_parameters(tmp_path / "empty") is None


@pytest.mark.parametrize("failing,raises", [("latency", False), ("network blocked", True)])
def test_selftest_failures_stop_the_chain_unless_only_speed(monkeypatch, capsys, failing, raises):
    from kit.sandbox import selftest

    def fake_main(cfg):
        for name in ("network blocked", "memory limit", "latency"):
            print(f"{'FAIL' if name == failing else 'PASS'}  {name}: detail of {name}")
        return 1

    monkeypatch.setattr(selftest, "main", fake_main)
    if raises:
        with pytest.raises(RuntimeError, match="network blocked: detail of network blocked"):
            preflight.sandbox_selftest(None)
    else:
        df = preflight.sandbox_selftest(None)
        assert list(df["check"]) == ["network blocked", "memory limit", "latency"]
        assert list(df["result"]) == ["PASS", "PASS", "FAIL"]
        assert "WARNING: sandbox speed below target" in capsys.readouterr().out
