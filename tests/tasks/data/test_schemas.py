"""The paper's data sets, with rows written in exactly their published schemas: the right prompt and gold answer,
the right convention, correct and incorrect responses graded right, and clear errors for bad rows."""

import csv
import json

import pytest

from bsb.tasks.data.files import load_problem_set
from bsb.tasks.math.task import MathTask
from bsb.tasks.prompting import render_prompt

DAPO_PROMPT = ("Solve the following math problem step by step. The last line of your response should be of the form Answer: $Answer "
               "(without quotes) where $Answer is the answer to the problem.\n\nIn triangle $ABC$, $AB = 13$ and $BC = 21$. "
               "Find $AB + BC$.\n\nRemember to put your answer on its own line after \"Answer:\".")
DAPO_ROW = {"data_source": "math_dapo", "prompt": [{"content": DAPO_PROMPT, "role": "user"}], "ability": "MATH",
            "reward_model": {"ground_truth": "34", "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"}}
OLYMPIAD = dict(id=2231, subfield="Combinatorics", context=None, solution=["..."], error=None, question_type="Open-ended",
                subject="Math", language="English", modality="Text-only", image_1=None, image_2=None, image_3=None, image_4=None,
                image_5=None)
GPQA = {"Pre-Revision Question": "q", "Pre-Revision Correct Answer": "c", "Question": "Which particle mediates the weak force?",
        "Correct Answer": "W boson", "Incorrect Answer 1": "photon", "Incorrect Answer 2": "gluon", "Incorrect Answer 3": "graviton",
        "Record ID": "recABC123", "Subdomain": "Physics (general)", "High-level domain": "Physics"}


def parquet(tmp_path, rows, name="set.parquet"):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / name)
    return tmp_path / name


def jsonl(tmp_path, rows, name="set.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def gpqa_csv(tmp_path, rows):
    p = tmp_path / "gpqa_diamond.csv"
    with p.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return p


def grades(task, problem, responses):
    return [task.verify(r, problem).correct for r in responses]


def test_dapo_math_17k_in_verls_parquet_schema(tmp_path):
    s = load_problem_set(parquet(tmp_path, [DAPO_ROW]))
    [p] = s.problems
    assert s.schema == "verl" and p.id == "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"
    assert p.prompt == DAPO_PROMPT and p.answer == "34" and p.meta["convention"] == "answer_line"
    assert p.meta["messages"] == [{"role": "user", "content": DAPO_PROMPT}]
    task = MathTask(val_file=str(tmp_path / "set.parquet"))
    assert task.probe_suffix == "Answer: "
    assert grades(task, p, ["13 + 21 = 34.\nAnswer: 34", "So AB + BC = 34\nanswer:   34", "Answer: 35", "\\boxed{34}",
                            "Answer: 34\n" + "x" * 400]) == [True, True, False, False, False]  # only the last 300 characters count
    assert task.verify("Answer: 33\nwait\nAnswer: 34", p).correct  # the last Answer: line
    assert task.gold_continuation(p) == "34\n"


def test_olympiadbench_list_answers_multiple_answers_and_units(tmp_path):
    rows = [dict(OLYMPIAD, question="Find p.", final_answer=["$\\frac{1}{2}$"], is_multiple_answer=False, unit=None, answer_type="Numerical"),
            dict(OLYMPIAD, id=2232, question="Find all n.", final_answer=["$2$", "$5$"], is_multiple_answer=True, unit=None,
                 answer_type="Numerical"),
            dict(OLYMPIAD, id=2233, question="How far?", final_answer=["$12$"], is_multiple_answer=False, unit="m", answer_type="Numerical")]
    s = load_problem_set(jsonl(tmp_path, rows))
    one, many, unit = s.problems
    assert s.schema == "olympiad" and one.answer == "\\frac{1}{2}" and "[" not in one.answer  # never the list's repr
    assert many.meta["answers"] == ["2", "5"] and many.meta["match"] == "all" and unit.meta["unit"] == "m"
    task = MathTask(val_file=str(tmp_path / "set.jsonl"))
    assert grades(task, one, ["\\boxed{\\frac{1}{2}}", "\\boxed{0.5}", "\\boxed{\\frac{1}{3}}"]) == [True, True, False]
    assert grades(task, many, ["\\boxed{5, 2}", "\\boxed{2,5}", "\\boxed{2}", "\\boxed{2, 5, 7}", "\\boxed{2, 2}"]) == [True, True, False, False, False]
    assert grades(task, unit, ["So the final answer is \\boxed{12} m."]) == [True]


def test_gpqa_diamond_options_shuffled_by_a_seeded_permutation(tmp_path):
    path = gpqa_csv(tmp_path, [GPQA, dict(GPQA, **{"Record ID": "recXYZ", "Question": "Second?"})])
    s = load_problem_set(path)
    p = s.problems[0]
    assert s.schema == "gpqa" and p.id == "recABC123" and p.meta["convention"] == "choice"
    lines = p.prompt.splitlines()
    assert lines[0] == GPQA["Question"] and [x[:3] for x in lines[-4:]] == ["A) ", "B) ", "C) ", "D) "]
    assert sorted(x[3:] for x in lines[-4:]) == sorted(["W boson", "photon", "gluon", "graviton"])
    letter = p.answer
    assert lines[-4:]["ABCD".index(letter)][3:] == "W boson"  # the gold letter points at the correct option
    assert load_problem_set(path).problems[0].prompt == p.prompt  # fixed for a seed
    orders = {tuple(load_problem_set(path, seed=k).problems[0].prompt.splitlines()[-4:]) for k in range(8)}
    assert len(orders) > 1  # and the seed changes it
    task = MathTask(val_file=str(path))
    wrong = next(c for c in "ABCD" if c != letter)
    assert grades(task, p, [f"\\boxed{{{letter}}}", f"Answer: ({letter})", f"\\boxed{{\\text{{{letter}}}}}", f"\\boxed{{{wrong}}}",
                            "I think W boson"]) == [True, True, True, False, False]


@pytest.mark.parametrize("row,pid,gold", [
    ({"ID": "2024-I-1", "Problem": "Every morning Aya...", "Solution": "...", "Answer": 204}, "2024-I-1", "204"),
    ({"id": 0, "problem": "Find the sum...", "solution": "...", "answer": "070", "url": "https://x", "year": 2025}, "0", "70"),
    ({"problem_idx": 1, "problem": "Let N be...", "answer": 277}, "1", "277"),
])
def test_aime_styles(tmp_path, row, pid, gold):
    s = load_problem_set(jsonl(tmp_path, [row]))
    p = s.problems[0]
    assert s.schema == "aime" and p.id == pid and p.answer == gold
    task = MathTask(val_file=str(tmp_path / "set.jsonl"))
    assert grades(task, p, [f"\\boxed{{{gold}}}", f"\\boxed{{{int(gold) + 1}}}"]) == [True, False]


def test_omni_math_math500_and_gsm8k(tmp_path):
    omni = {"domain": ["Mathematics -> Algebra -> Other"], "difficulty": 5.0, "problem": "Compute x.", "solution": "...",
            "answer": "$\\frac{3}{4}$", "source": "imo_shortlist"}
    math500 = {"problem": "Convert to polar.", "solution": "... $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$",
               "answer": "\\left( 3, \\frac{\\pi}{2} \\right)", "subject": "Precalculus", "level": 2, "unique_id": "test/precalculus/807.json"}
    gsm = {"question": "Natalia sold clips...", "answer": "She sold 48/2 = <<48/2=24>>24 in May.\n#### 1,072"}
    for row, schema, gold, good, bad in [(omni, "omni_math", "\\frac{3}{4}", "\\boxed{0.75}", "\\boxed{3/5}"),
                                         (math500, "math500", "\\left( 3, \\frac{\\pi}{2} \\right)", "\\boxed{(3, \\frac{\\pi}{2})}", "\\boxed{(3, \\pi)}"),
                                         (gsm, "gsm8k", "1072", "\\boxed{1072}", "\\boxed{72}")]:
        path = jsonl(tmp_path, [row], name=f"{schema}.jsonl")
        s = load_problem_set(path)
        assert s.schema == schema and s.problems[0].answer == gold, schema
        task = MathTask(val_file=str(path))
        assert grades(task, s.problems[0], [good, bad]) == [True, False], schema
    assert load_problem_set(tmp_path / "math500.jsonl").problems[0].id == "test/precalculus/807.json"


@pytest.mark.parametrize("rows,match", [
    ([dict(OLYMPIAD, question="q", final_answer=[], is_multiple_answer=False, unit=None, answer_type="Numerical")],
     r"row 0: field 'final_answer' is a list of nothing|line 1: field 'final_answer' is a list of nothing"),
    ([dict(OLYMPIAD, question="q", final_answer=["  ", "$ $"], is_multiple_answer=False, unit=None, answer_type="Numerical")], "a list of nothing"),
    ([dict(OLYMPIAD, question="q", final_answer=None, is_multiple_answer=False, unit=None, answer_type="Numerical",
           question_type="Theorem proof")], "theorem-proving row"),
    ([{**DAPO_ROW, "reward_model": {"style": "rule"}}], r"line 1: missing field 'reward_model.ground_truth'"),
    ([{"foo": 1, "bar": 2}], r"line 1: unknown schema; recognised: verl, olympiad, gpqa.*columns found: foo, bar"),
    ([{"prompt": "a", "answer": "1"}, DAPO_ROW], r"line 2: a verl-schema row in a plain file"),
    ([{"problem": "p", "answer": ""}], r"line 1: missing field 'answer'"),
    ([{"problem": "p", "answer": ["1", "2"]}], "the answer field is a list"),
])
def test_bad_rows_name_file_row_and_field(tmp_path, rows, match):
    with pytest.raises(ValueError, match=match):
        load_problem_set(jsonl(tmp_path, rows))


def test_gpqa_with_fewer_than_four_options_and_unknown_formats(tmp_path):
    with pytest.raises(ValueError, match=r"gpqa_diamond.csv, row 0: GPQA needs 4 options: missing or empty field 'Incorrect Answer 3'"):
        load_problem_set(gpqa_csv(tmp_path, [dict(GPQA, **{"Incorrect Answer 3": ""})]))
    with pytest.raises(ValueError, match="unknown problem format 'gpqq'"):
        load_problem_set(jsonl(tmp_path, [GPQA]), format="gpqq")


def test_chat_template_renders_messages_and_plain_prompts(tmp_path):
    from bsb.embedded.tokenizer import char_tokenizer

    tok = char_tokenizer()
    task = MathTask(val_file=str(parquet(tmp_path, [{**DAPO_ROW, "prompt": [{"role": "system", "content": "Be brief."},
                                                                             {"role": "user", "content": DAPO_PROMPT}]}])))
    p = task.val[0]
    with pytest.raises(ValueError, match="needs a tokenizer with a chat template"):
        render_prompt(task, p, tok, "chat")
    tok.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    assert render_prompt(task, p, tok, "chat") == f"<system>Be brief.\n<user>{DAPO_PROMPT}\n<assistant>"
    assert render_prompt(task, p, tok, "plain") == DAPO_PROMPT
    plain = MathTask(val_file=str(jsonl(tmp_path, [{"prompt": "2+2?", "answer": "4"}]))).val[0]
    assert render_prompt(task, plain, tok, "chat") == "<user>2+2?\n<assistant>"


def test_a_system_prompt_and_chat_template_kwargs_reach_the_template(tmp_path):
    from bsb.embedded.tokenizer import char_tokenizer

    tok = char_tokenizer()
    tok.chat_template = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
                         "{% if enable_thinking is defined and not enable_thinking %}<no-think>{% endif %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}")
    task = MathTask(val_file=str(jsonl(tmp_path, [{"prompt": "2+2?", "answer": "4"}])))
    p = task.val[0]
    assert render_prompt(task, p, tok, "chat") == "<user>2+2?\n<assistant>"
    assert render_prompt(task, p, tok, "chat", chat_template_kwargs={"enable_thinking": False}) == "<user>2+2?\n<no-think><assistant>"
    assert render_prompt(task, p, tok, "chat", system_prompt="Be brief.") == "<system>Be brief.\n<user>2+2?\n<assistant>"
    own = MathTask(val_file=str(parquet(tmp_path, [{**DAPO_ROW, "prompt": [{"role": "system", "content": "Mine."},
                                                                           {"role": "user", "content": "q"}]}]))).val[0]
    assert render_prompt(task, own, tok, "chat", system_prompt="Be brief.") == "<system>Mine.\n<user>q\n<assistant>"  # a row keeps its own
    with pytest.raises(ValueError, match="set prompt_format=chat"):
        render_prompt(task, p, tok, "plain", system_prompt="Be brief.")
    with pytest.raises(ValueError, match="must be a mapping"):
        render_prompt(task, p, tok, "chat", chat_template_kwargs=["enable_thinking"])


def test_bsb_data_shows_schema_rows_and_gold(tmp_path, capsys, monkeypatch):
    from bsb.cli import main

    monkeypatch.setenv("COLUMNS", "300")  # no wrapping of the printed lines
    path = jsonl(tmp_path, [dict(OLYMPIAD, id=i, question=f"Find all n ({i}).", final_answer=["$2$", "$5$"], is_multiple_answer=True,
                                 unit=None, answer_type="Numerical") for i in range(5)])
    main(["data", str(path), "--rows", "2"])
    out = capsys.readouterr().out
    assert "schema olympiad, 5 problems" in out and "Find all n (0)." in out and "Find all n (1)." in out and "(2)." not in out
    assert "gold: all of 2 | 5" in out and "boxed" in out
    with pytest.raises(SystemExit):
        main(["data", str(tmp_path / "missing.jsonl")])
    with pytest.raises(SystemExit):
        main(["data", str(path), "--prompt-format", "chat"])
