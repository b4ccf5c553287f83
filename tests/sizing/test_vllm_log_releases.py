# ruff: noqa: E501  (log lines are written as vLLM prints them)
"""Startup logs of the later V1 releases and of the deployments around them: the server banner that replaced
"vLLM API server version" (0.23 prints it), the memory summary of gpu_worker.py, data-parallel engines and a KV
cache fixed by --kv-cache-memory. The lines are written in the shapes of vLLM's own log calls (the file named
in each line's prefix; real excerpts quoted in vllm#46169, vllm#49878 and others); the numbers are made up."""

from __future__ import annotations

import pytest

from sizing import SizingInputError
from sizing.vllm_log import parse_startup_log, read_startup_log

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


# -- gpu_worker.py's memory summary after the graphs are captured ----------------------------------------------


def _usage_tp2(consumed: tuple[float, float]) -> str:
    """0.27-0.28 (INFO, one line per rank): weights and non-torch memory together."""
    out = ""
    for rank, used in enumerate(consumed):
        p = f"(Worker_TP{rank} pid={1159 + rank}) INFO 09-04 11:00:17"
        out += (
            f"{p} [gpu_model_runner.py:4216] Model loading took 7.63 GiB memory and 12.1 seconds\n"
            f"{p} [gpu_worker.py:624] Available KV cache memory: {17.79 - rank * 0.02:.2f} GiB\n"
            f"{p} [gpu_model_runner.py:5120] Graph capturing finished in 18 secs, took 0.25 GiB\n"
            f"{p} [gpu_model_runner.py:5122] CUDA graph pool memory: 0.25 GiB (actual), 0.64 GiB (estimated), difference: 0.39 GiB (156.0%).\n"
            f"{p} [gpu_worker.py:855] Free memory on device (91.64/94.97 GiB) on startup. Desired GPU memory utilization is (0.91, 86.42 GiB). Actual usage is {used} GiB for consumed memory (weights + non-torch), 4.19 GiB for peak activation, and 0.25 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=18676332626` (17.39 GiB) to fit into requested memory, or `--kv-cache-memory=24274632704` (22.61 GiB) to fully utilize gpu memory. Current kv cache memory in use is 17.79 GiB.\n"
        )
    return (
        out
        + "(EngineCore pid=1000) INFO 09-04 11:00:18 [kv_cache_utils.py:1307] GPU KV cache size: 291,456 tokens\n"
    )


def test_the_v1_memory_summary_gives_non_torch_memory_and_activation_peak():
    facts = parse_startup_log(_usage_tp2((8.41, 8.53)))
    assert (facts.total_gib, facts.gpu_memory_utilization) == (94.97, 0.91)
    assert facts.weights_gib == 7.63 and facts.activation_gib == 4.19 and facts.cuda_graph_gib == 0.25
    # the tightest rank: the most non-torch memory (8.53 - 7.63), as for V0's per-rank summaries
    assert facts.non_torch_gib == pytest.approx(0.90)
    assert facts.kv_cache_gib == 17.77 and facts.kv_cache_tokens == 291_456


def test_the_earlier_v1_memory_summary_names_each_term():
    # the earlier wording (at DEBUG in some releases: VLLM_LOGGING_LEVEL=DEBUG)
    text = (
        "(EngineCore_0 pid=200) INFO 10-01 10:00:31 [gpu_model_runner.py:2007] Model loading took 15.27 GiB and 4.4 seconds\n"
        "(EngineCore_0 pid=200) INFO 10-01 10:00:51 [gpu_worker.py:276] Available KV cache memory: 48.91 GiB\n"
        "(EngineCore_0 pid=200) DEBUG 10-01 10:01:00 [gpu_worker.py:396] Free memory on device (78.6/79.19 GiB) on startup. Desired GPU memory utilization is (0.85, 67.31 GiB). Actual usage is 15.27 GiB for weight, 2.36 GiB for peak activation, 0.54 GiB for non-torch memory, and 0.61 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=52252094464` (48.66 GiB) to fit into requested memory, or `--kv-cache-memory=63802707968` (59.42 GiB) to fully utilize gpu memory. Current kv cache memory in use is 48.91 GiB.\n"
    )
    facts = parse_startup_log(text)
    assert (facts.weights_gib, facts.activation_gib, facts.non_torch_gib, facts.cuda_graph_gib) == (
        15.27,
        2.36,
        0.54,
        0.61,
    )


def _profile_debug(non_torch: str) -> str:
    """0.10-0.11 with VLLM_LOGGING_LEVEL=DEBUG: gpu_worker.py's requested memory and MemoryProfilingResult's
    repr (vllm/utils), V0's four-line summary of the same figures under other names."""
    p = "(EngineCore_DP0 pid=200)"
    return (
        f"{p} INFO 10-01 10:00:31 [gpu_model_runner.py:2653] Model loading took 14.99 GiB and 4.4 seconds\n"
        f"{p} DEBUG 10-01 10:00:50 [gpu_worker.py:262] Initial free memory: 78.60 GiB; Requested memory: 0.90 (util), 71.27 GiB\n"
        f"{p} DEBUG 10-01 10:00:50 [gpu_worker.py:276] Memory profiling takes 6.42 seconds. Total non KV cache memory: 17.73GiB; torch peak memory increase: 1.87GiB; non-torch forward increase memory: {non_torch}GiB; weights memory: 14.99GiB.\n"
        f"{p} INFO 10-01 10:00:50 [gpu_worker.py:277] Available KV cache memory: 53.54 GiB\n"
        f"{p} INFO 10-01 10:00:51 [kv_cache_utils.py:1087] GPU KV cache size: 438,608 tokens\n"
        f"{p} INFO 10-01 10:00:51 [kv_cache_utils.py:1091] Maximum concurrency for 32,768 tokens per request: 13.39x\n"
    )


def test_the_v1_debug_profile_gives_activation_peak_non_torch_memory_and_util():
    facts = parse_startup_log(_profile_debug("0.87"))
    assert (facts.weights_gib, facts.activation_gib, facts.non_torch_gib) == (14.99, 1.87, 0.87)
    assert facts.gpu_memory_utilization == 0.90 and facts.kv_cache_gib == 53.54
    assert (facts.kv_cache_tokens, facts.concurrency_len, facts.max_concurrency) == (438_608, 32_768, 13.39)
    # with the weights offloaded to the CPU the increase is negative: not a non-torch figure
    assert parse_startup_log(_profile_debug("-15.24")).non_torch_gib is None


def test_a_memory_summary_without_a_weights_line_gives_no_non_torch_figure():
    # consumed memory is weights and non-torch together: without the weights it cannot be split
    line = _usage_tp2((8.41, 8.53)).splitlines()[4] + "\n"
    facts = parse_startup_log(line)
    assert facts.non_torch_gib is None and facts.activation_gib == 4.19


# -- a KV cache of a size given by hand ------------------------------------------------------------------------

KV_GIVEN_ARGS = "(APIServer pid=1) INFO 07-26 12:28:00 [api_utils.py:273] non-default args: {'model': 'Qwen/Qwen2.5-7B-Instruct', 'max_model_len': 16384, 'kv_cache_memory_bytes': 10737418240}\n"
KV_GIVEN_RESERVED = "(EngineCore pid=83) INFO 07-26 12:29:34 [gpu_worker.py:479] Initial free memory 44.1 GiB, reserved 10.0 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does not respect the gpu_memory_utilization config.\n"
KV_GIVEN_REST = (
    "(EngineCore pid=83) INFO 07-26 12:29:20 [gpu_model_runner.py:4216] Model loading took 14.25 GiB memory and 12.1 seconds\n"
    "(EngineCore pid=83) INFO 07-26 12:29:34 [kv_cache_utils.py:1307] GPU KV cache size: 187,248 tokens\n"
)


@pytest.mark.parametrize("line", [KV_GIVEN_ARGS, KV_GIVEN_RESERVED], ids=["args", "reserved"])
def test_a_kv_cache_given_by_kv_cache_memory_is_recognised(line):
    assert parse_startup_log(line + KV_GIVEN_REST).kv_cache_memory_given
    # vLLM's own advice names the flag without it having been given
    advice = _usage_tp2((8.41, 8.53))
    assert not parse_startup_log(advice).kv_cache_memory_given


def test_a_kv_cache_given_by_kv_cache_memory_cannot_calibrate():
    import sizing
    from sizing.calibration import calibrate

    dep = sizing.Deployment(sizing.find_model("Qwen2.5-7B"), sizing.find_gpu("L20"), 1, max_model_len=16384)
    with pytest.raises(SizingInputError, match="--kv-cache-memory"):
        calibrate(parse_startup_log(KV_GIVEN_ARGS + KV_GIVEN_RESERVED + KV_GIVEN_REST), dep)


# -- pipeline parallelism: each rank holds some of the layers ----------------------------------------------


def test_a_pipeline_parallel_start_cannot_calibrate_a_tensor_parallel_model():
    import sizing
    from sizing.calibration import calibrate

    text = _start(0.9, 20.5, "383,000").replace("pipeline_parallel_size=1", "pipeline_parallel_size=2")
    facts = parse_startup_log(text)
    assert facts.pp == 2
    dep = sizing.Deployment(sizing.find_model("Qwen2.5-7B"), sizing.find_gpu("L20"), 1, max_model_len=16384)
    with pytest.raises(SizingInputError, match="pipeline_parallel_size=2"):
        calibrate(facts, dep)


# -- which start of several -----------------------------------------------------------------------------


def test_the_facts_say_how_many_starts_the_log_holds_and_which_was_read():
    first, second = _start(0.95, 60.0, "437,000"), _start(0.85, 48.91, "356,160")
    cut = second.split("(EngineCore pid=83) INFO 06-19 15:35:40")[0]
    assert (read_startup_log(first).starts, read_startup_log(first).start_read) == (1, 1)
    facts = read_startup_log(first + second)
    assert (facts.starts, facts.start_read, facts.gpu_memory_utilization) == (2, 2, 0.85)
    facts = read_startup_log(first + second + cut)
    assert (facts.starts, facts.start_read, facts.gpu_memory_utilization) == (3, 2, 0.85)


# -- several servers in one file: `kubectl logs -l app=vllm --prefix`, `docker compose logs` -------------------


def _prefixed(prefix: str, text: str) -> list[str]:
    return [prefix + line for line in text.splitlines(keepends=True)]


def _interleave(*groups: list[str]) -> str:
    out: list[str] = []
    for i in range(max(len(g) for g in groups)):
        out += [g[i] for g in groups if i < len(g)]
    return "".join(out)


def test_the_servers_of_several_pods_in_one_file_are_refused_naming_them():
    a = _prefixed("[pod/vllm-0/vllm] ", _start(0.90, 20.5, "383,000"))
    b = _prefixed("[pod/vllm-1/vllm] ", _start(0.85, 18.0, "336,000"))
    with pytest.raises(SizingInputError, match=r"2 servers .*pod/vllm-0/vllm, pod/vllm-1/vllm"):
        parse_startup_log(_interleave(a, b))


def test_a_sidecar_beside_the_server_is_left_out():
    sidecar = [
        f"[pod/vllm-0/proxy] 2025/09/01 10:00:{i:02d} [info] upstream vllm:8000 is down\n" for i in range(9)
    ]
    server = _start(0.85, 48.91, "356,160")
    facts = parse_startup_log(_interleave(sidecar, _prefixed("[pod/vllm-0/vllm] ", server)))
    assert facts == parse_startup_log(server)


def test_compose_logs_of_one_server_read_as_its_own_log():
    server = _start(0.85, 48.91, "356,160")
    coloured = f"{ESC}[36mvllm-1  |{ESC}[0m "
    facts = parse_startup_log("".join(_prefixed(coloured, server)))
    assert facts == parse_startup_log(server)
    two = _interleave(_prefixed("vllm-a-1  | ", server), _prefixed("vllm-b-1  | ", server))
    with pytest.raises(SizingInputError, match="vllm-a-1, vllm-b-1"):
        parse_startup_log(two)


# -- a rank with no room left -----------------------------------------------------------------------------


def test_a_rank_with_a_negative_kv_remainder_is_the_tightest_and_a_refusal():
    # V1 prints each rank's figure; one rank's can be below zero (its activation peak took the rest), and the
    # log may end there (the ValueError goes to another stream or the copy was cut)
    text = (
        "(Worker_TP0 pid=447) INFO 08-14 14:07:22 [gpu_worker.py:563] Available KV cache memory: 0.24 GiB\n"
        "(Worker_TP1 pid=448) INFO 08-14 14:07:22 [gpu_worker.py:563] Available KV cache memory: -1.42 GiB\n"
    )
    facts = parse_startup_log(text)
    assert facts.kv_cache_gib == -1.42 and facts.refused
    assert not parse_startup_log(text.replace("-1.42", "0.31")).refused


# -- data-parallel engines without an API server (`vllm serve --headless`, `LLM(data_parallel_size=2)`) --------


def _engine(dp: int, kv_gib: float, tokens: str, tag: str = "EngineCore_DP{dp}") -> list[str]:
    p = f"({tag.format(dp=dp)} pid={100 + dp}) INFO 09-01 10:00:1{dp}"
    return [
        f"{p} [core.py:74] Initializing a V1 LLM engine (v0.10.1) with config: model='Qwen/Qwen3-8B', dtype=torch.bfloat16, max_seq_len=16384, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=2\n",
        f"{p} [gpu_model_runner.py:2007] Model loading took 15.27 GiB and 4.4 seconds\n",
        f"{p} [gpu_worker.py:276] Available KV cache memory: {kv_gib} GiB\n",
        f"{p} [kv_cache_utils.py:849] GPU KV cache size: {tokens} tokens\n",
    ]


@pytest.mark.parametrize("tag", ["EngineCore_DP{dp}", "EngineCore_{dp}"])
@pytest.mark.parametrize("order", ["interleaved", "one-after-the-other"])
def test_the_engines_of_one_data_parallel_start_are_one_start(tag, order):
    dp0, dp1 = _engine(0, 48.10, "350,000", tag), _engine(1, 48.50, "353,000", tag)
    lines = [x for pair in zip(dp0, dp1, strict=True) for x in pair] if order == "interleaved" else dp0 + dp1
    facts = read_startup_log("".join(lines))
    assert (facts.starts, facts.kv_cache_gib, facts.kv_cache_tokens) == (1, 48.10, 350_000)
    # a restart of both engines is a second start
    again = _engine(0, 40.0, "290,000", tag) + _engine(1, 40.2, "291,000", tag)
    facts = read_startup_log("".join(lines + again))
    assert (facts.starts, facts.start_read, facts.kv_cache_gib) == (2, 2, 40.0)


def test_a_start_that_stopped_after_loading_the_model_is_not_called_no_vllm_log():
    # the engine died after loading the weights (a CUDA out-of-memory error in the profile run)
    text = _start(0.9, 20.0, "1").split("(EngineCore pid=83) INFO 06-19 15:36:00")[0] + (
        "(EngineCore pid=83) ERROR 06-19 15:35:50 [core.py:700] torch.OutOfMemoryError: CUDA out of memory.\n"
    )
    with pytest.raises(SizingInputError) as err:
        parse_startup_log(text)
    message = str(err.value)
    assert "not a vLLM startup log" not in message
    assert (
        "vLLM 0.23.0 loaded the model (15.27 GiB) but the log stops before it sized its KV cache" in message
    )
    assert "found no KV cache line" in message
