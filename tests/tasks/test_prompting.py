"""A rendered prompt's ids (bsb.tasks.prompting.encode_prompt): the tokenizer's BOS exactly once on plain text where
its own settings put one before every input, never an EOS; a chat prompt as its template wrote it (never two BOS);
no BOS for a tokenizer that has none or adds none. On the real tokenizers too: Gemma 3 adds BOS, SmolLM2 does not
(slow: ``make models``)."""

import re

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from bsb.tasks.prompting import adds_bos, encode_prompt

transformers = pytest.importorskip("transformers")

WORDS = ["<pad>", "<bos>", "<eos>", "<unk>", "what", "is", "2", "+", "?"]
CHAT = "{{ bos_token }}{% for m in messages %}{{ m['content'] }} {% endfor %}"


def word_tokenizer(post: str | None = None, bos: bool = True):
    """A word-level fast tokenizer; ``post``: its post-processor's template (``"<bos> $A"``, ``"<bos> $A <eos>"``)."""
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if post:
        tok.post_processor = processors.TemplateProcessing(single=post, special_tokens=[("<bos>", 1), ("<eos>", 2)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                                eos_token="<eos>", **({"bos_token": "<bos>"} if bos else {}))
    fast.chat_template = CHAT
    return fast


@pytest.mark.parametrize("post", ["<bos> $A", "<bos> $A <eos>"])
def test_plain_text_gets_the_bos_its_tokenizer_adds_once_and_never_an_eos(post):
    tok = word_tokenizer(post)
    assert adds_bos(tok)
    assert encode_prompt(tok, "what is 2 + 2 ?") == [1, 4, 5, 6, 7, 6, 8]
    assert encode_prompt(tok, "<bos> what is 2 ?") == [1, 4, 5, 6, 8]  # a text that starts with it: not doubled


def test_a_chat_prompt_keeps_the_bos_its_template_wrote_and_gets_no_second():
    tok = word_tokenizer("<bos> $A")
    text = tok.apply_chat_template([{"role": "user", "content": "what is 2 ?"}], tokenize=False)
    ids = encode_prompt(tok, text, "chat")
    assert ids[:2] == [1, 4] and ids.count(1) == 1
    # what transformers encodes for the same conversation
    assert ids == tok.apply_chat_template([{"role": "user", "content": "what is 2 ?"}], tokenize=True,
                                          return_dict=True)["input_ids"]


@pytest.mark.parametrize("post,bos", [(None, True), (None, False), ("$A <eos>", True)])
def test_no_bos_where_the_tokenizer_adds_none_or_has_none(post, bos):
    tok = word_tokenizer(post, bos)  # (None, False): a Qwen-style tokenizer, no BOS at all
    assert not adds_bos(tok)
    assert encode_prompt(tok, "what is 2 ?") == [4, 5, 6, 8]
    assert encode_prompt(tok, "what is 2 ?", "chat") == [4, 5, 6, 8]


def test_an_unknown_prompt_format_is_refused():
    with pytest.raises(ValueError, match="prompt_format must be one of plain, chat"):
        encode_prompt(word_tokenizer(), "what", "markdown")


@pytest.mark.slow
@pytest.mark.parametrize("name,adds", [("gemma3-270m", True), ("smollm2-135m", False)])
def test_the_real_tokenizers(name, adds):
    from real_models import real_model

    tok = transformers.AutoTokenizer.from_pretrained(real_model(name))
    assert adds_bos(tok) == adds
    ids = encode_prompt(tok, "Question: What is 2 + 3?\n")
    assert ids[:1] == ([tok.bos_token_id] if adds else ids[:1]) and ids.count(tok.bos_token_id or -1) == int(adds)
    assert tok.eos_token_id not in ids


BAD_OPTIONS = [
    (dict(prompt_template="Q: {question} {prompt}"), "does not format (it names {question})"),
    (dict(prompt_template="Q:"), "must contain {prompt}"),
    (dict(prompt_template="{prompt} \\boxed{}"), "write {{ and }} for a literal brace"),
    (dict(prompt_format="markdown"), "markdown"),
    (dict(system_prompt="Be brief."), "set prompt_format=chat"),
]


@pytest.mark.parametrize("options,message", BAD_OPTIONS)
def test_every_command_declares_the_prompt_options_once_with_the_same_errors(options, message):
    """bsb train, validate, evaluate, demo and data share one declaration (PromptConfig): the same fields and
    defaults, and a bad value is the same one error before anything loads."""
    import dataclasses

    from bsb.commands.data import DataConfig
    from bsb.commands.demo import DemoConfig
    from bsb.commands.evaluate import EvaluateConfig
    from bsb.commands.validate import ValidateConfig
    from bsb.tasks.prompting import PromptConfig
    from bsb.train.config import TrainConfig

    declared = {f.name: f for f in dataclasses.fields(PromptConfig)}
    for cls in (TrainConfig, ValidateConfig, EvaluateConfig, DemoConfig, DataConfig):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert all(fields[n] is f or fields[n].metadata is f.metadata for n, f in declared.items()), cls.__name__
        extra = dict(file="x.jsonl") if cls is DataConfig else {}
        with pytest.raises(ValueError, match=re.escape(message)):
            cls(**options, **extra)


def test_a_template_renders_the_same_text_for_every_command():
    from bsb.tasks.base import Problem
    from bsb.tasks.prompting import PromptConfig

    class Task:
        def format_prompt(self, problem):
            return problem.prompt

    cfg = PromptConfig(prompt_template="Question: {prompt}\nPut the answer in \\boxed{{}}.")
    assert cfg.render(Task(), Problem("p0", "2 + 3?", "5")) == "Question: 2 + 3?\nPut the answer in \\boxed{}."
