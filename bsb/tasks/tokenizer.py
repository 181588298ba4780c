"""A character-level tokenizer for the synthetic task, saved as a Hugging Face fast tokenizer.

One token per character of a fixed alphabet (digits, letters, arithmetic and LaTeX punctuation, space and
newline) plus ``<pad>``, ``<eos>``, ``<bos>``, ``<unk>``. A character outside the alphabet maps to ``<unk>``.
Saved with ``save_pretrained``, it loads with ``transformers.AutoTokenizer`` and with vLLM.
"""

from __future__ import annotations

import string
from pathlib import Path

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
ALPHABET = list(string.digits + string.ascii_letters + " \n+-*/=().,:;!?{}[]\\^_'\"$%<>|&#@~`")


def char_tokenizer():
    """The tokenizer as a ``PreTrainedTokenizerFast`` (ids: the specials first, then the alphabet)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + ALPHABET)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character, \n too
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>",
                                   unk_token="<unk>", clean_up_tokenization_spaces=False)


def save_char_tokenizer(path: str | Path) -> None:
    char_tokenizer().save_pretrained(path)
