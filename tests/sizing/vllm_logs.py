# ruff: noqa: E501  (log lines are quoted as vLLM printed them)
"""Real public vLLM startup-log excerpts, one per wording vLLM has used, each with its source.

Lines are copied from the cited GitHub threads (only the lines the calibration reads, plus their neighbours);
numbers are vLLM's own. They are test data, not fixtures of our code's output.
"""

# vllm-project/vllm#10517 (comment by kaspersiminski, 2024-12-02): RTX 3090, meta-llama/Llama-3.1-8B-Instruct,
# vLLM 0.6.4 (V0), --max-model-len 20000: the one-line "Memory profiling results" summary.
V0_064_20K = """\
Loading model weights took 14.9888 GB
Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=17.06GiB \
memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90
GPU blocks: 1952, # CPU blocks: 2048
Maximum concurrency for 20000 tokens per request: 1.56x
"""

# Same comment, same deployment at --max-model-len 29000: vLLM refused to start.
V0_064_29K = """\
Loading model weights took 14.9888 GB
Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=17.98GiB \
memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=2.89GiB gpu_memory_utilization=0.90
# GPU blocks: 1478, # CPU blocks: 2048
Maximum concurrency for 29000 tokens per request: 0.82x
The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache \
(23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""

# vllm-project/vllm PR#14447 (comment by davidsyoung, 2025-04-12): V0 0.8.x worker.py, four-line summary printed
# by every TP rank (three ranks shown).
V0_PROFILE_TP = """\
(VllmWorkerProcess pid=521) INFO 04-12 08:21:19 [worker.py:267] model weights take 21.21GiB; non_torch_memory \
takes 0.20GiB; PyTorch activation peak memory takes 0.37GiB; the rest of the memory reserved for KV Cache is 1.57GiB.
(VllmWorkerProcess pid=507) INFO 04-12 08:21:19 [worker.py:267] Memory profiling takes 17.59 seconds
(VllmWorkerProcess pid=507) INFO 04-12 08:21:19 [worker.py:267] the current vLLM instance can use \
total_gpu_memory (23.58GiB) x gpu_memory_utilization (0.99) = 23.35GiB
(VllmWorkerProcess pid=507) INFO 04-12 08:21:19 [worker.py:267] model weights take 21.21GiB; non_torch_memory \
takes 0.20GiB; PyTorch activation peak memory takes 0.37GiB; the rest of the memory reserved for KV Cache is 1.57GiB.
(VllmWorkerProcess pid=577) INFO 04-12 08:21:19 [worker.py:267] Memory profiling takes 17.56 seconds
(VllmWorkerProcess pid=577) INFO 04-12 08:21:19 [worker.py:267] the current vLLM instance can use \
total_gpu_memory (23.58GiB) x gpu_memory_utilization (0.99) = 23.35GiB
(VllmWorkerProcess pid=577) INFO 04-12 08:21:19 [worker.py:267] model weights take 21.21GiB; non_torch_memory \
takes 0.20GiB; PyTorch activation peak memory takes 0.37GiB; the rest of the memory reserved for KV Cache is 1.57GiB.
"""

# vllm-project/vllm#11550 (comment by hmellor, 2025-01-14): the V0 summary's first lines only; no KV line.
V0_TRUNCATED = """\
INFO 01-14 12:36:51 model_runner.py:1099] Loading model weights took 7.9692 GB
(VllmWorkerProcess pid=2607784) INFO 01-14 12:36:52 worker.py:240] Memory profiling takes 1.46 seconds
(VllmWorkerProcess pid=2607784) INFO 01-14 12:36:52 worker.py:240] the current vLLM instance can use \
total_gpu_memory (23.55GiB) x gpu_memory_utilization (0.90) = 21.19GiB
"""

# vllm-project/vllm PR#13596 (description, 2025-02-20): early V1 reporting before and after that change.
V1_EARLY_BLOCKS = """\
INFO 02-20 00:01:02 kv_cache_utils.py:522] # GPU blocks: 127626
INFO 02-20 00:01:02 kv_cache_utils.py:525] Maximum concurrency for 2048 tokens per request: 997.08x
"""
V1_EARLY_TOKENS = """\
INFO 02-19 23:56:55 kv_cache_utils.py:524] GPU KV cache size: 2,042,016 tokens
INFO 02-19 23:56:55 kv_cache_utils.py:527] Maximum concurrency for 2,048 tokens per request: 997.08x
"""

# LMCache/LMCache#1739 (description, 2025-10-03): V1 (EngineCore_DP0), Qwen3-14B on one GPU, 32768 tokens.
V1_QWEN3_14B = """\
(EngineCore_DP0 pid=1133552) INFO 10-03 16:22:17 [gpu_worker.py:298] Available KV cache memory: 6.51 GiB
(EngineCore_DP0 pid=1133552) INFO 10-03 16:22:17 [kv_cache_utils.py:864] GPU KV cache size: 42,656 tokens
(EngineCore_DP0 pid=1133552) INFO 10-03 16:22:17 [kv_cache_utils.py:868] Maximum concurrency for 32,768 tokens \
per request: 1.30x
"""

# kyuz0/amd-strix-halo-vllm-toolboxes PR#5 (2025-10-26): V1 "Model loading took X GiB and Y seconds".
V1_MODEL_LOADING = """\
(EngineCore_0 pid=3856547) INFO 10-26 21:47:46 [gpu_model_runner.py:1975] Model loading took 7.6785 GiB and \
2.195456 seconds
(EngineCore_0 pid=3856547) INFO 10-26 21:48:00 [gpu_worker.py:276] Available KV cache memory: 18.38 GiB
"""

# guqiong96/Lvllm#35 (2026-02-12): newer V1 wording "Model loading took X GiB memory and Y seconds"; NVIDIA A40.
V1_MODEL_LOADING_MEMORY = """\
(EngineCore_DP0 pid=15098) INFO 02-12 08:33:42 [gpu_model_runner.py:4216] Model loading took 11.55 GiB memory \
and 1940.360672 seconds
(EngineCore_DP0 pid=15098) INFO 02-12 08:34:25 [gpu_worker.py:360] Available KV cache memory: 12.57 GiB
(EngineCore_DP0 pid=15098) INFO 02-12 08:34:25 [kv_cache_utils.py:1307] GPU KV cache size: 53,136 tokens
"""

# gpustack/runner PR#251 (2026-08-14): vLLM 0.27 with CUDA-graph memory profiling on (default since 0.21).
V1_GRAPH_ESTIMATE = """\
(Worker_TP1 pid=448) INFO 08-14 14:07:20 [gpu_model_runner.py:6681] Profiling CUDA graph memory: PIECEWISE=16 \
(largest=16)
(Worker_TP1 pid=448) INFO 08-14 14:07:22 [gpu_model_runner.py:6806] Estimated CUDA graph memory: 0.36 GiB total
(Worker_TP0 pid=447) INFO 08-14 14:07:22 [gpu_worker.py:563] Available KV cache memory: 6.87 GiB
(Worker_TP0 pid=447) INFO 08-14 14:07:22 [gpu_worker.py:578] CUDA graph memory profiling is enabled (default \
since v0.21.0). The current --gpu-memory-utilization=0.8200 is equivalent to --gpu-memory-utilization=0.8048 \
without CUDA graph memory profiling.
"""

# vllm-project/vllm PR#10511 (comment by youkaichao, 2024-12-14): the 0.6.5 table, `vllm serve
# meta-llama/Meta-Llama-3-8B` on an 80 GB H100, then the same at -tp 2 (non-torch memory doubles with TP).
V0_065_TABLE = """\
INFO 12-13 19:54:18 worker.py:243] Memory profiling results:
INFO 12-13 19:54:18 worker.py:243] duration     0.75 seconds
INFO 12-13 19:54:18 worker.py:243] total_gpu_memory     79.22GiB
INFO 12-13 19:54:18 worker.py:243] gpu_memory_utilization       0.90
INFO 12-13 19:54:18 worker.py:243] the current vLLM instance can use    71.29GiB
INFO 12-13 19:54:18 worker.py:243] model weights take   14.96GiB
INFO 12-13 19:54:18 worker.py:243] non_torch_memory     1.79GiB
INFO 12-13 19:54:18 worker.py:243] PyTorch activation peak memory       1.26GiB
INFO 12-13 19:54:18 worker.py:243] available_kv_cache_memory    53.29GiB
"""
V0_065_TABLE_TP2 = """\
INFO 12-13 19:55:25 worker.py:243] Memory profiling results:
INFO 12-13 19:55:25 worker.py:243] duration     3.49 seconds
INFO 12-13 19:55:25 worker.py:243] total_gpu_memory     79.22GiB
INFO 12-13 19:55:25 worker.py:243] gpu_memory_utilization       0.90
INFO 12-13 19:55:25 worker.py:243] the current vLLM instance can use    71.29GiB
INFO 12-13 19:55:25 worker.py:243] model weights take   7.48GiB
INFO 12-13 19:55:25 worker.py:243] non_torch_memory     3.58GiB
INFO 12-13 19:55:25 worker.py:243] PyTorch activation peak memory       1.26GiB
"""

# vllm-project/vllm#13882 (description by sancelot, 2025-02-26): V0 0.7.x on an 8 GiB RTX 4060, Qwen2.5-7B
# 4-bit, --gpu-memory-utilization 0.70, --max-model-len 4096: nothing is left for the KV cache, so the
# remainder is negative and the 0.7-0.8 wording "# cuda blocks" reports 0.
V0_07_NO_BLOCKS = """\
INFO 02-26 09:54:02 model_runner.py:1115] Loading model weights took 5.2032 GB
INFO 02-26 09:54:05 worker.py:267] Memory profiling takes 3.25 seconds
INFO 02-26 09:54:05 worker.py:267] the current vLLM instance can use total_gpu_memory (8.00GiB) x \
gpu_memory_utilization (0.70) = 5.60GiB
INFO 02-26 09:54:05 worker.py:267] model weights take 5.20GiB; non_torch_memory takes 0.03GiB; PyTorch \
activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is -1.05GiB.
INFO 02-26 09:54:05 executor_base.py:111] # cuda blocks: 0, # CPU blocks: 4681
INFO 02-26 09:54:05 executor_base.py:116] Maximum concurrency for 4096 tokens per request: 0.00x
"""

# vllm-project/vllm#16570 (comment by hanggun, 2025-04-15): V0 0.8.3, Qwen2.5-VL-72B at TP4 on A100-40GB; each
# rank prints its own summary and they differ (non-torch 0.34-0.43 GiB, KV 0.04-0.13 GiB).
V0_083_RANKS_DIFFER = """\
(VllmWorkerProcess pid=126555) INFO 04-15 00:05:58 [worker.py:267] the current vLLM instance can use \
total_gpu_memory (39.38GiB) x gpu_memory_utilization (0.95) = 37.41GiB
(VllmWorkerProcess pid=126555) INFO 04-15 00:05:58 [worker.py:267] model weights take 34.43GiB; \
non_torch_memory takes 0.34GiB; PyTorch activation peak memory takes 2.51GiB; the rest of the memory reserved \
for KV Cache is 0.13GiB.
INFO 04-15 00:05:58 [worker.py:267] Memory profiling takes 20.84 seconds
INFO 04-15 00:05:58 [worker.py:267] the current vLLM instance can use total_gpu_memory (39.38GiB) x \
gpu_memory_utilization (0.95) = 37.41GiB
INFO 04-15 00:05:58 [worker.py:267] model weights take 34.43GiB; non_torch_memory takes 0.43GiB; PyTorch \
activation peak memory takes 2.51GiB; the rest of the memory reserved for KV Cache is 0.04GiB.
(VllmWorkerProcess pid=126553) INFO 04-15 00:05:58 [worker.py:267] Memory profiling takes 20.88 seconds
(VllmWorkerProcess pid=126553) INFO 04-15 00:05:58 [worker.py:267] the current vLLM instance can use \
total_gpu_memory (39.38GiB) x gpu_memory_utilization (0.95) = 37.41GiB
(VllmWorkerProcess pid=126553) INFO 04-15 00:05:58 [worker.py:267] model weights take 34.43GiB; \
non_torch_memory takes 0.38GiB; PyTorch activation peak memory takes 2.51GiB; the rest of the memory reserved \
for KV Cache is 0.09GiB.
"""

# vllm-project/vllm#13061 (description by stg609, 2025-02-11): V0 0.7.x, DeepSeek-R1-Distill-Qwen-14B at TP2 on
# two RTX 4090s, --gpu_memory_utilization=0.98, default max_model_len 131072: refused at 81,536 tokens.
V0_07_TP2_REFUSED = """\
(VllmWorkerProcess pid=1786) INFO 02-11 07:40:45 model_runner.py:1115] Loading model weights took 13.9476 GB
ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be stored \
in KV cache (81536). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing \
the engine.
"""
