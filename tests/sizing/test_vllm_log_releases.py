# ruff: noqa: E501  (log lines are written as vLLM prints them)
"""Startup logs of the later V1 releases and of the deployments around them: the server banner that replaced
"vLLM API server version" (0.23 prints it), the memory summary of gpu_worker.py, data-parallel engines and a KV
cache fixed by --kv-cache-memory. The lines are written in the shapes of vLLM's own log calls (the file named
in each line's prefix; real excerpts quoted in vllm#46169, vllm#49878 and others); the numbers are made up."""

from __future__ import annotations

import pytest

from sizing.vllm_log import parse_startup_log

ESC = "\x1b"


def _banner(version: str, model: str, coloured: bool = True) -> str:
    """The server's first lines in later releases (0.23 in vllm#46169): a logo with the version and model beside it (api_utils.py),
    or with VLLM_DISABLE_LOG_LOGO=1 one plain line."""
    p = "(APIServer pid=1) INFO 06-19 15:35:00 [api_utils.py:339] "
    if not coloured:
        return f"{p}vLLM server version {version}, serving model {model}\n"
    w, o, b, r = f"{ESC}[1m", f"{ESC}[93m", f"{ESC}[94m", f"{ESC}[0m"
    return (
        f"{p}\n"
        f"{p}       {w}█     █     █▄   ▄█{r}\n"
        f"{p} {o}▄▄{r} {b}▄█{r} {w}█     █     █ ▀▄▀ █{r}  version {w}{version}{r}\n"
        f"{p}  {o}█{r}{b}▄█▀{r} {w}█     █     █     █{r}  model   {w}{model}{r}\n"
        f"{p}   {b}▀▀{r}  {w}▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀{r}\n"
        f"{p}\n"
    )


def _start(util: float, kv_gib: float, tokens: str, version: str = "0.23.0", coloured: bool = True) -> str:
    return _banner(version, "Qwen/Qwen3-8B", coloured) + (
        f"(APIServer pid=1) INFO 06-19 15:35:00 [api_utils.py:273] non-default args: {{'model_tag': 'Qwen/Qwen3-8B', 'model': 'Qwen/Qwen3-8B', 'max_model_len': 16384, 'gpu_memory_utilization': {util}, 'max_num_seqs': 64}}\n"
        "(APIServer pid=1) INFO 06-19 15:35:08 [model.py:1745] Using max model len 16384\n"
        f"(EngineCore pid=83) INFO 06-19 15:35:20 [core.py:113] Initializing a V1 LLM engine (v{version}) with config: model='Qwen/Qwen3-8B', speculative_config=None, dtype=torch.bfloat16, max_seq_len=16384, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1\n"
        "(EngineCore pid=83) INFO 06-19 15:35:40 [gpu_model_runner.py:4216] Model loading took 15.27 GiB memory and 10.5 seconds\n"
        f"(EngineCore pid=83) INFO 06-19 15:36:00 [gpu_worker.py:480] Available KV cache memory: {kv_gib} GiB\n"
        f"(EngineCore pid=83) INFO 06-19 15:36:00 [kv_cache_utils.py:1744] GPU KV cache size: {tokens} tokens\n"
        "(EngineCore pid=83) INFO 06-19 15:36:00 [kv_cache_utils.py:1749] Maximum concurrency for 16,384 tokens per request: 20.00x\n"
    )


@pytest.mark.parametrize("coloured", [True, False], ids=["logo", "plain"])
def test_the_server_banner_of_later_releases_names_the_version_and_model(coloured):
    # an excerpt: the banner and the KV line, as pasted into an issue
    kv = "(EngineCore pid=83) INFO 06-19 15:36:00 [gpu_worker.py:480] Available KV cache memory: 48.91 GiB\n"
    facts = parse_startup_log(_banner("0.23.0", "Qwen/Qwen3-8B", coloured) + kv)
    assert (facts.vllm_version, facts.model, facts.kv_cache_gib) == ("0.23.0", "Qwen/Qwen3-8B", 48.91)


@pytest.mark.parametrize("coloured", [True, False], ids=["logo", "plain"])
def test_a_restart_under_the_later_banner_reads_the_last_start_with_its_own_flags(coloured):
    # the second start's --gpu-memory-utilization is only in its own "non-default args" line, which comes
    # before its engine line: cutting at the engine line gave that line to the first start
    facts = parse_startup_log(
        _start(0.95, 60.0, "437,000", coloured=coloured) + _start(0.85, 48.91, "356,160", coloured=coloured)
    )
    assert (facts.gpu_memory_utilization, facts.kv_cache_gib, facts.kv_cache_tokens) == (0.85, 48.91, 356_160)
