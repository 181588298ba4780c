"""The embedded default model: a test-size variant trains from scratch, deterministically, and loads back."""

import dataclasses
import json

import pytest
import torch

from bsb.embedded.model import TinyConfig, accuracy_by_difficulty, train_tiny_model

transformers = pytest.importorskip("transformers")

SMALL = TinyConfig(steps=6, batch=8, hidden=64, layers=2)


def test_trains_loads_and_is_deterministic(tmp_path):
    a = train_tiny_model(SMALL, tmp_path / "a", progress=False)
    b = train_tiny_model(SMALL, tmp_path / "b", progress=False)
    ma = transformers.AutoModelForCausalLM.from_pretrained(a)
    mb = transformers.AutoModelForCausalLM.from_pretrained(b)
    assert ma.config.head_dim == 64 and ma.config.model_type == "qwen3"
    for (na, pa), (_, pb) in zip(ma.state_dict().items(), mb.state_dict().items()):
        assert torch.equal(pa, pb), na
    meta = json.loads((a / "bsb_train.json").read_text())
    assert meta["config"]["steps"] == 6 and meta["final_loss"] > 0
    tok = transformers.AutoTokenizer.from_pretrained(a)
    assert tok.decode(tok.encode("= 3 * 4\n", add_special_tokens=False)) == "= 3 * 4\n"


def test_cached_checkpoint_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("BSB_CACHE", str(tmp_path))
    first = train_tiny_model(SMALL, progress=False)
    assert first.parent == tmp_path and first.name == SMALL.key()
    stamp = (first / "bsb_train.json").stat().st_mtime
    assert train_tiny_model(SMALL, progress=False) == first
    assert (first / "bsb_train.json").stat().st_mtime == stamp


def test_accuracy_by_difficulty_runs(tmp_path):
    path = train_tiny_model(SMALL, tmp_path, progress=False)
    acc = accuracy_by_difficulty(path, per_op=3, ops=(1, 2))
    assert set(acc) == {1, 2} and all(0.0 <= v <= 1.0 for v in acc.values())


WALK = TinyConfig(steps=6, batch=4, hidden=64, layers=1, ops=(3, 4), task="walk")


def test_the_walk_default_trains_deterministically_with_numbers_as_tokens_and_probe_examples(tmp_path):
    from bsb.embedded.model import EMBEDDED, _examples
    from bsb.tasks.synthetic.walk import SUFFIX, SYMBOLS

    assert EMBEDDED.task == "walk" and "-taskwalk-" in EMBEDDED.key() and "probe_frac" in EMBEDDED.key()
    assert "probe_frac" not in TinyConfig().key()  # arith caches keep their names
    a = train_tiny_model(WALK, tmp_path / "a", progress=False)
    b = train_tiny_model(WALK, tmp_path / "b", progress=False)
    for (na, pa), (_, pb) in zip(transformers.AutoModelForCausalLM.from_pretrained(a).state_dict().items(),
                                 transformers.AutoModelForCausalLM.from_pretrained(b).state_dict().items()):
        assert torch.equal(pa, pb), na
    tok = transformers.AutoTokenizer.from_pretrained(a)
    assert len(tok.encode(f"{SUFFIX}c", add_special_tokens=False)) == 3 and len(tok.encode("c>e", add_special_tokens=False)) == 1
    examples = _examples(TinyConfig(steps=50, batch=4, ops=(3, 4), task="walk"))
    probes = [seq for _, seqs in examples for seq in seqs[1:]]
    assert 0.3 < len(probes) / len(examples) < 0.7  # probe_frac 0.5 of the chains also teach the final answer
    assert all(ctx.endswith(SUFFIX) and not eos and target in SYMBOLS and len(target) == 1 for ctx, target, eos in probes)
    assert all(seqs[0][2] for _, seqs in examples)  # the chains themselves end with EOS


def test_slip_probes_cut_a_fresh_wrong_chain_of_the_problem_after_its_slip_and_new_fields_keep_old_keys():
    """probe_slip: that share of the probe examples is a fresh wrong chain of the same problem, cut within the window
    after its wrong line (its answer: where the slipped walk ends); corrected, probe_window and probe_slip at their
    first values leave the earlier models' cache keys as they were."""
    from bsb.embedded.model import EMBEDDED, _examples
    from bsb.tasks.synthetic.walk import SUFFIX

    for field in ("corrected", "probe_window", "probe_slip"):
        assert field in EMBEDDED.key() and field not in TinyConfig(task="walk").key()
    base = TinyConfig(steps=40, batch=4, ops=(9, 12), task="walk", probe_frac=1.0)
    slip = _examples(dataclasses.replace(base, probe_slip=1.0, probe_window=2, detour_frac=0.0))
    for _, ((prompt, chain, _), (context, answer, _)) in slip:
        lines = context[len(prompt) : -len(SUFFIX)].splitlines()
        assert context.startswith(prompt) and context.endswith(SUFFIX) and lines  # cut after a line
        assert not chain.startswith("".join(ln + "\n" for ln in lines))  # not the training chain: it has no detour
        succ = dict(entry.split(">") for entry in prompt.split()[1:-1])
        here, left = lines[-1][-1], int(lines[-1][:-3]) - 1
        for _ in range(left):
            here = succ[here]
        assert answer == here  # where the walk ends from the slip on


def test_the_loss_weighs_the_probe_answers_like_the_chains():
    from bsb.embedded.model import _loss

    logits = torch.randn(3, 5, 7)
    labels = torch.full((3, 5), -100)
    labels[0, 1:4] = torch.tensor([1, 2, 3])
    labels[1, 2:5] = torch.tensor([4, 5, 6])
    labels[2, 4] = 2  # a probe row: one answer token
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 7), labels[:, 1:].reshape(-1), reduction="none", ignore_index=-100).view(3, 4)
    want = nll[:2][labels[:2, 1:] != -100].mean() + nll[2, 3]
    torch.testing.assert_close(_loss(logits, labels, torch.tensor([False, False, True])), want)
    torch.testing.assert_close(_loss(logits[:2], labels[:2], torch.tensor([False, False])), nll[:2][labels[:2, 1:] != -100].mean())


def test_the_code_variant_trains_on_programs_and_keeps_the_arith_keys():
    code = TinyConfig(steps=4, batch=4, hidden=64, layers=1, task="code")
    assert code.key().endswith("-taskcode") and "task" not in SMALL.key()  # arith caches keep their names
    with pytest.raises(ValueError, match="task"):
        TinyConfig(task="chess")


def test_embedded_resolves_per_task(monkeypatch, tmp_path):
    from bsb.embedded import model as tiny_model
    from bsb.tasks.registry import make_task

    seen = []
    monkeypatch.setattr(tiny_model, "train_tiny_model", lambda cfg, *a, **k: seen.append(cfg) or tmp_path)
    tiny_model.resolve_model("embedded", make_task("code", {"workers": 1}))
    tiny_model.resolve_model("embedded", make_task("arith"))
    tiny_model.resolve_model("embedded", make_task("walk"))
    tiny_model.resolve_model("embedded")
    assert [c.task for c in seen] == ["code", "arith", "walk", "walk"] and seen[0] == tiny_model.EMBEDDED_CODE
    assert seen[1] == tiny_model.EMBEDDED_ARITH and seen[3] == tiny_model.EMBEDDED


def test_a_half_written_cache_entry_is_rebuilt_not_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv("BSB_CACHE", str(tmp_path))
    half = tmp_path / SMALL.key()
    half.mkdir()
    (half / "config.json").write_text("{ truncated")  # a run killed while saving: no bsb_train.json
    path = train_tiny_model(SMALL, progress=False)
    assert path == half and (path / "bsb_train.json").exists()
    transformers.AutoModelForCausalLM.from_pretrained(path)  # a whole checkpoint now
    assert [p.name for p in tmp_path.iterdir()] == [SMALL.key()]  # no temporary directory left beside it
