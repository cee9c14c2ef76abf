import torch

from kit import prompts
from kit.config import load
from kit.models import build_tiny_model, load_policy, save_policy, stop_token_ids, train_tokenizer


def _corpus():
    out = []
    for a in range(100, 300):
        b = a * 7 + 3
        out.append(prompts.render_prompt(f"What is {a} * {b}?") + f" multiply.</reason> <answer> \\boxed{{{a * b}}} </answer>")
    return out


def test_tokenizer_digits_tags_and_prompt_blocks():
    tok = train_tokenizer(_corpus(), 600)
    ids = tok("12345")["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == list("12345")
    for tag in ("<tool_call>", "</tool_call>", "<|im_end|>", "<answer>", "<reason>"):
        assert len(tok(tag)["input_ids"]) == 1, tag
    text = prompts.render_prompt("What is 17 * 23?")
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text  # byte-exact round trip
    assert len(ids) < 60  # the constant preamble is a couple of tokens, not hundreds


def test_chat_template_matches_python_renderer():
    tok = train_tokenizer(_corpus(), 600)
    msgs = [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": '<reason>use python<tool_call>\n{"name": "x"}\n</tool_call>'},
        {"role": "tool", "content": "4"},
        {"role": "tool", "content": "oops"},
        {"role": "assistant", "content": "<reason>ok</reason> <answer> \\boxed{4} </answer>"},
    ]
    for gen in (False, True):
        assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen) == \
            prompts.render_conversation(msgs, add_generation_prompt=gen)
    assert tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True).endswith("<|im_start|>assistant\n<reason>")


def test_build_save_reload_generate(tmp_path):
    cfg = load("tiny")
    tok = train_tokenizer(_corpus(), cfg.model.tokenizer_vocab_size)
    model = build_tiny_model(cfg.model, tok, seed=0)
    n_params = sum(p.numel() for p in model.parameters())
    assert 2e5 < n_params < 1e6
    assert type(model).__name__ == "Qwen3ForCausalLM"
    save_policy(model, tok, tmp_path / "policy")
    model2, tok2 = load_policy(tmp_path / "policy")
    for a, b in zip(model.state_dict().values(), model2.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    text = tok2.apply_chat_template([{"role": "user", "content": "What is 3 * 4?"}], tokenize=False, add_generation_prompt=True)
    assert text == tok.apply_chat_template([{"role": "user", "content": "What is 3 * 4?"}], tokenize=False,
                                           add_generation_prompt=True)
    enc = tok2(text, return_tensors="pt")
    stops = stop_token_ids(tok2)
    samples = []
    for m in (model, model2):  # the saved policy samples exactly what the original samples
        torch.manual_seed(0)
        samples.append(m.generate(**enc, max_new_tokens=12, do_sample=True, eos_token_id=stops))
    assert torch.equal(samples[0], samples[1])
    new = samples[1][0, enc["input_ids"].shape[1]:]
    assert new.numel() == 12 or (1 <= new.numel() < 12 and int(new[-1]) in stops)  # the budget or a stop id
    assert tok2.decode(new) == tok.decode(new)


def test_load_policy_missing_path_is_clear(tmp_path):
    import pytest
    with pytest.raises(FileNotFoundError, match="not found"):
        load_policy(tmp_path / "absent" / "model")
