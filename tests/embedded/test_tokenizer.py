"""The character tokenizer round-trips chains and loads back through transformers."""

import random

import pytest

from bsb.embedded.tokenizer import ALPHABET, SPECIALS, char_tokenizer, save_char_tokenizer
from bsb.tasks.synthetic.arith import make_chain, make_problem

transformers = pytest.importorskip("transformers")


def test_round_trip_of_chains_and_one_token_per_character():
    tok, rng = char_tokenizer(), random.Random(0)
    for kind in ("correct", "wrong", "corrected"):
        text = make_chain(make_problem(rng, 4), rng, kind).text
        ids = tok.encode(text, add_special_tokens=False)
        assert len(ids) == len(text) and tok.decode(ids) == text
    assert len(tok) == len(SPECIALS) + len(ALPHABET)


def test_newline_is_its_own_token_and_unknown_characters_map_to_unk():
    tok = char_tokenizer()
    assert tok.encode("\n", add_special_tokens=False) == [SPECIALS.__len__() + ALPHABET.index("\n")]
    assert tok.encode("é", add_special_tokens=False) == [SPECIALS.index("<unk>")]


def test_saved_tokenizer_loads_with_autotokenizer(tmp_path):
    save_char_tokenizer(tmp_path)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    text = "Compute 3 * (4 - 1).\n= 3 * 3\n= 9\nSo the final answer is \\boxed{9}."
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    assert tok.eos_token == "<eos>" and tok.pad_token_id == 0
