"""Forward + backward of the training log-probs, per provider: the full-logits reference and the chunked path."""

from bsb.kernels import reference
from bsb.kernels.linear_logprob import linear_token_logprobs

FNS = {"reference": reference.linear_token_logprobs, "chunked": linear_token_logprobs}


def fwd_bwd(provider: str):
    fn = FNS[provider]

    def run(hidden, weight, targets):
        fn(hidden, weight, targets).sum().backward()
        hidden.grad = weight.grad = None

    return run
