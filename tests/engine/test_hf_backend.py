"""The HF backend's GPU-facing choices, checked on the CPU: where it computes (a sharded policy's mesh device, even with
its shards offloaded to the host), how it draws its sampling noise (on the scores' device, float32 on a GPU, one
generator per request, still a draw from the softmax), and that its generation never enters transformers' synced-GPU
loop."""

import collections
import contextlib

import pytest
import torch
from tiny_models import tiny_model

from bsb.engine.device import compute_device
from bsb.engine.hf_backend import HFBackend, RequestSampler, noise_dtype


def tiny():
    return tiny_model("xs", eos_token_id=1, pad_token_id=0)


@contextlib.contextmanager
def world_of_one():
    """A one-process gloo group, for DTensors made in this process."""
    torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        torch.distributed.destroy_process_group()


def test_a_sharded_policy_computes_on_its_mesh_device_not_where_its_shards_live(monkeypatch):
    """With fsdp_cpu_offload the shards are host tensors on a CUDA mesh, and FSDP2 runs every forward on the mesh's
    device: the backend's device (its inputs, the engine it builds) and the update's result buffers follow the mesh.
    A CUDA mesh is faked on the CPU: the mesh says cuda, the current device is 2."""
    from torch.distributed.fsdp import fully_shard

    model = tiny()
    assert compute_device(model) == torch.device("cpu")  # a plain model: its parameters' device
    with world_of_one():
        fully_shard(model)
        mesh = next(model.parameters()).device_mesh
        assert compute_device(model) == torch.device("cpu")  # a CPU mesh
        monkeypatch.setattr(mesh, "_device_type", "cuda")
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
        assert next(model.parameters()).device == torch.device("cpu")
        assert compute_device(model) == torch.device("cuda", 2)
        hf = HFBackend(model)
        assert hf.device == torch.device("cuda", 2) and not hf.capabilities.on_cpu


def test_noise_is_drawn_on_the_scores_device_from_a_generator_per_request(monkeypatch):
    """Each row's noise comes from its own generator on the scores' device, drawn there: on a GPU in float32 (no host
    draw over V and copy per decoding step, which took 244 ms a step for 32 rows at V = 151,936), on the CPU in
    float64 (the stream bsb's CPU results were measured with)."""
    draws = []
    real = torch.rand

    def rand(*size, generator=None, device=None, dtype=None, **kw):
        draws.append((generator.device if generator is not None else None, device, dtype))
        return real(*size, generator=generator, device=device, dtype=dtype, **kw)

    monkeypatch.setattr(torch, "rand", rand)
    scores = torch.zeros(3, 40)
    for dtype in (None, torch.float32):
        draws.clear()
        sampler = RequestSampler([3, 4, 5], temperature=1.0, top_p=1.0, noise_dtype=dtype)
        sampler(torch.zeros(3, 1, dtype=torch.long), scores)
        sampler(torch.zeros(3, 2, dtype=torch.long), scores)
        assert draws == [(scores.device, scores.device, dtype or torch.float64)] * 6  # one row each, every step
        assert len(sampler.generators) == 3
    assert noise_dtype(torch.device("cuda", 1)) == torch.float32 and noise_dtype(torch.device("cpu")) == torch.float64


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_requests_draws_do_not_depend_on_the_rest_of_the_batch(dtype):
    ids = torch.zeros(1, 1, dtype=torch.long)
    scores = torch.randn(3, 40)
    alone = [RequestSampler([7], 1.0, 1.0, dtype), RequestSampler([7], 1.0, 1.0, dtype)]
    batch = RequestSampler([2, 7, 9], 1.0, 1.0, dtype)
    for _ in range(3):  # decoding steps: each row's stream advances by its own draws only
        together = batch(ids.repeat(3, 1), scores)
        assert torch.equal(together[1], alone[0](ids, scores[1:2])[0])
    assert torch.equal(RequestSampler([7], 1.0, 1.0, dtype)(ids, scores[1:2]), alone[1](ids, scores[1:2]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 1.0), (1.0, 0.8)])
def test_the_argmax_of_the_perturbed_scores_is_a_draw_from_the_softmax(temperature, top_p, dtype):
    """Frequencies over 20,000 requests (each its own seed) within 0.012 of softmax(scores / T) restricted to the
    nucleus (4.5 standard deviations at p = 0.5), with the GPU's float32 noise and the CPU's float64."""
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    n = 20_000
    sampler = RequestSampler(range(n), temperature, top_p, noise_dtype=dtype)
    picks = sampler(torch.zeros(n, 1, dtype=torch.long), logits.repeat(n, 1)).argmax(-1)
    freq = torch.bincount(picks, minlength=len(logits)).double() / n
    p = torch.softmax(logits.double() / temperature, -1)
    if top_p < 1:  # transformers' nucleus: the smallest set of top tokens holding top_p, renormalised
        order = p.argsort(descending=True)
        keep = order[: int((p[order].cumsum(0) < top_p).sum()) + 1]
        p = torch.zeros_like(p).index_fill(0, keep, 1.0) * p
        p = p / p.sum()
    assert (freq - p).abs().max() < 0.012, (freq, p)


def test_generation_never_enters_transformers_synced_gpu_loop(monkeypatch):
    """transformers turns the loop on for an FSDP-managed model in a process group; ranks that generate different
    numbers of batches would then wait on each other (issue 37). Both of the backend's generate calls turn it off."""
    model = tiny()
    seen = collections.Counter()
    real = model.generate

    def generate(*args, **kwargs):
        seen[kwargs.get("synced_gpus")] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "generate", generate)
    hf = HFBackend(model)
    hf.generate([[3, 4, 5], [6, 7]], max_new_tokens=3, temperature=1.0, seed=1)
    hf.sampled_reads([3, 4, 5, 6, 7, 8], [3, 5], [9, 10], read_len=2, seed=1)
    assert seen == {False: 2}


def test_each_request_decodes_to_its_own_budget():
    """Per-request caps end each row at its own budget (a stopping criterion; the batch runs to the largest), and
    each request's draws within it are its draws alone (its own stream)."""
    hf = HFBackend(tiny())
    prompts = [[3, 4, 5], [6, 7], [8, 9, 10, 11]]
    capped = hf.generate(prompts, max_new_tokens=[2, 7, 4], temperature=1.0, seed=5)
    alone = hf.generate(prompts, max_new_tokens=7, temperature=1.0, seed=5)
    assert capped == [a[:b] for a, b in zip(alone, [2, 7, 4])]
    assert all(len(r) <= b for r, b in zip(capped, [2, 7, 4]))
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        hf.generate(prompts, max_new_tokens=[2, 0, 4])


def test_sampled_reads_refuse_bad_cuts_and_hold_under_the_models_generation_config():
    """Cuts outside the prefix or an empty suffix are one clear error; a generation config with its cache off, or
    with its own cache implementation, reads what the rows' re-forward reads (the latter by re-forwarding them)."""
    hf = HFBackend(tiny())
    prefix, suffix = list(range(3, 40)), [9, 10]
    for cuts, sfx in (([-1, 5], suffix), ([5, 38], suffix), ([], suffix), ([5], [])):
        with pytest.raises(ValueError, match="sampled reads need cuts in"):
            hf.sampled_reads(prefix, cuts, sfx, read_len=2, seed=1)
    want, spent = hf.sampled_reads(prefix, [0, 5, 37], suffix, read_len=3, seed=1)
    assert spent == 37 + 3 * (2 + 2)  # the chain once
    hf.model.generation_config.use_cache = False
    got, again = hf.sampled_reads(prefix, [0, 5, 37], suffix, read_len=3, seed=1)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
    assert again == spent
    hf.model.generation_config.use_cache = True
    hf.model.generation_config.cache_implementation = "static"
    got, forwarded = hf.sampled_reads(prefix, [0, 5, 37], suffix, read_len=3, seed=1)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
    assert forwarded == 0 + 5 + 37 + 3 * (2 + 2)  # every row's prefix
