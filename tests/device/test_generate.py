"""Text generation on the ``neuron`` device as users write it: ``model.generate`` of tiny HF models (built from
their config classes, no downloads) beyond greedy decoding, each compared with the same call on CPU eager.

Greedy and beam search must give CPU's tokens; sampling must give CPU's tokens too after ``torch.manual_seed``
(the device's generator is a CPU generator of its own, seeded with the same seed: device.md, "Text generation"),
and repeat itself. The weights are scaled up so that the logits are far apart (a random init's are nearly
uniform, where any ulp would pick another token on either side).
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

from transformers import StoppingCriteria, StoppingCriteriaList  # noqa: E402
from transformers.utils import logging  # noqa: E402

logging.set_verbosity_error()


def _scaled(model: torch.nn.Module, factor: float = 4.0) -> torch.nn.Module:
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(factor)
    return model.eval()


def _gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=64,
                                     bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return _scaled(transformers.GPT2LMHeadModel(config))


def _llama() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=100, max_position_embeddings=64,
                                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return _scaled(transformers.LlamaForCausalLM(config))


def _t5() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.T5Config(d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16, vocab_size=100,
                                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return _scaled(transformers.T5ForConditionalGeneration(config), 2.0)


def _prompts(left: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Three prompts of lengths 6, 4 and 2, padded (with 0) to the left for a decoder, to the right for an encoder."""
    ids = torch.randint(3, 100, (3, 6), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    for row, length in enumerate((6, 4, 2)):
        padded = slice(0, 6 - length) if left else slice(length, 6)
        ids[row, padded], mask[row, padded] = 0, 0
    return ids, mask


def _generate(model: torch.nn.Module, device: str, ids: torch.Tensor, mask: torch.Tensor, **options) -> object:
    model = model.to(device)
    torch.manual_seed(123)
    out = model.generate(ids.to(device), attention_mask=mask.to(device), max_new_tokens=5, **options)
    return out


def _on_both(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, **options) -> tuple[torch.Tensor, torch.Tensor]:
    cpu = _generate(model, "cpu", ids, mask, **options)
    device = _generate(model, "neuron", ids, mask, **options)
    return cpu, device


def test_greedy_left_padded_batch_with_stopping_criteria_matches_cpu():
    class StopAfter(StoppingCriteria):  # a user's criterion: stop a row at token 50
        def __call__(self, input_ids, scores, **kwargs):
            return input_ids[:, -1] == 50

    ids, mask = _prompts()
    cpu, device = _on_both(_gpt2(), ids, mask, do_sample=False, eos_token_id=[2, 7],
                           stopping_criteria=StoppingCriteriaList([StopAfter()]))
    assert device.device.type == "neuron"
    assert torch.equal(device.cpu(), cpu)


@pytest.mark.parametrize("options", [dict(temperature=0.7, top_k=20), dict(top_p=0.8, min_p=0.02),
                                     dict(top_k=10, num_return_sequences=2)], ids=["top_k", "top_p_min_p", "returns"])
def test_sampling_draws_cpus_tokens_after_manual_seed_and_repeats(options):
    ids, mask = _prompts()
    model = _gpt2()
    cpu, device = _on_both(model, ids, mask, do_sample=True, **options)
    again = _generate(model, "neuron", ids, mask, do_sample=True, **options)
    assert torch.equal(device.cpu(), cpu)
    assert torch.equal(again.cpu(), cpu)


def test_device_sampling_is_independent_of_the_cpu_generator():
    """A CPU draw between the seed and the generate (a DataLoader's base seed, a CPU init) moves CPU's samples,
    not the device's: the device draws from its own generator, as CUDA does."""
    ids, mask = _prompts()
    model = _gpt2().to("neuron")
    runs = []
    for cpu_draws in (0, 5):
        torch.manual_seed(7)
        torch.rand(cpu_draws)
        runs.append(model.generate(ids.to("neuron"), attention_mask=mask.to("neuron"), max_new_tokens=5,
                                   do_sample=True, top_k=20).cpu())
    assert torch.equal(runs[0], runs[1])


def test_beam_search_with_length_penalty_and_returns_matches_cpu():
    ids, mask = _prompts()
    options = dict(num_beams=4, length_penalty=0.6, early_stopping=True, num_return_sequences=2,
                   output_scores=True, return_dict_in_generate=True)
    cpu, device = _on_both(_gpt2(), ids, mask, **options)
    assert torch.equal(device.sequences.cpu(), cpu.sequences)
    torch.testing.assert_close(device.sequences_scores.cpu(), cpu.sequences_scores, rtol=1e-5, atol=1e-5)


def test_repetition_penalty_and_no_repeat_ngram_match_cpu():
    ids, mask = _prompts()
    cpu, device = _on_both(_gpt2(), ids, mask, do_sample=False, repetition_penalty=1.5, no_repeat_ngram_size=2)
    assert torch.equal(device.cpu(), cpu)


def test_llama_gqa_greedy_and_static_cache_match_cpu():
    """RoPE, grouped-query attention, RMSNorm; with ``cache_implementation="static"`` transformers compiles the
    decoding step itself on a ``neuron`` device, with ``torch.compile(backend="neuron")``."""
    ids, mask = _prompts()
    model = _llama()
    for options in (dict(do_sample=False, output_logits=True, return_dict_in_generate=True),
                    dict(do_sample=False, cache_implementation="static", output_logits=True,
                         return_dict_in_generate=True)):
        cpu, device = _on_both(model, ids, mask, **options)
        assert torch.equal(device.sequences.cpu(), cpu.sequences), options
        for on_cpu, on_device in zip(cpu.logits, device.logits):
            torch.testing.assert_close(on_device.cpu(), on_cpu, rtol=1e-4, atol=1e-4)


def test_encoder_decoder_beam_search_on_right_padded_inputs_matches_cpu():
    ids, mask = _prompts(left=False)
    cpu, device = _on_both(_t5(), ids, mask, num_beams=3, num_return_sequences=2)
    assert torch.equal(device.cpu(), cpu)


def test_fully_masked_attention_rows_are_cpus():
    """Rows of a padded batch whose every key is masked: softmax over -inf gives NaN on CPU; SDPA with a boolean
    mask gives CPU's values; the device gives the same (NaN where CPU has NaN)."""
    scores = torch.randn(2, 5, 5, generator=torch.Generator().manual_seed(2))
    keep = torch.ones(2, 5, 5, dtype=torch.bool).tril()
    keep[1, :, :2] = False
    q, k, v = (torch.randn(2, 2, 5, 8, generator=torch.Generator().manual_seed(s)) for s in (3, 4, 5))
    for compute in (lambda d: torch.softmax(scores.to(d).masked_fill(~keep.to(d), float("-inf")), -1),
                    lambda d: torch.nn.functional.scaled_dot_product_attention(
                        q.to(d), k.to(d), v.to(d), attn_mask=keep.unsqueeze(1).to(d))):
        cpu, device = compute("cpu"), compute("neuron").cpu()
        assert torch.equal(device.isnan(), cpu.isnan())
        torch.testing.assert_close(device, cpu, rtol=1e-6, atol=1e-6, equal_nan=True)
