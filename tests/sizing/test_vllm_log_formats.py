# ruff: noqa: E501  (log lines are written as vLLM prints them)
"""Startup logs as they are kept, not as excerpted: several starts in one file, colour codes, CRLF, journal
prefixes, a line cut at the end, the throughput lines between, and the wordings of 0.7-0.9 and the V0
``args: Namespace(...)`` line. The lines are written here in the formats of vLLM's own log calls (the source
named beside each); the numbers are made up for the tests."""

from __future__ import annotations

import pytest

from sizing import SizingInputError
from sizing.vllm_log import parse_startup_log, read_startup_log

ESC = "\x1b"


def _v1_start(util: float, kv_gib: float, kv_tokens: str, conc: str, version: str = "0.10.1.1") -> str:
    """One V1 start as `vllm serve` logs it (api_server.py, core.py, gpu_worker.py, kv_cache_utils.py)."""
    return f"""\
(APIServer pid=1) INFO 09-01 10:00:00 [api_server.py:1805] vLLM API server version {version}
(APIServer pid=1) INFO 09-01 10:00:00 [utils.py:326] non-default args: {{'model_tag': 'Qwen/Qwen3-8B', 'model': 'Qwen/Qwen3-8B', 'max_model_len': 16384, 'gpu_memory_utilization': {util}}}
(EngineCore_0 pid=200) INFO 09-01 10:00:10 [core.py:74] Initializing a V1 LLM engine (v{version}) with config: model='Qwen/Qwen3-8B', speculative_config=None, dtype=torch.bfloat16, max_seq_len=16384, tensor_parallel_size=1, pipeline_parallel_size=1
(EngineCore_0 pid=200) INFO 09-01 10:00:30 [default_loader.py:262] Loading weights took 3.20 seconds
(EngineCore_0 pid=200) INFO 09-01 10:00:31 [gpu_model_runner.py:2007] Model loading took 15.2683 GiB and 4.410 seconds
(EngineCore_0 pid=200) INFO 09-01 10:00:50 [monitor.py:34] torch.compile takes 12.3 s in total
(EngineCore_0 pid=200) INFO 09-01 10:00:51 [gpu_worker.py:276] Available KV cache memory: {kv_gib} GiB
(EngineCore_0 pid=200) INFO 09-01 10:00:51 [kv_cache_utils.py:849] GPU KV cache size: {kv_tokens} tokens
(EngineCore_0 pid=200) INFO 09-01 10:00:51 [kv_cache_utils.py:853] Maximum concurrency for 16,384 tokens per request: {conc}x
(EngineCore_0 pid=200) INFO 09-01 10:01:00 [gpu_model_runner.py:2708] Graph capturing finished in 9 secs, took 0.61 GiB
(APIServer pid=1) INFO 09-01 10:02:00 [loggers.py:123] Engine 000: Avg prompt throughput: 120.5 tokens/s, Avg generation throughput: 45.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.2%, Prefix cache hit rate: 0.0%
"""


V1 = _v1_start(0.85, 48.91, "356,160", "21.74")
# the start refused before it: vLLM V1's check in kv_cache_utils.py (vllm#17161 and others)
V1_REFUSED = """\
(APIServer pid=1) INFO 09-01 09:50:00 [api_server.py:1805] vLLM API server version 0.10.1.1
(APIServer pid=1) INFO 09-01 09:50:00 [utils.py:326] non-default args: {'model': 'Qwen/Qwen3-8B', 'max_model_len': 40960, 'gpu_memory_utilization': 0.5}
(EngineCore_0 pid=100) INFO 09-01 09:50:30 [gpu_worker.py:276] Available KV cache memory: 2.10 GiB
(EngineCore_0 pid=100) ERROR 09-01 09:50:30 [core.py:700] ValueError: To serve at least one request with the models's max seq len (40960), (5.62 GiB KV cache is needed, which is larger than the available KV cache memory (2.10 GiB). Based on the available memory, the estimated maximum model length is 15296. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""


def test_v1_model_loading_in_gb_as_0_7_to_0_9_print_it():
    # vllm/v1/worker/gpu_model_runner.py (0.7-0.9): "Model loading took %.4f GB and %.6f seconds"
    text = (
        "INFO 04-01 10:00:31 [gpu_model_runner.py:1291] Model loading took 14.9889 GB and 4.410526 seconds\n"
        "INFO 04-01 10:00:51 [gpu_worker.py:217] Available KV cache memory: 53.12 GiB\n"
    )
    facts = parse_startup_log(text)
    assert facts.weights_gib == 14.9889 and facts.kv_cache_gib == 53.12


def test_of_two_starts_in_one_log_only_the_last_is_read():
    first = _v1_start(0.95, 60.00, "437,000", "26.67")
    facts = parse_startup_log(first + V1)
    assert (facts.gpu_memory_utilization, facts.kv_cache_gib, facts.kv_cache_tokens) == (0.85, 48.91, 356_160)
    assert facts.max_concurrency == 21.74


def test_a_refused_start_before_the_one_that_ran_does_not_make_the_log_a_refusal():
    facts = parse_startup_log(V1_REFUSED + V1)
    assert not facts.refused
    assert (facts.max_model_len, facts.kv_cache_gib) == (16384, 48.91)


def test_a_refusal_after_a_start_that_ran_is_the_refusal():
    facts = parse_startup_log(V1 + V1_REFUSED)
    assert facts.refused and facts.kv_cache_gib == 2.10 and facts.max_model_len == 40960


def test_a_last_start_cut_before_its_kv_line_falls_back_to_the_start_before_it():
    cut_short = V1.split("(EngineCore_0 pid=200) INFO 09-01 10:00:51")[0].replace("0.85", "0.70")
    facts = parse_startup_log(V1 + cut_short)
    assert facts.gpu_memory_utilization == 0.85 and facts.kv_cache_gib == 48.91


def test_offline_starts_are_told_apart_by_the_engine_line():
    # `LLM(...)` in a script: no API server line; V0's llm_engine.py prints the engine line once per start
    start = (
        "INFO 11-02 08:00:00 llm_engine.py:237] Initializing an LLM engine (v0.6.3.post1) with config: model='m', max_seq_len={n}\n"
        "INFO 11-02 08:00:20 model_runner.py:1067] Loading model weights took 14.9888 GB\n"
        "INFO 11-02 08:00:25 gpu_executor.py:122] # GPU blocks: {blocks}, # CPU blocks: 2048\n"
    )
    facts = parse_startup_log(start.format(n=8192, blocks=4000) + start.format(n=4096, blocks=5000))
    assert (facts.max_model_len, facts.gpu_blocks) == (4096, 5000)


def test_a_number_cut_at_the_end_of_the_text_is_not_read():
    # a log copied while vLLM was still writing its line: "'max_num_seqs': 12" of 128, "# GPU blocks: 19" of 1952
    args = "INFO 08-01 api_server.py:585] non-default args: {'max_num_seqs': 12"
    assert read_startup_log(V1 + args).max_num_seqs is None
    blocks = "INFO 08-01 10:00:00 gpu_executor.py:122] # GPU blocks: 19"
    with pytest.raises(SizingInputError, match="found no KV cache line"):
        parse_startup_log(blocks)
    assert parse_startup_log(blocks + "52, # CPU blocks: 2048").gpu_blocks == 1952


def test_colour_codes_anywhere_in_a_line_are_ignored():
    coloured = "".join(
        f"{ESC}[1;36m{line.split(' ', 2)[0]} {line.split(' ', 2)[1]}{ESC}[0;0m {line.split(' ', 2)[2]}\n"
        for line in V1.splitlines()
    ).replace("48.91 GiB", f"{ESC}[1m48.91{ESC}[0m GiB")
    assert read_startup_log(coloured) == read_startup_log(V1)


@pytest.mark.parametrize(
    "dress",
    [
        pytest.param(lambda text: text.replace("\n", "\r\n"), id="crlf"),
        pytest.param(
            lambda text: "".join(f"Sep 01 10:00:51 gpu-3 vllm[8123]: {line}\n" for line in text.splitlines()),
            id="journalctl",
        ),
        pytest.param(
            lambda text: text.replace("INFO 09-01 10:00:", "2025-09-01T10:00:11.123456+08:00 INFO "),
            id="iso-ts",
        ),
        pytest.param(lambda text: text.rstrip("\n"), id="no-final-newline"),
    ],
)
def test_how_a_log_was_kept_does_not_change_what_it_says(dress):
    assert read_startup_log(dress(V1)) == read_startup_log(V1)


def test_max_num_seqs_from_the_args_namespace_of_v0_servers():
    # vllm/entrypoints/openai/api_server.py before "non-default args" (0.4-0.8): logger.info("args: %s", args)
    text = (
        "INFO 06-10 12:00:00 api_server.py:177] vLLM API server version 0.5.0\n"
        "INFO 06-10 12:00:00 api_server.py:178] args: Namespace(host=None, port=8000, model='m', max_model_len=None, "
        "gpu_memory_utilization=0.9, max_num_batched_tokens=None, max_num_seqs=128, max_logprobs=20)\n"
        "INFO 06-10 12:00:20 gpu_executor.py:83] # GPU blocks: 7441, # CPU blocks: 2048\n"
    )
    facts = parse_startup_log(text)
    assert (facts.max_num_seqs, facts.gpu_memory_utilization, facts.gpu_blocks) == (128, 0.9, 7441)


# -- the file as it is shipped: compressed, UTF-16, with a byte-order mark ------------------------------------


def _facts_of(data: bytes):
    from sizing.vllm_log import decode_log

    return parse_startup_log(decode_log(data))


@pytest.mark.parametrize(
    "encode",
    [
        pytest.param(lambda t: t.encode(), id="utf-8"),
        pytest.param(lambda t: b"\xef\xbb\xbf" + t.encode(), id="utf-8-bom"),
        pytest.param(lambda t: t.encode("utf-16"), id="utf-16-bom"),  # PowerShell's `>`
        pytest.param(lambda t: t.encode("utf-16-le"), id="utf-16-le-no-bom"),
        pytest.param(lambda t: t.encode("utf-16-be"), id="utf-16-be-no-bom"),
        pytest.param(lambda t: __import__("gzip").compress(t.encode()), id="gzip"),
        pytest.param(lambda t: __import__("gzip").compress(t.encode("utf-16")), id="gzip-utf-16"),
    ],
)
def test_a_log_reads_the_same_however_it_was_saved(encode):
    assert _facts_of(encode(V1)) == parse_startup_log(V1)


def test_concatenated_gzip_members_are_read_in_order():
    import gzip

    # `cat vllm.log.1.gz vllm.log.gz`: the refused start, then the one that ran; the last start is read.
    both = gzip.compress(V1_REFUSED.encode()) + gzip.compress(V1.encode())
    assert _facts_of(both) == parse_startup_log(V1_REFUSED + V1)


def test_a_gzip_cut_short_reads_what_arrived():
    import gzip

    whole = gzip.compress((V1 * 40).encode())
    assert _facts_of(whole[: len(whole) * 3 // 4]).kv_cache_gib == parse_startup_log(V1).kv_cache_gib


def test_a_corrupt_gzip_is_one_named_error():
    import gzip

    data = bytearray(gzip.compress(V1.encode()))
    data[12:40] = b"\xff" * 28
    with pytest.raises(SizingInputError, match="gzip"):
        _facts_of(bytes(data))


def test_a_gzip_bomb_is_refused_before_it_fills_memory(monkeypatch):
    import gzip

    from sizing import vllm_log

    monkeypatch.setattr(vllm_log, "MAX_LOG_BYTES", 1024 * 1024)
    with pytest.raises(SizingInputError, match="once decompressed"):
        _facts_of(gzip.compress(b"\0" * (8 * 1024 * 1024)))
