"""Reading vLLM startup logs: one test per wording vLLM has used, each on a real public excerpt
(tests/sizing/vllm_logs.py cites the thread each comes from)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from sizing import SizingInputError
from sizing.vllm_log import parse_startup_log, read_startup_log


def _load_logs():
    # tests are collected in importlib mode (no sys.path entry): load the excerpts module by path
    spec = importlib.util.spec_from_file_location("vllm_logs", Path(__file__).with_name("vllm_logs.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


logs = _load_logs()


def test_v0_064_one_line_summary():
    facts = parse_startup_log(logs.V0_064_20K)
    assert facts.engine == "v0"
    assert facts.total_gib == 23.58 and facts.gpu_memory_utilization == 0.90
    assert facts.weights_gib == 14.9888  # printed "GB", GiB in fact (vllm#14979)
    assert facts.non_torch_gib == 0.35 and facts.kv_cache_gib == 3.81
    assert facts.activation_gib == pytest.approx(17.06 - 14.9888)  # peak_torch minus weights
    assert facts.gpu_blocks == 1952
    assert (facts.concurrency_len, facts.max_concurrency) == (20000, 1.56)
    assert not facts.refused


def test_v0_refusal_is_recognised():
    facts = parse_startup_log(logs.V0_064_29K)
    assert facts.refused and facts.gpu_blocks == 1478 and facts.kv_cache_gib == 2.89


def test_v0_four_line_summary_printed_by_every_rank():
    facts = parse_startup_log(logs.V0_PROFILE_TP)
    assert facts.engine == "v0"
    assert (facts.total_gib, facts.gpu_memory_utilization) == (23.58, 0.99)
    assert (facts.weights_gib, facts.non_torch_gib, facts.activation_gib, facts.kv_cache_gib) == (
        21.21,
        0.20,
        0.37,
        1.57,
    )
    assert "v0-profile" in facts.formats


def test_v0_065_table():
    facts = parse_startup_log(logs.V0_065_TABLE)
    assert (facts.total_gib, facts.gpu_memory_utilization) == (79.22, 0.90)
    assert (facts.weights_gib, facts.non_torch_gib, facts.activation_gib, facts.kv_cache_gib) == (
        14.96,
        1.79,
        1.26,
        53.29,
    )
    assert facts.engine == "v0"
    # the -tp 2 excerpt stops before its KV line: read as far as it goes, refused for calibration
    tp2 = read_startup_log(logs.V0_065_TABLE_TP2)
    assert (tp2.weights_gib, tp2.non_torch_gib) == (7.48, 3.58)
    with pytest.raises(SizingInputError, match="found no KV cache line"):
        parse_startup_log(logs.V0_065_TABLE_TP2)


@pytest.mark.parametrize(
    ("text", "blocks", "tokens"),
    [(logs.V1_EARLY_BLOCKS, 127626, None), (logs.V1_EARLY_TOKENS, None, 2_042_016)],
    ids=["blocks", "tokens"],
)
def test_early_v1_block_and_token_lines(text, blocks, tokens):
    facts = parse_startup_log(text)
    assert facts.gpu_blocks == blocks and facts.kv_cache_tokens == tokens
    assert (facts.concurrency_len, facts.max_concurrency) == (2048, 997.08)
    # PR#13596: the two wordings report the same pool (127626 blocks x 16 = 2,042,016 tokens)
    assert 127626 * 16 == 2_042_016


def test_v1_available_kv_memory_and_tokens_with_thousands_separators():
    facts = parse_startup_log(logs.V1_QWEN3_14B)
    assert facts.engine == "v1"
    assert facts.kv_cache_gib == 6.51 and facts.kv_cache_tokens == 42_656
    assert (facts.concurrency_len, facts.max_concurrency) == (32_768, 1.30)


@pytest.mark.parametrize(
    ("text", "weights", "kv"),
    [(logs.V1_MODEL_LOADING, 7.6785, 18.38), (logs.V1_MODEL_LOADING_MEMORY, 11.55, 12.57)],
    ids=["GiB and", "GiB memory and"],
)
def test_v1_model_loading_wordings(text, weights, kv):
    facts = parse_startup_log(text)
    assert (facts.weights_gib, facts.kv_cache_gib, facts.engine) == (weights, kv, "v1")


def test_v1_cuda_graph_estimate_and_utilization_flag():
    facts = parse_startup_log(logs.V1_GRAPH_ESTIMATE)
    assert facts.cuda_graph_gib == 0.36 and facts.cuda_graph_estimated
    assert facts.gpu_memory_utilization == 0.82 and facts.kv_cache_gib == 6.87


def test_a_log_without_a_kv_line_is_refused_naming_what_is_missing():
    # vllm#11550's excerpt stops before the KV cache line: it is still read as far as it goes
    assert read_startup_log(logs.V0_TRUNCATED).total_gib == 23.55
    with pytest.raises(SizingInputError, match="found no KV cache line"):
        parse_startup_log(logs.V0_TRUNCATED)


@pytest.mark.parametrize("text", ["", "hello world\n", "INFO api_server.py] vLLM API server version 0.8.1\n"])
def test_text_that_is_no_startup_log_is_refused(text):
    with pytest.raises(SizingInputError, match="not a vLLM startup log"):
        parse_startup_log(text)


def test_the_smallest_kv_figure_over_ranks_is_kept():
    # vLLM sizes the pool by the minimum over ranks (vllm#13061)
    two_ranks = logs.V1_QWEN3_14B + logs.V1_QWEN3_14B.replace("6.51 GiB", "6.40 GiB").replace(
        "42,656", "41,936"
    )
    facts = parse_startup_log(two_ranks)
    assert facts.kv_cache_gib == 6.40 and facts.kv_cache_tokens == 41_936


def test_version_engine_and_settings_from_the_config_line():
    text = (
        "INFO 03-20 llm_engine.py:232] Initializing a V0 LLM engine (v0.8.1) with config: "
        "model='Qwen/Qwen2.5-7B-Instruct', dtype=torch.bfloat16, max_seq_len=6600, tensor_parallel_size=1\n"
        + logs.V1_MODEL_LOADING
    )
    facts = parse_startup_log(text)
    assert (facts.vllm_version, facts.engine, facts.model) == ("0.8.1", "v0", "Qwen/Qwen2.5-7B-Instruct")
    assert (facts.max_model_len, facts.tp, facts.dtype) == (6600, 1, "bf16")


def test_v0_07_cuda_blocks_wording_and_a_negative_remainder_are_a_refusal():
    facts = parse_startup_log(logs.V0_07_NO_BLOCKS)
    assert facts.engine == "v0" and facts.gpu_blocks == 0
    assert facts.kv_cache_gib == -1.05  # vLLM's own remainder, sign kept
    assert (facts.weights_gib, facts.non_torch_gib, facts.activation_gib) == (5.20, 0.03, 1.42)
    assert (facts.total_gib, facts.gpu_memory_utilization) == (8.00, 0.70)
    assert facts.refused


def test_ranks_that_differ_keep_the_tightest_rank_figures():
    facts = parse_startup_log(logs.V0_083_RANKS_DIFFER)
    assert facts.kv_cache_gib == 0.04  # the smallest remainder over ranks
    assert facts.non_torch_gib == 0.43  # and the largest non-torch figure, the same rank's
    assert (facts.weights_gib, facts.activation_gib) == (34.43, 2.51)
    assert not facts.refused


def test_v0_refusal_message_carries_the_kv_tokens():
    facts = parse_startup_log(logs.V0_07_TP2_REFUSED)
    assert facts.refused and facts.kv_cache_tokens == 81_536
    assert facts.weights_gib == 13.9476
    assert "v0-refusal" in facts.formats


def _containerd(text: str, cut: int = 16 * 1024) -> str:
    """A log as containerd keeps it on the node (/var/log/pods/...): a line past 16 KiB in P records."""
    out = []
    for line in text.splitlines():
        pieces = [line[i : i + cut] for i in range(0, len(line), cut)] or [""]
        for k, piece in enumerate(pieces):
            out.append(
                f"2025-10-03T08:22:17.{k:09d}Z stderr {'F' if k == len(pieces) - 1 else 'P'} {piece}\n"
            )
    return "".join(out)


def test_a_node_copy_of_the_log_joins_the_config_line_the_runtime_cut():
    # the engine's config line (its compilation_config lists every graph size) passed 16 KiB: containerd cut
    # it with a timestamp between "max_seq_len=327" and "68", and the start was read as 327 tokens long
    head = (
        "(EngineCore_DP0 pid=1133552) INFO 10-03 16:22:05 [core.py:77] Initializing a V1 LLM engine "
        "(v0.11.0) with config: model='Qwen/Qwen3-14B', dtype=torch.bfloat16, "
    )
    pad = (
        "compilation_config={"
        + "x" * (16 * 1024 - len(head) - len("compilation_config={}, max_seq_len=327"))
        + "}, "
    )
    config = head + pad + "max_seq_len=32768, tensor_parallel_size=1\n"
    assert config.index("max_seq_len=327") + len("max_seq_len=327") == 16 * 1024  # the cut is in the number
    facts = parse_startup_log(_containerd(config + logs.V1_QWEN3_14B))
    assert (facts.max_model_len, facts.kv_cache_tokens, facts.vllm_version) == (32768, 42656, "0.11.0")
