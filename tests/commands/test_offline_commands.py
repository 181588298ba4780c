"""`bsb validate` and `bsb evaluate` end to end on a test-size synthetic-task model (small m, N_MC)."""

import json

import numpy as np
import pytest
import torch

from bsb.cli import main
from bsb.embedded.model import TinyConfig, train_tiny_model
from bsb.eval.bsv_crossfit import regimes

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(train_tiny_model(TinyConfig(steps=60, batch=8, hidden=64, layers=1, max_operand=3, ops=(1, 2)),
                                tmp_path_factory.mktemp("tiny"), progress=False))


def test_validate_writes_everything_and_resumes_without_new_completions(model_dir, tmp_path, capsys):
    out = tmp_path / "val"
    args = ["validate", model_dir, "--task", "arith", "--n-problems", "4", "--m", "6", "--n-mc", "3", "--b", "2", "--backend", "hf",
            "--max-response", "64", "--out", str(out)]
    main(args)
    for name in ("chains.jsonl", "completions.jsonl", "curves.jsonl", "table.md"):
        assert (out / name).exists(), name
    rows = [json.loads(x) for x in (out / "curves.jsonl").read_text().splitlines()]
    done = len((out / "completions.jsonl").read_text().splitlines())
    assert done == sum(len(r["cuts"]) for r in rows) * 3
    for r in rows:
        assert set(r["error"]) >= {"probe_js", "lens_shift", "entropy", "midpoint"} and len(r["v_star"]) == len(r["cuts"])
        assert all(r["error"][n] >= r["floor"] - 1e-9 for n in r["error"])  # no selector beats the DP floor
        # the reads' cost: Probe-JS forwards at least its C·(E + L − 1) floor; Midpoint reads nothing
        assert r["read_tokens"]["probe_js"] >= r["read_floor"]["probe_js"] > 0 or len(r["cuts"]) < 2
        assert "midpoint" not in r["read_tokens"]  # it reads nothing
    table = (out / "table.md").read_text()
    assert "oracle floor" in table and "Fork contrast" in table and "Lag diagnostic" in table and "nan" not in table
    assert "Read cost:" in table and " probe_js " in table.split("Read cost:")[1].splitlines()[0]
    live = [r for r in rows if not r["flat"]]
    assert ("B/m=" in table) if live else ("B/m n/a (no non-flat chain)" in table)  # never B/m=nan
    # V*'s steps against their sampling noise, over the non-flat chains (none: no line)
    assert ("V* resolution (over the non-flat chains):" in table and "3-draw estimates" in table) == bool(live)
    # ... and the oracle of draw 0 scored on draw 1 and back (N_MC 3: the third left out)
    assert ("Split-half oracle" in table and "V* of draw 0, scored on V* of draw 1 and back" in table) == bool(live)
    assert all(r["b"] == 2 for r in rows)
    lag = json.loads((out / "lag.json").read_text())
    assert set(lag) >= {"belief", "probe_js", "entropy"} and set(lag["probe_js"]["lags"]) == {"-2", "-1", "0", "1", "2"}
    assert any(r["flat"] for r in rows) or (out / "lag.png").exists()
    assert (out / "contrast.png").exists() == ("Probe-JS tercile: none" not in (out / "table.md").read_text())
    main(args + ["--b-ratio", "0.5", "--out", str(tmp_path / "ratio")])  # B = half of each chain's boundaries
    ratio_rows = [json.loads(x) for x in (tmp_path / "ratio" / "curves.jsonl").read_text().splitlines()]
    assert [r["b"] for r in ratio_rows] == [max(1, round(0.5 * len(r["cuts"]))) for r in ratio_rows]
    reads = (out / "reads.jsonl").read_text().splitlines()  # a line a (chain, selector) read, kept as it was done
    # every read but those that could not score and read nothing (Lens-Shift on a chain without a committed answer)
    assert len(reads) == sum(not (r["fallback"][n] and not r["read_tokens"].get(n)) for r in rows for n in r["error"])
    assert all(r["read_seconds"].keys() == r["error"].keys() for r in rows)
    # a run stopped among its reads (the last line torn) reads again only what it had not kept
    (out / "reads.jsonl").write_text("\n".join(reads[: len(reads) // 2]) + "\n" + reads[len(reads) // 2][:20])
    main(args)  # rerun: everything is reused
    assert len((out / "completions.jsonl").read_text().splitlines()) == done
    def read(line):
        return {k: v for k, v in json.loads(line).items() if k != "seconds"}

    assert sorted(map(str, map(read, (out / "reads.jsonl").read_text().splitlines()))) == sorted(map(str, map(read, reads)))  # each read once, the same
    again = [json.loads(x) for x in (out / "curves.jsonl").read_text().splitlines()]
    assert [(r["scores"], r["top_b"], r["read_tokens"]) for r in again] == [(r["scores"], r["top_b"], r["read_tokens"]) for r in rows]
    printed = capsys.readouterr().out
    main(args + ["--bsv-cross-fit"])  # bsv fitted on these very curves, a fold on the other's: nothing sampled
    assert len((out / "completions.jsonl").read_text().splitlines()) == done
    crossed = capsys.readouterr().out
    crossed_rows = [json.loads(x) for x in (out / "curves.jsonl").read_text().splitlines()]
    fold = {p: k % 2 for k, p in enumerate(dict.fromkeys(r["prompt"] for r in crossed_rows))}
    moves = {k: {g for r in crossed_rows if fold[r["prompt"]] != k for g in regimes(r["v_star"])} for k in (0, 1)}
    added = len((out / "reads.jsonl").read_text().splitlines()) - len(reads)  # the other selectors' reads are kept
    if all(moves[k] >= {"surge", "steady", "drop"} for k in (0, 1)):
        assert all("bsv" in r["error"] for r in crossed_rows) and (out / "bsv_fold1.pt").exists() and added == len(rows)
        assert "bsv for fold 0: layer" in crossed and "| bsv |" in (out / "table.md").read_text()
    else:  # too few moving chains on this tiny model: said, and bsv left out of the table
        assert "bsv is not scored: fold" in crossed and all("bsv" not in r["error"] for r in crossed_rows) and added == 0
        assert "bsv (--bsv-cross-fit) is not scored: fold" in (out / "table.md").read_text()  # the table says why
    assert "wrote table.md, curves.jsonl, lag.json" in printed  # what it writes, as it writes it
    live = [r for r in rows if not r["flat"]]
    if live:  # the selector printed first is the one with the lowest mean E over the non-flat curves
        names = list(live[0]["error"])
        best = sorted(names, key=lambda n: float(np.mean([r["error"][n] for r in live])))[0]
        assert f"ranks first: {best} " in printed and "every V* curve was flat" not in printed
    else:
        assert "every V* curve was flat" in printed and "ranks first" not in printed


def test_evaluate_runs_voting_and_branching_on_a_problem_file(model_dir, tmp_path):
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Compute {i} + 1.\n", "answer": str(i + 1)}) + "\n" for i in range(3)))
    out = tmp_path / "ev"
    main(["evaluate", model_dir, str(problems), "--n-problems", "3", "--max-response", "48", "--out", str(out)])
    table = (out / "table.md").read_text()
    for mode in ("mean@1", "rand_maj@3", "maxlen_maj@3", "mdl_maj@3", "completed_root_maj@3", "pass@3",
                 "min_margin_fork@3:mdl_maj", "first_gap_fork@3:completed_root_maj"):
        assert mode in table
    items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    assert len(items) == 3 and all(len(i["sampled"]) == 3 for i in items)


def test_validate_ranks_each_fold_by_the_bsv_direction_the_other_fold_fitted(model_dir, tmp_path, monkeypatch, capsys):
    import bsb.commands.validate as validate

    calls = []

    def moving(*args, **kw):  # V* with a surge, a drop or a steady stretch first, by chain (no completions sampled)
        cuts, k = args[3], len(calls)
        start = [[0.25, 0.75, 0.75], [0.75, 0.25, 0.25], [0.25, 0.25, 0.75]][k % 3]
        calls.append(kw["chain_id"])
        return [start[min(j, 2)] for j in range(len(cuts))]

    monkeypatch.setattr(validate, "mc_values", moving)
    out = tmp_path / "cross"
    main(["validate", model_dir, "--task", "arith", "--n-problems", "8", "--m", "6", "--n-mc", "2", "--b", "1",
          "--backend", "hf", "--max-response", "64", "--selectors", "midpoint", "--bsv-cross-fit", "--out", str(out)])
    printed = capsys.readouterr().out
    rows = [json.loads(x) for x in (out / "curves.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == calls and len(rows) >= 6
    assert "bsv for fold 0: layer" in printed and "bsv for fold 1: layer" in printed
    assert (out / "bsv_fold0.pt").exists() and (out / "bsv_fold1.pt").exists()
    assert all(set(r["error"]) == {"midpoint", "bsv"} and len(r["scores"]["bsv"]) == len(r["cuts"]) for r in rows)
    assert "| midpoint |" in (out / "table.md").read_text() and "| bsv |" in (out / "table.md").read_text()
    # the folds' directions differ, and each chain's scores are its own fold's projections (not the other's)
    from bsb.engine.bsv import BSVDirection

    d0, d1 = BSVDirection.load(out / "bsv_fold0.pt"), BSVDirection.load(out / "bsv_fold1.pt")
    assert not (d0.layer == d1.layer and torch.allclose(d0.u_minus, d1.u_minus))


def test_validate_measures_the_curves_resolution_and_the_split_half_oracle(model_dir, tmp_path, monkeypatch, capsys):
    """Chains whose draws fail before the middle boundary and pass from it on: the table and the console give V*'s
    steps against their noise and the split-half oracle over every chain (its draws all in the store); a chain whose
    draws are not all kept is left out of the oracle and counted."""
    import bsb.commands.validate as validate

    def stepped(*args, **kw):
        cuts, n_mc, store = args[3], args[4], kw["store"]
        rows = [(kw["chain_id"], c, j, k >= len(cuts) // 2, "", 1) for k, c in enumerate(cuts) for j in range(n_mc)]
        store.add(rows[:-1] if kw["chain_id"].endswith("0") else rows)  # arith-0's last draw not kept
        return [float(k >= len(cuts) // 2) for k in range(len(cuts))]

    monkeypatch.setattr(validate, "mc_values", stepped)
    out = tmp_path / "stepped"
    main(["validate", model_dir, "--task", "arith", "--n-problems", "4", "--m", "6", "--n-mc", "4", "--b", "2",
          "--backend", "hf", "--max-response", "64", "--selectors", "midpoint", "--out", str(out)])
    printed = capsys.readouterr().out
    rows = [json.loads(x) for x in (out / "curves.jsonl").read_text().splitlines()]
    live = [r for r in rows if not r["flat"]]
    assert len(live) >= 2, "the stepped curves move wherever a chain has two boundaries"
    table = (out / "table.md").read_text()
    for text in (table, " ".join(printed.split())):
        assert "V* resolution (over the non-flat chains):" in text and "4-draw estimates" in text
        assert "ratio n/a: every estimate 0 or 1" in text  # 0/1 curves: no sampling noise estimated
        lost = sum(r["id"].endswith("0") for r in live)
        assert f"over {len(live) - lost} chain" in text and (f"{lost} chain left out" in text) == bool(lost)
    assert "Split-half oracle" in table and "V* of draws 0-1, scored on V* of draws 2-3 and back" in table
    # the lag diagnostic's gold beliefs are kept beside the reads (one line a non-flat chain): a rerun reads none again
    reads = (out / "reads.jsonl").read_text().splitlines()
    assert len(reads) == len(rows) + len(live)  # Midpoint's read of every chain, the gold belief of each moving one

    def no_more(*args, **kw):
        raise AssertionError("a kept gold belief was read again")

    import bsb.eval.validation as validation

    monkeypatch.setattr(validation, "answer_belief", no_more)
    main(["validate", model_dir, "--task", "arith", "--n-problems", "4", "--m", "6", "--n-mc", "4", "--b", "2",
          "--backend", "hf", "--max-response", "64", "--selectors", "entropy", "--out", str(out)])  # no Midpoint
    assert "Split-half oracle: not measured (it holds the oracle against Midpoint's points: add midpoint to " \
        "--selectors)." in (out / "table.md").read_text()


def test_validate_rejects_token_window_selectors(capsys):
    with pytest.raises(SystemExit):
        main(["validate", "--selectors", "min_margin"])
    assert "token positions" in capsys.readouterr().err


def test_validate_takes_one_source_of_bsvs_direction(capsys):
    with pytest.raises(SystemExit):
        main(["validate", "--bsv", "direction.pt", "--bsv-cross-fit"])
    assert "pass one of them" in capsys.readouterr().err


def test_validate_engine_dtype_is_checked_and_needs_the_vllm_engine(capsys):
    for args, said in ((["--engine-dtype", "bf17"], "bf17"), (["--backend", "hf", "--engine-dtype", "bfloat16"],
                                                              "the HF backend samples with --dtype")):
        with pytest.raises(SystemExit):
            main(["validate", *args])
        assert said in capsys.readouterr().err


def test_validate_samples_with_the_engine_dtype_and_reads_with_the_models(model_dir, tmp_path, monkeypatch):
    """--engine-dtype reaches the rollout engine (a stand-in that records what it was asked for and samples with the
    HF model); the reads' model keeps --dtype. The engine is closed once every sample is drawn, before any read (its
    weights and KV cache would otherwise sit beside the reads: the Qwen code run ended at 16 GB for it). Where no
    engine serves (the HF backend chosen), it is an error."""
    import bsb.commands.validate as validate

    asked, calls = [], []

    def engine(kind, path, hf, max_len, seed, dtype, log_file):
        asked.append((kind, dtype, hf.model.dtype))
        return hf if kind == "hf" else _Sampler(hf)

    class _Sampler:  # not the HF backend object itself: run_validate sees an engine
        def __init__(self, hf):
            self.hf = hf

        def generate(self, *a, **kw):
            calls.append("generate")
            return self.hf.generate(*a, **kw)

        def close(self):
            calls.append(("close", (tmp_path / "bf16" / "reads.jsonl").exists()))

    monkeypatch.setattr(validate, "make_rollout_backend", engine)
    base = ["validate", model_dir, "--task", "arith", "--n-problems", "2", "--m", "4", "--n-mc", "2", "--b", "1",
            "--max-response", "32", "--selectors", "midpoint"]
    main([*base, "--backend", "vllm", "--engine-dtype", "bfloat16", "--out", str(tmp_path / "bf16")])
    assert asked == [("vllm", torch.bfloat16, torch.float32)]
    assert calls[-1] == ("close", False) and calls.count("generate") == len(calls) - 1 >= 1  # closed last, before reads
    main([*base, "--backend", "vllm", "--engine-dtype", "bfloat16", "--out", str(tmp_path / "bf16")])
    assert len(asked) == 1  # a rerun with everything sampled starts no engine (minutes and gigabytes on a CPU)
    assert (tmp_path / "bf16" / "table.md").exists()
    monkeypatch.setattr(validate, "rollout_choice", lambda kind, hf: "hf")  # vLLM not installed
    with pytest.raises(ValueError, match="needs the vLLM engine"):
        validate.run_validate(validate.ValidateConfig(model=model_dir, task="arith", n_problems=1, backend="auto",
                                                      engine_dtype="bfloat16", out_dir=str(tmp_path / "auto")))


def test_validate_engine_batch_tokens_reach_the_engine_with_a_kv_cache_that_holds_them(model_dir, tmp_path, monkeypatch,
                                                                                     capsys):
    """--engine-batch-tokens is the engine's step budget (a stand-in records it) and sizes its KV cache for a full
    wave: the budget's prompts and 256 responses at --max-response, so no seeded sequence is preempted. Shorter than
    the model length, with the HF backend, or where no engine serves: an error."""
    import bsb.commands.validate as validate

    asked = []

    def engine(kind, path, hf, max_len, seed, dtype, log_file, **step):
        asked.append((max_len, step))
        return _Sampler(hf)

    class _Sampler:
        def __init__(self, hf):
            self.generate = hf.generate

        def close(self):
            pass

    monkeypatch.setattr(validate, "make_rollout_backend", engine)
    base = ["validate", model_dir, "--task", "arith", "--n-problems", "2", "--m", "4", "--n-mc", "2", "--b", "1",
            "--max-response", "32", "--selectors", "midpoint", "--backend", "vllm"]
    main([*base, "--engine-batch-tokens", "4096", "--out", str(tmp_path / "big")])
    assert asked == [(1024 + 32, {"max_num_batched_tokens": 4096, "kv_cache_gib": 1})]
    with pytest.raises(SystemExit):
        main([*base, "--engine-batch-tokens", "500", "--out", str(tmp_path / "short")])
    # the engine serves the model's 512 positions (1,056 capped), so every prompt fits a step of 512 or more
    assert "--engine-batch-tokens: the engine's step of 500 tokens is shorter than its model length 512" in (
        capsys.readouterr().err)
    with pytest.raises(SystemExit):
        main(["validate", "--backend", "hf", "--engine-batch-tokens", "8192"])
    assert "the HF backend has none" in capsys.readouterr().err
    monkeypatch.setattr(validate, "rollout_choice", lambda kind, hf: "hf")  # vLLM not installed
    with pytest.raises(ValueError, match="the HF backend samples here"):
        validate.run_validate(validate.ValidateConfig(model=model_dir, task="arith", n_problems=1, backend="auto",
                                                      engine_batch_tokens=8192, out_dir=str(tmp_path / "auto")))


def test_a_gpu_engines_step_is_passed_on_without_a_cpu_wave_cache():
    """On a GPU vLLM chunks its prefills and sizes its own cache: --engine-batch-tokens is only its step there (no
    CPU wave KV cache, no shorter-than-the-model-length refusal)."""
    import torch
    import transformers

    from bsb.commands.validate import ValidateConfig, _engine_step

    qwen = transformers.Qwen2Config(num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, hidden_size=896)
    cfg = ValidateConfig(engine_batch_tokens=1024)
    assert _engine_step(cfg, qwen, 1536, torch.bfloat16, torch.device("cuda", 0)) == {"max_num_batched_tokens": 1024}
    with pytest.raises(ValueError, match="shorter than its model length 1536"):
        _engine_step(cfg, qwen, 1536, torch.bfloat16, torch.device("cpu"))
    assert _engine_step(ValidateConfig(), qwen, 1536, torch.bfloat16, torch.device("cpu")) == {}


def test_validate_refuses_to_resume_with_other_sampling_settings(model_dir, tmp_path, capsys):
    out = tmp_path / "val"
    args = ["validate", model_dir, "--task", "arith", "--n-problems", "2", "--m", "4", "--n-mc", "2", "--b", "1",
            "--backend", "hf", "--max-response", "32", "--selectors", "midpoint", "--out", str(out)]
    main(args)
    record = json.loads((out / "sampling.json").read_text())
    assert record["temperature"] == 0.7 and record["engine"] == "hf" and record["engine_dtype"] == "float32"
    done = (out / "completions.jsonl").read_text()
    main([*args, "--b", "2"])  # not a sampling setting: resumes
    for change, said in ((["--temperature", "0.9"], "temperature 0.7 then, 0.9 now"),
                         (["--max-response", "48"], "max_response 32 then, 48 now"),
                         (["--seed", "1"], "seed 0 then, 1 now")):
        with pytest.raises(SystemExit):
            main([*args, *change])
        err = capsys.readouterr().err
        assert said in err and "use another --out" in err
    assert (out / "completions.jsonl").read_text() == done  # nothing was added by the refused reruns
    (out / "sampling.json").write_text("[1, 2]")
    with pytest.raises(SystemExit):
        main(args)
    assert "not a sampling record" in capsys.readouterr().err


def test_validate_keeps_the_seeding_a_run_began_with(model_dir, tmp_path, capsys, monkeypatch):
    """A new run records per-draw seeding; a run recorded before the key existed finishes with the offset seeds it
    began with (its completions so far were drawn so); an unknown seeding is an error, not a silent choice."""
    from bsb.commands import validate

    seen = []
    real = validate.mc_values
    monkeypatch.setattr(validate, "mc_values", lambda *a, **kw: seen.append((kw["seed"], kw["seeding"])) or real(*a, **kw))
    out = tmp_path / "val"
    args = ["validate", model_dir, "--task", "arith", "--n-problems", "2", "--m", "4", "--n-mc", "2", "--b", "1",
            "--backend", "hf", "--max-response", "32", "--selectors", "midpoint", "--seed", "3", "--out", str(out)]
    main(args)
    assert json.loads((out / "sampling.json").read_text())["seeding"] == "per-draw"
    assert seen and set(seen) == {(3, "per-draw")}  # the run's seed; each completion hashes its own key
    record = json.loads((out / "sampling.json").read_text())
    del record["seeding"]  # as a run sampled before 2026-12-07 recorded it
    (out / "sampling.json").write_text(json.dumps(record))
    (out / "completions.jsonl").unlink()
    seen.clear()
    main(args)
    assert seen == [(3 + 7 * i, "offset") for i in range(len(seen))] and seen  # each chain's seed, as then
    (out / "sampling.json").write_text(json.dumps({**record, "seeding": "clock"}))
    with pytest.raises(SystemExit):
        main(args)
    assert "seeding 'clock' is not one of per-draw, offset" in capsys.readouterr().err


def test_fork_contrast_counts_agreeing_siblings_and_js_terciles(tmp_path):
    from bsb.eval.contrast import fork_contrast

    # six boundaries, JS 0..5: siblings agree at JS 0, 1 and 3; two empty answers ("": none) never agree
    rows = [{"cuts": [0, 1, 2], "scores": {"probe_js": [0.0, 1.0, 2.0]}, "siblings": [["a", "a"], ["b", "b"], ["", ""]]},
            {"cuts": [0, 1, 2], "scores": {"probe_js": [3.0, 4.0, 5.0]}, "siblings": [["c", "c"], ["b", "d"], ["e", "f"]]}]
    c = fork_contrast(rows)
    assert c["pairs"] == 6 and c["sibling_agreement"] == 3 / 6
    assert c["disagreement_by_js_tercile"] == {"bottom": 0.0, "middle": 0.5, "top": 1.0}  # {0,1}, {2,3}, {4,5}
    # intervals resample the problems (here the two rows): the middle tercile's pairs are one of each row's
    assert c["interval_by_js_tercile"] == {"bottom": [0.0, 0.0], "middle": [0.0, 1.0], "top": [1.0, 1.0]}
    from bsb.eval.figures import contrast_plot

    assert contrast_plot(tmp_path / "contrast.png", c).stat().st_size > 0
    # one problem: each tercile's interval is a point (no negative error bar); a chain Probe-JS fell back on is no JS
    one_problem = [{**r, "prompt": "p"} for r in rows] + [{**rows[0], "prompt": "p", "fallback": {"probe_js": True}}]
    c1 = fork_contrast(one_problem)
    assert c1["pairs"] == 9 and c1["disagreement_by_js_tercile"] == c["disagreement_by_js_tercile"]
    assert all(lo == hi for lo, hi in c1["interval_by_js_tercile"].values())
    assert contrast_plot(tmp_path / "one.png", c1).stat().st_size > 0
    one = [{"cuts": [0], "scores": {}, "siblings": [["a"]]}]  # one completion: no pair, no terciles
    assert fork_contrast(one)["pairs"] == 0 and "disagreement_by_js_tercile" not in fork_contrast(one)


def test_demo_names_the_most_flip_mass_only_when_a_segment_moved():
    from bsb.commands.demo import most_text

    assert most_text({"probe_js": 0.0, "entropy": 0.0}) == " (no selector's segment moves V* on this chain)"
    assert most_text({"probe_js": 0.5, "entropy": 0.5, "midpoint": 0.25}) == " (most: probe_js, entropy)"
    assert most_text({"probe_js": 0.1, "entropy": 0.3}) == " (most: entropy)"


def test_resumed_chains_are_seeded_by_their_place_in_the_set(tmp_path):
    """A run that resumes (or extends the set) seeds problem i with seed + i, as an uninterrupted run does: the rows
    it adds must not repeat the first rows' seeds (the same prompt twice would draw the same chain)."""
    from types import SimpleNamespace

    from bsb.commands.validate import _sample_chains

    class Gen:
        def __init__(self):
            self.seeds = []

        def generate(self, prompts, max_new_tokens, temperature, seed, eos_token_id):
            self.seeds.append(list(seed))
            return [[7, s] for s in seed]

    problems = [SimpleNamespace(id=f"p{i}", prompt="Compute 1 + 1.", answer="2") for i in range(5)]
    session = SimpleNamespace(problems=problems, prompts=[[1, 2]] * 5, eos=0)
    cfg = SimpleNamespace(max_response=8, temperature=0.7, seed=10)
    first = _sample_chains(cfg, gen := Gen(), SimpleNamespace(**{**vars(session), "problems": problems[:2]}), tmp_path)
    assert gen.seeds == [[10, 11]] and first == {"p0": [7, 10], "p1": [7, 11]}
    resumed = _sample_chains(cfg, gen, session, tmp_path)  # the set grew to 5: only p2..p4 are sampled
    assert gen.seeds[1] == [12, 13, 14]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert resumed == _sample_chains(cfg, Gen(), session, fresh)  # what one uninterrupted run draws


def test_validate_screens_problems_by_pass_rate_and_samples_several_chains_each(model_dir, tmp_path, capsys,
                                                                                 monkeypatch):
    """--pass-band keeps the first problems whose pass rate (from --screen-samples completions) lies in the band,
    screen.jsonl keeps the rates for a rerun; --chains-per-problem samples that many chains a problem, each with its own
    curve, and the intervals count problems, not chains. (The test model solves nothing: the rates are scripted; the
    real sampling is the next test's.)"""
    import bsb.eval.screen as S

    screened = []

    def scripted(gen, session, indices, samples, *a):
        screened.extend(indices)
        return {i: (i * 3) % (samples + 1) for i in indices}  # 0, 3, 1, 4, 2, ... of 4

    monkeypatch.setattr(S, "pass_rates", scripted)
    out = tmp_path / "screened"
    args = ["validate", model_dir, "--task", "arith", "--task-option", "ops=[1]", "max_operand=3", "--n-problems", "2",
            "--m", "4", "--n-mc", "2", "--b", "2",
            "--backend", "hf", "--max-response", "48", "--out", str(out), "--pass-band", "0.25", "0.75",
            "--screen-problems", "24", "--screen-samples", "4", "--chains-per-problem", "2"]
    main(args)
    screen = [json.loads(x) for x in (out / "screen.jsonl").read_text().splitlines()]
    assert screen and all(r["samples"] == 4 and 0 <= r["correct"] <= 4 for r in screen)
    assert len(screen) == 16 == len(screened)  # one chunk of 16 held the 2 problems asked: screening stopped there
    band = [r["id"] for r in screen if 1 <= r["correct"] <= 3][:2]
    assert [r["correct"] for r in screen][:4] == [0, 3, 1, 4] and band == ["arith-0-1", "arith-0-2"]
    chains = [json.loads(x) for x in (out / "chains.jsonl").read_text().splitlines()]
    assert [c["id"] for c in chains] == [f"{i}#c{j}" for i in band for j in range(2)]
    assert chains[0]["response"] != chains[1]["response"] or chains[0]["prompt"] == chains[1]["prompt"]
    printed = capsys.readouterr().out
    assert f"screened {len(screen)} problems (4 completions each" in printed and f"{len(band)} in [0.25, 0.75] kept" in printed
    main(args)  # a rerun reads the rates: nothing screened again
    assert len((out / "screen.jsonl").read_text().splitlines()) == len(screen) == len(screened)
    (out / "screen.jsonl").write_text('{"id": "x", "correct": 9, "samples": 4}\n')
    with pytest.raises(SystemExit):
        main(args)
    assert "screen.jsonl:1: not a screen row of 4 samples" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["validate", model_dir, "--pass-band", "0.8", "0.2"])
    assert "--pass-band takes LO HI with 0 <= LO <= HI <= 1" in capsys.readouterr().err


def test_pass_rates_grade_each_problems_own_completions():
    """bsb.eval.screen.pass_rates on a scripted backend: every problem's samples drawn with their own seeds and graded
    against that problem."""
    from types import SimpleNamespace

    from bsb.eval.screen import in_band, pass_rates
    from bsb.tasks.base import Problem, Verdict

    calls = []

    class Gen:
        def generate(self, prompts, max_new_tokens, temperature, seed, eos_token_id):
            calls.append((list(prompts), list(seed), max_new_tokens, temperature))
            return [[p[0], s % 2] for p, s in zip(prompts, seed)]  # right where the seed is odd

    task = SimpleNamespace(verify=lambda text, p: Verdict(float(text.endswith("1")), text.endswith("1"), ""))
    session = SimpleNamespace(prompts=[[10], [20], [30]], problems=[Problem(str(i), "", "") for i in range(3)],
                              eos=0, task=task, decode=lambda ids: " ".join(map(str, ids)))
    got = pass_rates(Gen(), session, [0, 2], 4, 0.7, 64, seed=5)
    prompts, seeds, cap, temp = calls[0]
    assert prompts == [[10]] * 4 + [[30]] * 4 and len(set(seeds)) == 8 and (cap, temp) == (64, 0.7)
    assert got == {0: sum(s % 2 for s in seeds[:4]), 2: sum(s % 2 for s in seeds[4:])}
    assert in_band(1, 4, (0.2, 0.8)) and not in_band(0, 4, (0.2, 0.8)) and in_band(4, 4, (0.2, 1.0))


def test_case_plot_names_stay_in_the_run_folder_and_never_collide():
    """A problem id is the problem file's to choose: HumanEval's own ids hold a slash, a hostile one climbs out."""
    from bsb.commands.validate import case_names

    ids = ["HumanEval/5#c0", "../../etc/passwd", "a b", "a#b", "a_b", "a_b_2", "ünïcode", ""]
    names = case_names(ids)
    assert names[:3] == ["case_HumanEval_5_c0.png", "case_.._.._etc_passwd.png", "case_a_b.png"]
    assert len(set(names)) == len(ids)  # a#b and a_b after a b: suffixed, and a_b_2 after them too
    assert all("/" not in n and "#" not in n and n.startswith("case_") and n.endswith(".png") for n in names)
    long = case_names(["x" * 300, "x" * 300 + "y", "x" * 300])  # a file name holds 255 bytes
    assert all(len(n) < 255 for n in long) and len(set(long)) == 3
