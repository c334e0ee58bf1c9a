"""Models: the character tokenizer and tiny Llama of the embedded study, and loading.

Every stage loads models with ``AutoModelForCausalLM.from_pretrained(path)``, so a
hub checkpoint (a 7B model saved locally) goes through the same code.
"""

from aligntrain.models.loading import load_model_and_tokenizer, save_model_and_tokenizer
from aligntrain.models.tiny import build_char_tokenizer, build_tiny_llama

__all__ = [
    "build_char_tokenizer",
    "build_tiny_llama",
    "load_model_and_tokenizer",
    "save_model_and_tokenizer",
]
