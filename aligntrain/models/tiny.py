"""The embedded study's base model: a character tokenizer and a tiny Llama.

Both are ordinary Hugging Face objects: the tokenizer is saved as
``tokenizer.json`` (a ``PreTrainedTokenizerFast``) and the model is a
``LlamaForCausalLM``; nothing downstream knows they are small.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"


def build_char_tokenizer(texts: Iterable[str]) -> PreTrainedTokenizerFast:
    """A character-level tokenizer whose vocabulary is every character of ``texts``.

    Each character is one token (``Split`` on the empty pattern), decoding fuses
    tokens back without separators, and every encoded text starts with ``<bos>``
    (the model conditions on it at position 0). Characters never seen map to ``<unk>``.
    """
    alphabet = sorted({ch for text in texts for ch in text})
    vocab = {token: i for i, token in enumerate([PAD, BOS, EOS, UNK, *alphabet])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK)


def build_tiny_llama(
    tokenizer: PreTrainedTokenizerFast,
    *,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    intermediate_size: int,
    max_length: int,
    seed: int,
) -> LlamaForCausalLM:
    """A freshly initialised ``LlamaForCausalLM`` sized for CPU training in minutes."""
    import torch

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_length,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        rope_theta=10_000.0,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)
