"""White-box backend: a Hugging Face causal LM (CPU or GPU) for rollouts and belief reads.

* :meth:`HFBackend.generate`: batched sampling (temperature, top-p, max new tokens) from token ids, one seeded
  random stream per request (:class:`RequestSampler`).
* :meth:`HFBackend.packed_reads`: the packed prefix-shared forward (:mod:`bsb.engine.packed`); :meth:`probe_logits`
  returns the Probe-JS read logits on the model's device (the fused kernel reads them there);
  :meth:`lens_profiles_many` the Lens-Shift depth profiles (Eq. 3) through ``bsb.kernels.lens_logprobs``. Both
  batch a round's chains in grouped forwards, and with ``keep_kv`` (:meth:`keep_kv_for_reads`: the engine layer
  turns it on when this backend both generates and reads, :mod:`bsb.engine.reader`) read the chains it just
  generated from the keys and values the generation left (only the suffixes are computed: the floor of the reads).
* :meth:`HFBackend.token_stats`: per response token, the sampled token's surprisal, the entropy of the full
  next-token distribution and the top-1 − top-2 logit margin. The LM head runs over chunks of positions,
  so a long chain never materialises its (T × V) logits.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from dataclasses import replace

import torch

from bsb import kernels
from bsb.engine.backend import (
    Capabilities,
    ChainResults,
    TokenStats,
    check_generation_args,
    probe_prompts,
    request_seeds,
    stop_ids,
    token_ids,
)
from bsb.engine.device import autocast, compute_device
from bsb.engine.families import plan
from bsb.engine.hf_model import head_logits, lens_parts
from bsb.engine.packed import CutReads, KeptKV, cached_reads, naive_reads, packed_reads, packed_reads_many

READ_PATHS = {  # the family plan's reads, in words
    "packed": "packed prefix-shared forward",
    "stateful": "state-carried segments",
    "per_cut": "per-cut re-forward",
}


class HFBackend:
    capabilities = Capabilities(
        generate=True, belief_logits=True, token_stats=True, token_entropy=True, white_box=True, reuses_kv=True
    )

    def __init__(
        self,
        model,
        tokenizer=None,
        chunk_positions: int = 256,
        max_pack_tokens: int | None = None,
        compute_dtype: torch.dtype | None = None,
        read_batch_tokens: int = 512,
        keep_kv: bool = False,
    ):
        """``chunk_positions``: positions per LM-head chunk in :meth:`token_stats`; ``max_pack_tokens``: cap on
        one packed sequence (None: each chain's reads in one pass); ``read_batch_tokens``: tokens of one grouped
        forward when several chains' reads are packed together; ``compute_dtype``: run every forward under autocast in
        this dtype (bf16 reads from fp32 master weights; None: the weights' own dtype); ``keep_kv``: keep the keys and
        values of the last :meth:`generate` call until the next one (or :meth:`drop_kv`, or a weight change), so reads
        of the chains it generated compute only their suffixes (:meth:`keep_kv_for_reads` changes it later)."""
        self.model = model.eval()
        self.compute_dtype = compute_dtype
        self.tokenizer = tokenizer
        self.chunk_positions = chunk_positions
        self.max_pack_tokens = max_pack_tokens
        self.read_batch_tokens = read_batch_tokens  # tokens of one grouped packed forward over several chains
        self._keep_kv = keep_kv
        self._kept: tuple[KeptKV, dict[tuple, int], int] | None = None  # (kv, row of each prompt + response, version)
        # this instance's record: on_cpu is where its model was placed when it was built
        # how this model is read, from its family's declaration: packed, with state carried from cut to cut
        # (recurrent layers), or, for a family bsb does not know, the per-candidate re-forward; the lens and BSV
        # (white-box reads) and kept keys and values only where the declaration allows them
        self.plan = plan(model)
        self.capabilities = replace(
            HFBackend.capabilities,
            on_cpu=self.device.type == "cpu",
            white_box=self.plan.lens,
            reuses_kv=self.plan.kept_kv,
        )
        self.missing = {} if self.plan.lens else {"white_box": self.plan.why}  # why a capability is off (require)
        self.packed = self.plan.reads != "per_cut"  # the reads reuse each chain's prefix
        if not self.packed:
            warnings.warn(
                f"{self.plan.why}; HFBackend reads through the per-candidate re-forward", RuntimeWarning, stacklevel=2
            )

    def _autocast(self):
        if self.compute_dtype is None:
            return contextlib.nullcontext()
        return autocast(self.device, self.compute_dtype)

    @property
    def device(self) -> torch.device:
        """Where the model computes (a sharded policy's mesh device, even with its shards offloaded to the host)."""
        return compute_device(self.model)

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @property
    def keep_kv(self) -> bool:
        """Whether :meth:`generate` keeps its keys and values for the reads that follow."""
        return self._keep_kv

    def keep_kv_for_reads(self, on: bool) -> None:
        """Keep each generation's keys and values for the reads of the chains it produced (on), or not (off: what is
        kept now is dropped). The engine layer decides (:func:`bsb.engine.reader.bind_reader`)."""
        self._keep_kv = bool(on)
        if not on:
            self.drop_kv()

    @property
    def read_path(self) -> str:
        """How this backend serves reads (:func:`bsb.engine.reader.read_path`): from the keys and values its own
        generation kept, else by the family's plan."""
        if self._keep_kv:
            return "kept KV"
        return READ_PATHS[self.plan.reads]

    def close(self) -> None:
        """Nothing to shut down: the model belongs to the caller; the kept keys and values are freed."""
        self.drop_kv()

    def packed_reads(self, prefix, cuts, suffix, answer=None, with_hidden=False) -> CutReads:
        """The reads of one chain at ``cuts`` (:func:`bsb.engine.packed.packed_reads`; the naive per-cut re-forward for
        a model family the packed forward does not support)."""
        with self._autocast():
            if self.plan.reads == "stateful":
                from bsb.engine.stateful import stateful_reads

                return stateful_reads(self.model, [(prefix, cuts, answer)], suffix, with_hidden)[0]
            if self.packed:
                return packed_reads(self.model, prefix, cuts, suffix, answer, with_hidden, self.max_pack_tokens)
            return naive_reads(self.model, prefix, cuts, suffix, answer, with_hidden)

    def probe_logits(self, asks, suffix, read_len: int = 1, seeds=None) -> ChainResults:
        """Probe-JS reads of several chains ``[(prefix, cuts), ...]``: per chain the read logits (C, L, V) on the
        model's device and the token-forwards spent (and, in ``.cached``, the prefix tokens taken from the kept KV).
        L = 1 comes from the kept KV (chains this backend just generated, with ``keep_kv``) or grouped packed forwards;
        L > 1 from :meth:`sampled_reads` (one seed per chain)."""
        seeds = list(seeds) if seeds is not None else [0] * len(asks)
        if read_len == 1 and self.packed and asks and self.max_pack_tokens is None:
            reads, cached = self._reads_many(asks, suffix, with_hidden=False)
            return ChainResults([(r.read_logits[:, None], r.token_forwards) for r in reads], cached)  # (C, 1, V) each
        out = ChainResults()
        for (prefix, cuts), seed in zip(asks, seeds):
            if read_len == 1:
                reads = self.packed_reads(prefix, cuts, suffix)
                out.append((reads.read_logits[:, None], reads.token_forwards))  # (C, 1, V)
            else:
                out.append(self.sampled_reads(prefix, cuts, suffix, read_len, seed))
            out.cached.append(0)
        return out

    def lens_profiles(self, prefix, cuts, suffix, answer) -> tuple[torch.Tensor, int]:
        """Lens-Shift depth profiles of one chain (:meth:`lens_profiles_many`)."""
        return self.lens_profiles_many([(prefix, cuts, answer)], suffix)[0]

    @torch.no_grad()
    def lens_profiles_many(self, asks, suffix, layers: Sequence[int] | None = None) -> ChainResults:
        """Lens-Shift depth profiles b_t^(l) = Σ_i log P^(l)(a_i | ...) (Eq. 3) of several chains
        ``[(prefix, cuts, answer), ...]``: per chain (C, layers) float32 on the CPU and the token-forwards spent (and,
        in ``.cached``, the prefix tokens taken from the kept KV). The lens is the model's own final norm and
        unembedding, applied to every chain's answer positions in one call, without autograd: the unembedding is a
        trainable parameter, and a graph through it would keep every chunk of the (positions × V) logits the
        streamed lens never holds at once (85 MB a chain on Gemma-3-270M's 262k vocabulary, kept past the call).
        ``layers``: the decoder layers of the profile, in that order (default all); the lens runs on those alone, and
        it is most of the read's cost (one unembedding per layer and answer token: 2 minutes of a 2.5-minute read of
        a whole program at 15 boundaries on Qwen2.5-Coder-0.5B, 2 cores)."""
        if not asks:
            return ChainResults()
        if self.packed and self.max_pack_tokens is None:
            reads, cached = self._reads_many(asks, suffix, with_hidden=True)
        else:
            reads = [self.packed_reads(p, c, suffix, list(a), with_hidden=True) for p, c, a in asks]
            cached = [0] * len(asks)
        parts = lens_parts(self.model)
        hidden = torch.cat([r.answer_hidden.flatten(1, 2) for r in reads], 1)  # (layers, Σ C·n, d)
        if layers is not None:
            n_layers = hidden.shape[0]
            if not layers or min(layers) < -n_layers or max(layers) >= n_layers:
                raise ValueError(f"lens_layers must name layers of this {n_layers}-layer model, got {list(layers)}")
            hidden = hidden[list(layers)]
        targets = torch.cat([torch.as_tensor(list(a) * len(c)) for _, c, a in asks]).to(hidden.device)
        lp = kernels.lens_logprobs(hidden, parts.norm_weight, parts.unembed, targets, eps=parts.norm_eps)
        lp = lp.cpu()  # (layers, Σ C·n): one host copy for every chain
        out, start = ChainResults(cached=[]), 0
        for r, n_cached in zip(reads, cached):
            _, c, n, _ = r.answer_hidden.shape
            out.append((lp[:, start : start + c * n].reshape(len(lp), c, n).sum(-1).T, r.token_forwards))
            out.cached.append(n_cached)
            start += c * n
        return out  # (C, layers) each

    def _reads_many(self, asks, suffix, with_hidden: bool) -> tuple[list[CutReads], list[int]]:
        """Reads of several chains: from the kept KV where it holds them, else in grouped packed forwards; and per
        chain the prefix tokens taken from the kept KV (each read position's prefix, as a separate forward needs)."""
        rows = self._kept_rows(asks)
        kept = [i for i, r in enumerate(rows) if r is not None]
        rest = [i for i, r in enumerate(rows) if r is None]
        out: list[CutReads | None] = [None] * len(asks)
        cached = [0] * len(asks)
        with self._autocast():
            if kept:
                chains = [(rows[i], *asks[i]) for i in kept]
                got = cached_reads(self.model, self._kept[0], chains, suffix, with_hidden, self.read_batch_tokens * 4)
                for i, r in zip(kept, got):
                    out[i] = r
                    cached[i] = sum(int(t) for t in asks[i][1])
            if rest:
                chains = [asks[i] for i in rest]
                if self.plan.reads == "stateful":
                    from bsb.engine.stateful import stateful_reads

                    got = stateful_reads(self.model, chains, suffix, with_hidden)
                else:
                    got = packed_reads_many(self.model, chains, suffix, self.read_batch_tokens, with_hidden)
                for i, r in zip(rest, got):
                    out[i] = r
        return out, cached

    def _kept_rows(self, asks) -> list[int | None]:
        """Each ask's row in the kept KV (None: not generated by the last call, or the weights changed since)."""
        if self._kept is None:
            return [None] * len(asks)
        kv, rows, version = self._kept
        if version != self._weights_version():
            self.drop_kv()
            return [None] * len(asks)
        out = []
        for ask in asks:
            row = rows.get(tuple(int(x) for x in torch.as_tensor(ask[0]).reshape(-1).tolist()))
            out.append(row if row is not None and kv.holds(row, [int(t) for t in ask[1]]) else None)
        return out

    def drop_kv(self) -> None:
        """Free the kept keys and values (the trainer calls this when a step's rollout ends)."""
        self._kept = None

    def _weights_version(self) -> int:
        """Changes when the weights change in place (their version counters: an optimizer step, ``copy_``). Not
        their storage: FSDP2 swaps a sharded policy's parameter views between forwards. Weights replaced another way
        (``param.data = ...``, ``load_state_dict(assign=True)``) need :meth:`drop_kv`."""
        return sum(p._version for p in self.model.parameters())

    @torch.no_grad()
    def sampled_reads(self, prefix, cuts, suffix, read_len: int, seed: int = 0) -> tuple[torch.Tensor, int]:
        """Probe reads with L > 1 (§3.2): after ``prefix[:t] + suffix`` sample ``read_len`` tokens at temperature
        1 and return the raw next-token logits at every read position, (C, L, V), with the token-forwards spent.
        Position one is the exact L = 1 read; later positions follow that boundary's own sampled tokens.
        Where the family keeps its keys and values (:attr:`Plan.kept_kv`), the chain is forwarded once and each
        boundary's row starts from its prefix's keys and values (max(cuts) + C·(E + L − 1) token-forwards); else
        every row's prefix is forwarded (Σ cuts + C·(E + L − 1)). The same seed samples the same tokens either way, up
        to rounding (the prefix's keys come from another batch shape: a near-tie draw may flip, likelier in bf16)."""
        if read_len < 1:
            raise ValueError(f"read_len must be >= 1, got {read_len}")
        prefix, cuts, suffix = token_ids(prefix), [int(t) for t in cuts], token_ids(suffix)
        if not cuts or not suffix or min(cuts) < 0 or max(cuts) > len(prefix):
            raise ValueError(
                f"sampled reads need cuts in [0, {len(prefix)}] (the prefix's length) and a suffix, got cuts "
                f"{cuts[:8]}{'...' if len(cuts) > 8 else ''} and a suffix of {len(suffix)} tokens"
            )
        prompts = probe_prompts(prefix, cuts, suffix)
        ids, mask, pad = self._left_pad(prompts)
        # a prefilled cache needs generate's own cache on (its cache_implementation would replace ours)
        own = self.model.generation_config.cache_implementation is None
        cache, forwards = self._prefix_cache(prefix, cuts) if self.plan.kept_kv and own else (None, 0)
        if cache is None:
            forwards += sum(len(p) - len(suffix) for p in prompts)
        with self._seeded(seed), self._autocast():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                past_key_values=cache,
                use_cache=True,  # a model's generation_config may turn it off: the steps after the first need it
                max_new_tokens=read_len,
                min_new_tokens=read_len,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                pad_token_id=pad,
                output_logits=True,
                return_dict_in_generate=True,
                synced_gpus=False,  # see generate
            )
        logits = torch.stack(out.logits, 1)  # (C, L, V), before any logits processor
        return logits, forwards + len(prompts) * (len(suffix) + read_len - 1)

    def _prefix_cache(self, prefix, cuts) -> tuple[object | None, int]:
        """The keys and values of ``prefix[:t]`` for each cut t, from one forward of the chain to the last cut, laid out
        as :meth:`_left_pad` lays out the rows ``prefix[:t] + suffix`` (row i's keys end where its suffix starts; the
        padding columns are zeros, masked); and the token-forwards spent. No cache where it cannot be cut this way
        (a sliding or recurrent layer keeps less than the whole prefix), with the forward spent finding that out."""
        from transformers import Cache, DynamicCache

        top = max(cuts)
        if top == 0:
            return None, 0
        ids = torch.as_tensor(prefix[:top], dtype=torch.long, device=self.device)[None]
        with self._autocast():
            cache = self.model(input_ids=ids, use_cache=True, logits_to_keep=1).past_key_values
        if not isinstance(cache, Cache) or any(cache.is_sliding):
            return None, top

        def rows(whole: torch.Tensor) -> torch.Tensor:  # (1, heads, top, head_dim) -> (C, heads, top, head_dim)
            out = whole.new_zeros(len(cuts), *whole.shape[1:])
            for i, t in enumerate(cuts):
                out[i, :, top - t :] = whole[0, :, :t]
            return out

        padded = DynamicCache()
        for idx, layer in enumerate(cache.layers):  # a layer at a time: one layer's rows held twice at most
            keys, values = rows(layer.keys), rows(layer.values)
            layer.keys = layer.values = None
            padded.update(keys, values, idx)
        return padded, top

    @contextlib.contextmanager
    def _seeded(self, seed: int):
        """Seed the sampling without touching the caller's global RNG streams (restored on exit)."""
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(seed)
            yield

    def _left_pad(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, int]:
        eos = self.model.generation_config.eos_token_id
        pad = self.model.generation_config.pad_token_id
        pad = pad if pad is not None else (eos if isinstance(eos, int) else 0)
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.as_tensor(p)
            mask[i, width - len(p) :] = 1
        return ids.to(self.device), mask.to(self.device), pad

    @torch.no_grad()
    def token_stats(self, prompt, response) -> TokenStats:
        prompt = torch.as_tensor(prompt, dtype=torch.long).reshape(-1)
        response = torch.as_tensor(response, dtype=torch.long).reshape(-1)
        if prompt.numel() == 0 or response.numel() == 0:
            raise ValueError("token_stats needs a non-empty prompt and response")
        ids = torch.cat([prompt, response]).to(self.device)[None]
        with self._autocast():
            hidden = self.model.model(ids).last_hidden_state[0]  # (S, d), final norm applied
        start = prompt.numel() - 1  # the position predicting response token 0
        out = {"s": [], "h": [], "m": []}
        n = response.numel()
        for c in range(0, n, self.chunk_positions):
            rows = hidden[start + c : start + min(c + self.chunk_positions, n)]  # (≤chunk, d)
            with self._autocast():
                logits = head_logits(self.model, rows).float()
            tokens = response[c : c + rows.shape[0]].to(self.device)
            s, h = kernels.surprisal_entropy(logits, tokens)
            out["s"].append(s)
            out["h"].append(h)
            out["m"].append(kernels.logit_margin(logits))
        cat = lambda k: torch.cat(out[k]).cpu()  # noqa: E731
        return TokenStats(cat("s"), cat("h"), cat("m"), token_forwards=ids.shape[1])

    def token_stats_many(self, pairs) -> list[TokenStats]:
        """:meth:`token_stats` of several ``(prompt, response)`` pairs (one forward each)."""
        return [self.token_stats(p, r) for p, r in pairs]

    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int | Sequence[int],
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | Sequence[int] = 0,
        eos_token_id: int | Sequence[int] | None = None,
    ) -> list[list[int]]:
        """Sample one continuation per prompt (left-padded batch); returns the new token ids, EOS included (or
        whichever of several stop ids ended the row). A request
        with its own cap (``max_new_tokens[i]``) finishes there (:class:`BudgetStop`); the batch runs while any
        request is unfinished.
        Request ``i`` samples from its own generator seeded ``seed + i`` (or ``seed[i]``), by the Gumbel-max trick
        (:class:`RequestSampler`): what it draws does not depend on which other requests share the batch, so a
        prompt's rollouts are the same whichever rank of a data-parallel run generates them, up to the logits' last
        bits: another batch (other padding, other rows) can round them differently, and a draw whose two best
        perturbed scores lie that close flips (rare, but seen on the walk default)."""
        from transformers import Cache

        budgets = check_generation_args(prompts, max_new_tokens, temperature, top_p)
        stops = stop_ids(eos_token_id if eos_token_id is not None else self.model.generation_config.eos_token_id)
        ids, mask, pad = self._left_pad(prompts)
        width = ids.shape[1]
        sampler = [RequestSampler(request_seeds(seed, len(prompts)), temperature, top_p)] if temperature > 0 else []
        self.drop_kv()
        with self._autocast():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max(budgets),
                stopping_criteria=[BudgetStop(budgets, width)] if min(budgets) < max(budgets) else None,
                do_sample=False,  # the argmax of the perturbed scores: a sample (RequestSampler), or greedy
                logits_processor=sampler,
                temperature=None,
                top_p=None,
                top_k=None,
                eos_token_id=stops or None,
                pad_token_id=pad,
                return_dict_in_generate=True,
                # transformers turns on its synced-GPU loop (an all_reduce every step) for an FSDP-managed model in
                # a process group; ranks generate different counts of batches, so it would wait on a peer that is
                # elsewhere. Sharded policies generate on weights gathered beforehand (Placement.whole_weights).
                synced_gpus=False,
            )
        results = []
        for row, budget in zip(out.sequences[:, width:].tolist(), budgets):
            row = row[:budget]
            end = next((j for j, t in enumerate(row) if t in stops), None)
            if end is not None:
                row = row[: end + 1]
            results.append(row)
        cache = out.past_key_values if self._keep_kv else None
        # a sliding layer keeps its window only, a recurrent one its last state: such caches are not kept
        if self.plan.kept_kv and isinstance(cache, Cache) and not any(cache.is_sliding):
            layers = [(layer.keys, layer.values) for layer in cache.layers]
            rows = {tuple(p) + tuple(r): i for i, (p, r) in enumerate(zip(prompts, results))}
            starts = [width - len(p) for p in prompts]
            self._kept = (KeptKV(layers, starts), rows, self._weights_version())
        return results


class BudgetStop:
    """A stopping criterion: request ``i`` is finished once it has ``budgets[i]`` new tokens (transformers pads a
    finished row from then on and ends the batch when every row is finished)."""

    def __init__(self, budgets: Sequence[int], width: int):
        self.budgets, self.width = torch.tensor(list(budgets)), width

    def __call__(self, input_ids: torch.Tensor, scores, **_) -> torch.Tensor:
        return (input_ids.shape[1] - self.width) >= self.budgets.to(input_ids.device)


class RequestSampler:
    """A logits processor that turns greedy decoding into sampling with one random stream per request: the scores
    are tempered and nucleus-filtered (transformers' own warpers), then each row adds Gumbel noise from its own
    generator, so the argmax is a draw from ``softmax(scores / T)`` restricted to the nucleus. Row ``i`` draws once
    per decoding step from ``seeds[i]``'s stream, whatever else is in the batch.

    The noise is drawn where the scores are, from generators on that device (made at the first step), in
    ``noise_dtype`` (default :func:`noise_dtype`): on a GPU in float32, with no (rows × V) host draw and copy per
    decoding step; on the CPU in float64, the stream every CPU result of bsb was measured with. A request's stream is
    its seed's stream on that device, the same whichever rank or batch it runs in."""

    def __init__(self, seeds: Sequence[int], temperature: float, top_p: float, noise_dtype: torch.dtype | None = None):
        from transformers import TemperatureLogitsWarper, TopPLogitsWarper

        self.seeds = [int(s) % 2**63 for s in seeds]
        self.noise_dtype = noise_dtype
        self.generators: list[torch.Generator] = []
        self.warpers = [TemperatureLogitsWarper(temperature)] + ([TopPLogitsWarper(top_p)] if top_p < 1 else [])

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.float()
        for warp in self.warpers:
            scores = warp(input_ids, scores)
        device, width = scores.device, scores.shape[-1]
        dtype = self.noise_dtype or noise_dtype(device)
        if not self.generators:
            self.generators = [torch.Generator(device=device).manual_seed(s) for s in self.seeds]
        u = torch.stack([torch.rand(width, generator=g, device=device, dtype=dtype) for g in self.generators])
        gumbel = -torch.log(-torch.log(u.clamp_min(torch.finfo(dtype).tiny)))
        return scores + gumbel.float()


def noise_dtype(device: torch.device) -> torch.dtype:
    """The sampling noise's precision on ``device``: float32 on a GPU (as vLLM's own sampler draws it), whose uniforms
    come in steps of 2^-24, so the noise lies in [-4.5, 16.6] and is coarse only above 12 (steps over 0.01 nats),
    where only tokens more than about 12 nats below the best win; float64 on the CPU."""
    return torch.float64 if device.type == "cpu" else torch.float32
