"""Losses against hand computations, and [TwoStage]'s zero-gradient AdamW step (bitwise, fixed trajectory)."""

import pytest
import torch

from bsb.train.loss import (
    composite_loss,
    flat_loss,
    pad_batch,
    response_logprobs,
    response_logprobs_full,
    zero_grad_step,
)

transformers = pytest.importorskip("transformers")


def tiny_model():
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(vocab_size=32, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=1,
                                   num_key_value_heads=1, head_dim=64, max_position_embeddings=64, pad_token_id=0, eos_token_id=1)
    return transformers.AutoModelForCausalLM.from_config(cfg).float()


def test_composite_loss_clips_asymmetrically_and_averages_over_tokens():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))  # ratios 1.5, 0.5, 1.1 against old log-probs 0
    old = torch.zeros(1, 3)
    mask = torch.tensor([[True, True, True]])
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    loss, info = composite_loss(logp, old, adv, mask)
    # min(r A, clip(r, 0.8, 1.28) A): 1.28, -0.8, 2.2
    assert loss.item() == pytest.approx(-(1.28 - 0.8 + 2.2) / 3)
    assert info["clip_frac"] == pytest.approx(2 / 3)
    loss_all, _ = composite_loss(logp, old, adv, mask, n_tokens=6)  # a micro-batch of a 6-token mini-batch
    assert loss_all.item() == pytest.approx(loss.item() / 2)


def test_flat_loss_sums_weighted_token_log_probs_per_sequence():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]])
    mask = torch.tensor([[True, True], [True, False]])
    adv = torch.tensor([[1.0, 1.0], [-2.0, -2.0]])
    loss, _ = flat_loss(logp, adv, mask)
    assert loss.item() == pytest.approx(-((-3.0) + (1.0)) / 2)


def test_response_logprobs_match_a_plain_forward():
    model = tiny_model()
    prompts, responses = [[2, 3, 4], [5]], [[6, 7], [8, 9, 10]]
    logp, mask = response_logprobs(model, prompts, responses, pad_id=0)
    assert mask.tolist() == [[True, True, False], [True, True, True]]
    for i, (p, r) in enumerate(zip(prompts, responses)):
        full = torch.log_softmax(model(torch.tensor([p + r])).logits[0].float(), -1)
        ref = torch.stack([full[len(p) - 1 + j, t] for j, t in enumerate(r)])
        torch.testing.assert_close(logp[i, : len(r)], ref, atol=1e-5, rtol=1e-5)
    ids, attn, _ = pad_batch(prompts, responses, 0)
    assert ids.shape == (2, 5) and attn.sum().item() == 9


def test_chunked_response_logprobs_equal_the_full_logits_path_in_value_and_gradient():
    """The trainer's path (hidden states of the response positions through the chunked linear + logsumexp) against
    the (B, W, V)-logits path: same values, same parameter gradients."""
    model = tiny_model()
    prompts, responses = [[2, 3, 4], [5]], [[6, 7], [8, 9, 10]]
    weights = torch.tensor([[0.5, -1.0, 0.0], [1.0, 2.0, -0.5]])
    grads = []
    for fn in (response_logprobs, response_logprobs_full):
        model.zero_grad(set_to_none=True)
        logp, mask = fn(model, prompts, responses, 0)
        (logp * weights * mask).sum().backward()
        grads.append((logp.detach(), [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-5, rtol=1e-5)
    for a, b in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def _trajectory(homogeneous: str):
    """Steps active, homogeneous, active, homogeneous, active on fixed rows; returns params and AdamW state."""
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    prompts, responses = [[2, 3], [4, 5]], [[6, 7, 8], [9, 10]]
    for step in range(5):
        adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]]) * (step % 2 == 0)
        if step % 2 == 1 and homogeneous == "zero_grad_step":
            zero_grad_step(opt)
            continue
        if step % 2 == 1 and homogeneous == "skip_step":
            continue
        opt.zero_grad(set_to_none=True)
        logp, mask = response_logprobs(model, prompts, responses, 0)
        loss, _ = composite_loss(logp, logp.detach(), adv, mask)
        loss.backward()
        opt.step()
    state = [(s["exp_avg"].clone(), s["exp_avg_sq"].clone(), s["step"].clone()) for s in opt.state.values()]
    return [p.detach().clone() for p in model.parameters()], state


def test_zero_gradient_step_is_bitwise_equal_to_a_zero_weighted_backward():
    p_backward, s_backward = _trajectory("backward")
    p_zero, s_zero = _trajectory("zero_grad_step")
    assert all(torch.equal(a, b) for a, b in zip(p_backward, p_zero))
    assert all(torch.equal(x, y) for a, b in zip(s_backward, s_zero) for x, y in zip(a, b))
    p_skip, _ = _trajectory("skip_step")  # skipping the step drops the moment decay and weight decay: it differs
    assert not all(torch.equal(a, b) for a, b in zip(p_backward, p_skip))


def test_loss_aggregation_modes_against_hand_computed_values():
    """Two sequences of 1 and 3 tokens, ratio 1 (no clipping): surrogate = advantage per token."""
    adv = torch.tensor([[2.0, 0.0, 0.0], [1.0, 1.0, 4.0]])
    mask = torch.tensor([[True, False, False], [True, True, True]])
    logp = torch.zeros(2, 3)
    token_mean, _ = composite_loss(logp, logp, adv, mask)
    seq_mean, _ = composite_loss(logp, logp, adv, mask, agg="seq-mean-token-mean")
    seq_sum, _ = composite_loss(logp, logp, adv, mask, agg="seq-mean-token-sum")
    assert token_mean.item() == pytest.approx(-(2 + 1 + 1 + 4) / 4)  # every token weighs the same
    assert seq_mean.item() == pytest.approx(-(2 / 1 + 6 / 3) / 2)  # every sequence weighs the same
    assert seq_sum.item() == pytest.approx(-(2 + 6) / 2)
    # a micro-batch of a 4-sequence mini-batch divides by the mini-batch's sequence count
    part, _ = composite_loss(logp, logp, adv, mask, agg="seq-mean-token-mean", n_sequences=4)
    assert part.item() == pytest.approx(-(2 + 2) / 4)
    with pytest.raises(ValueError, match="loss aggregation"):
        composite_loss(logp, logp, adv, mask, agg="sum")


def test_symmetric_and_asymmetric_clipping():
    """A ratio of 1.25 with a positive advantage: clip-higher (0.28) keeps it, symmetric 0.2 clips it to 1.2."""
    logp = torch.log(torch.tensor([[1.25]]))
    old, adv, mask = torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1, dtype=torch.bool)
    asym, info_a = composite_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    sym, info_s = composite_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    assert asym.item() == pytest.approx(-1.25) and info_a["clip_frac"] == 0.0
    assert sym.item() == pytest.approx(-1.2) and info_s["clip_frac"] == 1.0


def test_dual_clip_caps_negative_advantage_tokens_at_ratio_c_as_verl():
    """Ratios 4, 2, 4, 0.5 with advantages −1, −1, +1, +1 (clip 0.2 / 0.28, c = 3), by hand from verl's
    compute_policy_loss_vanilla: −A·r and −A·clip(r) → their max → for A < 0 the min with −A·c."""
    logp = torch.log(torch.tensor([[4.0, 2.0, 4.0, 0.5]])).requires_grad_()
    old, mask = torch.zeros(1, 4), torch.ones(1, 4, dtype=torch.bool)
    adv = torch.tensor([[-1.0, -1.0, 1.0, 1.0]])
    loss, info = composite_loss(logp, old, adv, mask, clip_ratio_c=3.0)
    # token losses: min(max(4, 1.28), 3) = 3 (the cap binds); max(2, 1.28) = 2 (under the cap); max(−4, −1.28) = −1.28
    # (the clipped term binds); max(−0.5, −0.8) = −0.5 (below the range, the unclipped term is the larger loss)
    assert loss.item() == pytest.approx((3 + 2 - 1.28 - 0.5) / 4)
    assert info == pytest.approx({"clip_frac": 1 / 4, "clip_frac_lower": 1 / 4, "ratio_out_frac": 4 / 4})
    loss.backward()
    assert logp.grad[0, 0] == 0.0 and logp.grad[0, 1] != 0.0  # a capped token's loss is a constant
    off, info_off = composite_loss(logp.detach(), old, adv, mask, clip_ratio_c=None)
    assert off.item() == pytest.approx((4 + 2 - 1.28 - 0.5) / 4) and info_off["clip_frac_lower"] == 0.0
    below, _ = composite_loss(logp.detach(), old, adv, mask, clip_ratio_c=5.0)  # every ratio under the cap: no change
    assert below.item() == pytest.approx(off.item())
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        composite_loss(logp, old, adv, mask, clip_ratio_c=1.0)


def test_clip_frac_counts_where_the_clipped_term_binds_not_where_the_ratio_is_out_of_range():
    """verl's pg_clipfrac: a ratio of 1.5 with a negative advantage lies outside the range, but the unclipped term is
    the larger loss, so nothing is clipped there; the same ratio with a positive advantage is clipped."""
    logp = torch.log(torch.tensor([[1.5, 1.5]]))
    _, info = composite_loss(logp, torch.zeros(1, 2), torch.tensor([[-1.0, 1.0]]), torch.ones(1, 2, dtype=torch.bool))
    assert info["clip_frac"] == 0.5 and info["ratio_out_frac"] == 1.0
