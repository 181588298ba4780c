"""verl's own environment (see the Makefile's verl-env): the plugin against verl 0.9.1 on the CPU."""

import importlib.util
import os

import pytest

if importlib.util.find_spec("verl") is None:
    raise ImportError("tests/on_verl need verl: run them in .venv-verl (make verl-env; make test does)")


CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """The tiny Qwen3 checkpoint with a Qwen-like tokenizer verl accepts: "t0" … "t255", except that id 7 is the line
    break (the scripted chains' NL) and ids 3 and 4 are ChatML's <|im_start|> and <|im_end|>; a ChatML template."""
    import transformers
    from tiny_checkpoint import VOCAB, build
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    path = tmp_path_factory.mktemp("tiny-qwen3-verl")
    build(path)
    vocab = {f"t{i}": i for i in range(VOCAB)}
    for i, text in {7: "\n", 3: "<|im_start|>", 4: "<|im_end|>"}.items():
        del vocab[f"t{i}"]
        vocab[text] = i
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex("\n"), behavior="isolated"),
                                                 pre_tokenizers.Split(" ", behavior="removed")])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", pad_token="t0", eos_token="t1", bos_token="t2",
                                                additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    fast.chat_template = CHAT
    fast.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def compose():
    return compose_config


def compose_config(*overrides):
    """``bsb_tree.yaml`` composed on verl's defaults with ``overrides`` (what the launcher runs)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from bsb.integrations.verl.launch import CONFIG_DIR

    with initialize_config_dir(CONFIG_DIR, version_base=None):
        return hydra_compose("bsb_tree", overrides=list(overrides))


@pytest.fixture(scope="session")
def overrides(tiny):
    """Overrides that make bsb_tree.yaml a CPU-sized run on :func:`tiny` with the scripted task."""
    return [f"actor_rollout_ref.model.path={tiny}", "data.max_prompt_length=32", "data.max_response_length=64",
            "bsb.task=scripted_server:ScriptedTask", "bsb.top_k=5", "bsb.overlong_buffer=16",
            "actor_rollout_ref.rollout.agent.num_workers=1", f"data.train_files={os.devnull}", f"data.val_files={os.devnull}"]
