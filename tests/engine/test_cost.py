"""The cost model reproduces Appendix B and Table 2 of the paper to the printed digits."""

import pytest

from bsb.engine import cost

# (model, T̄, T_train) for the math arms and the code arms (App. B).
MATH = [("OLMo", 1327, 389_000, 339_712, 6.0, 1.3), ("Qwen", 4164, 1_158_000, 1_065_984, 1.9, 0.45), ("Nemotron", 2600, 752_000, None, 3.1, 0.70)]
CODE = [("OLMo", 1179, 415_000, 17, 3.2), ("Qwen", 760, 312_000, 26, 4.3), ("Nemotron", 6557, 1_977_000, 3.1, 0.67)]


def test_probe_tokens_math_and_code():
    assert cost.probe_tokens(cost.StepShape(mean_chain_len=1000)) == 20_480  # 32·4·16·10
    assert cost.probe_tokens(cost.StepShape(mean_chain_len=1000, read_len=16)) == 51_200  # 32·4·16·25


@pytest.mark.parametrize("name,tbar,train,t_roll,roll_pct,step_pct", MATH)
def test_math_arms(name, tbar, train, t_roll, roll_pct, step_pct):
    s = cost.StepShape(mean_chain_len=tbar, train_tokens=train)
    if t_roll is not None:
        assert cost.rollout_tokens(s) == t_roll
    if name == "Nemotron":  # its T_roll is the measured ~660k, from which T̄ ≈ 2,600 was inferred
        s = cost.StepShape(mean_chain_len=660_000 / (8 * 32), train_tokens=train)
    assert round(100 * cost.probe_over_rollout(s), 1) == roll_pct
    digits = 2 if step_pct < 1 else 1
    assert round(100 * cost.probe_over_step(s), digits) == step_pct


@pytest.mark.parametrize("name,tbar,train,roll_pct,step_pct", CODE)
def test_code_arms(name, tbar, train, roll_pct, step_pct):
    s = cost.StepShape(mean_chain_len=tbar, train_tokens=train, read_len=16)
    digits = 1 if roll_pct < 10 else 0
    assert round(100 * cost.probe_over_rollout(s), digits) == roll_pct
    assert round(100 * cost.probe_over_step(s), 2 if step_pct < 1 else 1) == step_pct


def test_eq8_per_chain_form_and_vanishing_limit():
    s = cost.StepShape(mean_chain_len=2000, prompts=1, chains=1)
    assert cost.probe_over_rollout(s) == pytest.approx(16 * 10 / ((1 + 2 * 0.5) * 2000))
    assert cost.probe_over_rollout(cost.StepShape(mean_chain_len=1e9)) < 1e-6


def test_lens_token_forwards():
    assert cost.lens_tokens_per_chain(1000, 16, 9, 3, range_cap=0.5, mode="reforward") == 16 * 0.5 * 1000 / 2
    assert cost.lens_tokens_per_chain(1000, 16, 9, 3, mode="prefix_reuse") == 16 * 12
    assert cost.lens_tokens_per_chain(1000, 16, 9, 3, mode="packed") == 1000 + 16 * 12
    with pytest.raises(ValueError, match="mode must be"):
        cost.lens_tokens_per_chain(1000, 16, 9, 3, mode="cached")


@pytest.mark.parametrize("bad", [dict(mean_chain_len=0), dict(mean_chain_len=10, chains=0), dict(mean_chain_len=10, cut=1.5)])
def test_bad_shapes_are_clear_errors(bad):
    with pytest.raises(ValueError):
        cost.StepShape(**bad)


def test_read_designs_price_the_floor_the_engine_blocks_and_the_packed_forward():
    s = cost.StepShape(mean_chain_len=1000, train_tokens=300_000, suffix_len=10)
    per_chain = {d: cost.read_tokens_per_chain(s, d) for d in cost.READ_DESIGNS}
    assert per_chain == {"floor": 16 * 11, "vllm_block16": 16 * (11 + 7.5), "vllm_block32": 16 * (11 + 15.5),
                         "vllm_block128": 16 * (11 + 63.5), "packed": 1000 + 16 * 11}
    assert cost.read_share_of_step(s, "floor") == pytest.approx(cost.probe_over_step(s))  # the floor is Eq. 8's T_probe
    shares = [cost.read_share_of_step(s, d) for d in ("floor", "vllm_block16", "vllm_block32", "vllm_block128")]
    assert shares == sorted(shares) and all(0 < x < 1 for x in shares)
    with pytest.raises(ValueError, match="design must be one of"):
        cost.read_tokens_per_chain(s, "vllm_block7")
