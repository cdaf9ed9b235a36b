"""Tiny model families built from the transformers library's config classes (no downloads).

Each family is a :class:`Family`: a model built from a tiny config (2 layers, hidden size 32, a 128-token
vocabulary, 16x16 or 32x32 images) and a batch that makes the model compute its own loss. ``build(family,
dropout=False)`` zeroes every dropout-like config field (``*dropout*``, ``*pdrop*``, ``drop_path_rate``) so
compiled and eager runs draw no random numbers and can be compared value for value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

VOCAB = 128
HIDDEN = 32
HEADS = 4
LAYERS = 2
FFN = 64
BATCH = 2
SEQ = 8

_LM = {"vocab_size": VOCAB, "max_position_embeddings": 64}


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # decoder | encoder | encoder-decoder | vision | multimodal
    model_class: str
    config_class: str
    config: dict[str, Any]
    batch: Callable[[torch.Generator], dict[str, torch.Tensor]]


def _tokens(generator: torch.Generator, length: int = SEQ) -> torch.Tensor:
    # token 0 and 1 are pad/bos/eos in several configs: draw from the rest
    return torch.randint(2, VOCAB, (BATCH, length), generator=generator)


def _causal_lm(generator: torch.Generator) -> dict[str, torch.Tensor]:
    ids = _tokens(generator)
    return {"input_ids": ids, "labels": ids}


def _classify_tokens(generator: torch.Generator) -> dict[str, torch.Tensor]:
    ids = _tokens(generator)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0  # a padded row: the attention mask takes part
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(0, 3, (BATCH,), generator=generator)}


def _seq2seq(generator: torch.Generator) -> dict[str, torch.Tensor]:
    return {"input_ids": _tokens(generator), "labels": _tokens(generator, SEQ - 2)}


def _images(size: int) -> Callable[[torch.Generator], dict[str, torch.Tensor]]:
    def batch(generator: torch.Generator) -> dict[str, torch.Tensor]:
        return {"pixel_values": torch.randn(BATCH, 3, size, size, generator=generator),
                "labels": torch.randint(0, 10, (BATCH,), generator=generator)}
    return batch


def _whisper(generator: torch.Generator) -> dict[str, torch.Tensor]:
    return {"input_features": torch.randn(BATCH, 16, 32, generator=generator), "labels": _tokens(generator, 6)}


def _clip(generator: torch.Generator) -> dict[str, torch.Tensor]:
    return {"input_ids": _tokens(generator), "pixel_values": torch.randn(BATCH, 3, 16, 16, generator=generator),
            "return_loss": True}


_DECODER = {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "intermediate_size": FFN, **_LM}
_ENCODER = {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "intermediate_size": FFN, "num_labels": 3, **_LM}
_SEQ2SEQ = {"d_model": HIDDEN, "encoder_layers": LAYERS, "decoder_layers": LAYERS, "encoder_attention_heads": HEADS,
            "decoder_attention_heads": HEADS, "encoder_ffn_dim": FFN, "decoder_ffn_dim": FFN, **_LM}
_VIT = {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": FFN}

FAMILIES: dict[str, Family] = {f.name: f for f in [
    # decoder language models
    Family("gpt2", "decoder", "GPT2LMHeadModel", "GPT2Config",
           {"n_layer": LAYERS, "n_embd": HIDDEN, "n_head": HEADS, "n_positions": 64, "vocab_size": VOCAB,
            "bos_token_id": 0, "eos_token_id": 0}, _causal_lm),
    Family("llama", "decoder", "LlamaForCausalLM", "LlamaConfig", {**_DECODER, "num_key_value_heads": 2}, _causal_lm),
    Family("mistral", "decoder", "MistralForCausalLM", "MistralConfig",
           {**_DECODER, "num_key_value_heads": 2, "sliding_window": 4}, _causal_lm),
    # Qwen2 is transformers' Mistral model with Llama's attention plus q/k/v biases and sliding window attention
    # from layer max_window_layers on: here its second layer slides (a window shorter than SEQ), so it runs
    # Mistral's sliding-window mask and a full causal one, beside the biases
    Family("qwen2", "decoder", "Qwen2ForCausalLM", "Qwen2Config",
           {**_DECODER, "num_key_value_heads": 2, "use_sliding_window": True, "sliding_window": 4,
            "max_window_layers": 1}, _causal_lm),
    Family("gpt_neox", "decoder", "GPTNeoXForCausalLM", "GPTNeoXConfig", _DECODER, _causal_lm),
    Family("opt", "decoder", "OPTForCausalLM", "OPTConfig",
           {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "ffn_dim": FFN,
            "word_embed_proj_dim": HIDDEN, **_LM}, _causal_lm),
    Family("bloom", "decoder", "BloomForCausalLM", "BloomConfig",
           {"hidden_size": HIDDEN, "n_layer": LAYERS, "n_head": HEADS, "vocab_size": VOCAB}, _causal_lm),
    Family("falcon", "decoder", "FalconForCausalLM", "FalconConfig",
           {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "vocab_size": VOCAB},
           _causal_lm),
    # encoders
    Family("bert", "encoder", "BertForSequenceClassification", "BertConfig", _ENCODER, _classify_tokens),
    Family("roberta", "encoder", "RobertaForSequenceClassification", "RobertaConfig", _ENCODER, _classify_tokens),
    Family("distilbert", "encoder", "DistilBertForSequenceClassification", "DistilBertConfig",
           {"dim": HIDDEN, "n_layers": LAYERS, "n_heads": HEADS, "hidden_dim": FFN, "num_labels": 3, **_LM},
           _classify_tokens),
    Family("albert", "encoder", "AlbertForSequenceClassification", "AlbertConfig",
           {**_ENCODER, "embedding_size": 16}, _classify_tokens),
    # encoder-decoders
    Family("t5", "encoder-decoder", "T5ForConditionalGeneration", "T5Config",
           {"d_model": HIDDEN, "d_kv": 8, "d_ff": FFN, "num_layers": LAYERS, "num_heads": HEADS,
            "vocab_size": VOCAB, "decoder_start_token_id": 0}, _seq2seq),
    Family("bart", "encoder-decoder", "BartForConditionalGeneration", "BartConfig", _SEQ2SEQ, _seq2seq),
    Family("whisper", "encoder-decoder", "WhisperForConditionalGeneration", "WhisperConfig",
           {**_SEQ2SEQ, "num_mel_bins": 16, "max_source_positions": 16, "max_target_positions": 32,
            "decoder_start_token_id": 1, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 1}, _whisper),
    # vision
    Family("vit", "vision", "ViTForImageClassification", "ViTConfig",
           {**_VIT, "image_size": 16, "patch_size": 4, "num_labels": 10}, _images(16)),
    Family("swin", "vision", "SwinForImageClassification", "SwinConfig",
           {"image_size": 32, "patch_size": 4, "embed_dim": 16, "depths": [1, 1], "num_heads": [2, 2],
            "window_size": 4, "num_labels": 10}, _images(32)),
    Family("convnext", "vision", "ConvNextForImageClassification", "ConvNextConfig",
           {"hidden_sizes": [8, 16], "depths": [1, 1], "num_stages": 2, "num_labels": 10, "image_size": 32}, _images(32)),
    Family("resnet", "vision", "ResNetForImageClassification", "ResNetConfig",
           {"embedding_size": 8, "hidden_sizes": [8, 16], "depths": [1, 1], "num_labels": 10}, _images(32)),
    # multimodal
    Family("clip", "multimodal", "CLIPModel", "CLIPConfig",
           {"text_config": {**_VIT, "vocab_size": VOCAB, "max_position_embeddings": 64, "bos_token_id": 0,
                            "eos_token_id": 1, "pad_token_id": 1},
            "vision_config": {**_VIT, "image_size": 16, "patch_size": 4}, "projection_dim": 16}, _clip),
]}

_DROPOUT_WORDS = ("dropout", "pdrop", "drop_path")


def _zero_dropout(config: Any) -> None:
    """Every dropout-like probability of ``config`` (and its sub-configs) set to 0."""
    for key, value in list(vars(config).items()):
        if isinstance(value, float) and any(word in key for word in _DROPOUT_WORDS):
            setattr(config, key, 0.0)
        elif hasattr(value, "to_dict") and hasattr(value, "model_type"):
            _zero_dropout(value)


def build(family: Family, *, dropout: bool, seed: int = 0) -> torch.nn.Module:
    """The family's model, initialized from ``seed``; ``dropout=False`` zeroes every dropout probability."""
    import transformers

    config = getattr(transformers, family.config_class)(**family.config)
    if not dropout:
        _zero_dropout(config)
    torch.manual_seed(seed)
    model = getattr(transformers, family.model_class)(config)
    return model.train()


def has_dropout(model: torch.nn.Module) -> bool:
    """True if any module of ``model`` would draw random numbers in training mode."""
    for module in model.modules():
        for name in ("p", "dropout", "attention_dropout", "drop_prob", "drop_path_rate"):
            value = getattr(module, name, None)
            if isinstance(value, float) and value > 0:
                return True
    return False


def batch(family: Family, seed: int = 1) -> dict[str, Any]:
    return family.batch(torch.Generator().manual_seed(seed))
