"""Tokenizers of the embedded models, saved as Hugging Face fast tokenizers.

``char_tokenizer``: one token per character of a fixed alphabet (digits, letters, arithmetic and LaTeX punctuation,
space and newline) plus ``<pad>``, ``<eos>``, ``<bos>``, ``<unk>``. A character outside the alphabet maps to ``<unk>``.
``walk_tokenizer``: the same, and every integer from 0 to ``NUMBER_MAX`` is one token, and so is each entry of a walk's
map (``c>e``); a longer digit run splits into such numbers, so every text still decodes back to itself. The walk
model's counts, map entries and answers are single tokens.
Saved with ``save_pretrained``, they load with ``transformers.AutoTokenizer`` and with vLLM.
"""

from __future__ import annotations

import string
from pathlib import Path

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
ALPHABET = list(string.digits + string.ascii_letters + " \n+-*/=().,:;!?{}[]\\^_'\"$%<>|&#@~`")
NUMBER_MAX = 199  # the walk tokenizer's largest single-token integer


def _tokenizer(vocab: list[str], split: str):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(split), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
    )


def char_tokenizer():
    """The character tokenizer as a ``PreTrainedTokenizerFast`` (ids: the specials first, then the alphabet)."""
    return _tokenizer(SPECIALS + ALPHABET, r"[\s\S]")  # every character, \n too


def walk_tokenizer():
    """The character tokenizer plus one token per integer 10..NUMBER_MAX (0-9 are characters) and per map entry of
    the walk task (``c>e``: two of its symbols around ``>``). A digit run is split greedily into the longest
    numbers in the vocabulary (``1`` + two digits, two digits, one digit)."""
    from bsb.tasks.synthetic.walk import SYMBOLS

    numbers = [str(n) for n in range(10, NUMBER_MAX + 1)]
    entries = [f"{a}>{b}" for a in SYMBOLS for b in SYMBOLS]
    return _tokenizer(
        SPECIALS + ALPHABET + numbers + entries, rf"[{SYMBOLS}]>[{SYMBOLS}]|1[0-9][0-9]|[1-9][0-9]|[\s\S]"
    )


def save_char_tokenizer(path: str | Path) -> None:
    char_tokenizer().save_pretrained(path)
