"""A tiny Qwen3 checkpoint on disk (head_dim 64, which vLLM's CPU attention supports) with a word-level fast
tokenizer whose tokens are "t0" … "t255": built locally, no downloads."""

import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers

VOCAB = 256


def build(path) -> None:
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="t0", pad_token="t0", eos_token="t1", bos_token="t2"
    )
    cfg = transformers.Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=1024,
        eos_token_id=1,
        pad_token_id=0,
        bos_token_id=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    fast.save_pretrained(path)
