"""Read what a vLLM startup log says about memory: weights, non-torch memory, activation peak, KV cache.

Pure: the shell reads the file and passes its text in. vLLM has worded these lines differently over the
versions of the last two years; each wording is one small pattern below, named for the versions that print it
(and the public log the tests quote it from):

* V0 0.6.4-0.6.5, one line (vllm#10517): ``Memory profiling results: total_gpu_memory=23.58GiB
  initial_memory_usage=... peak_torch_memory=17.06GiB ... non_torch_memory=0.35GiB kv_cache_size=3.81GiB
  gpu_memory_utilization=0.90``
* V0 0.6.6-0.10, four lines (vllm PR#14447, vllm#11550): ``the current vLLM instance can use
  total_gpu_memory (23.58GiB) x gpu_memory_utilization (0.99) = 23.35GiB`` / ``model weights take 21.21GiB;
  non_torch_memory takes 0.20GiB; PyTorch activation peak memory takes 0.37GiB; the rest of the memory
  reserved for KV Cache is 1.57GiB.``
* V0 0.6.5, a table (vllm PR#10511): ``total_gpu_memory     79.22GiB`` ... ``model weights take   14.96GiB``,
  ``non_torch_memory     1.79GiB``, ``PyTorch activation peak memory       1.26GiB``,
  ``available_kv_cache_memory    53.29GiB``.
* V0 weights: ``Loading model weights took 14.9888 GB`` (GiB in fact, vllm#14979); blocks ``# GPU blocks: N``
  (``# cuda blocks`` in 0.7-0.8).
* V1 (0.8 and later): ``Model loading took 7.6785 GiB and 2.19 seconds`` (``GiB memory and`` from about 0.10),
  ``Available KV cache memory: 18.38 GiB``, ``GPU KV cache size: 42,656 tokens`` (early V1:
  ``# GPU blocks: N``, vllm PR#13596), ``Maximum concurrency for 32,768 tokens per request: 1.30x``,
  ``Graph capturing finished in 5 secs, took 0.53 GiB``, and from 0.21 ``Estimated CUDA graph memory: 0.36
  GiB total`` (gpustack/runner#251); at DEBUG in 0.10-0.11 ``Requested memory: 0.90 (util), 71.27 GiB`` and
  ``Memory profiling takes 6.42 seconds. Total non KV cache memory: 17.73GiB; torch peak memory increase:
  1.87GiB; non-torch forward increase memory: 0.87GiB; weights memory: 14.99GiB.``; the summary ``Free
  memory on device (F/T GiB) on startup. ... Actual usage is ...`` (non-torch memory, activation peak, CUDA
  graphs), and ``Available KV cache memory: -1.42 GiB`` on a rank with no room left.
* Settings: ``Initializing a V0|V1 LLM engine (v0.8.1) with config: model='...', ... max_seq_len=6600, ...,
  tensor_parallel_size=1``, ``non-default args: {...}``, ``--gpu-memory-utilization=0.8200``.

Every rank of a TP engine prints its own lines; the first value of each kind is kept, except that the
smallest KV figure and the largest non-torch figure are kept (vLLM sizes the KV cache by the tightest rank).
Where the ranks' lines carry their process's prefix (``(VllmWorker rank=1 pid=N)``, ``(Worker_TP1 pid=N)``,
``(RayWorkerWrapper pid=N, ip=A)``, ``(VllmWorkerProcess pid=N)`` beside the unprefixed driver), the per-GPU
figures (weights, non-torch memory, activation peak, CUDA graphs) are all the tightest rank's, the one with
the least KV cache memory, so that they add up with its KV figure to one GPU's memory.
A start with no KV block at all (``# cuda blocks: 0``, a negative remainder, vllm#13882) is a refusal.

Logs as they are kept: a container runtime's log copied from a node (CRI, Docker json-file) is unwrapped
first, a line it cut at 16 KiB joined again (:mod:`sizing.container_logs`: the engine's config line can be
that long, and a number cut in two was read short). A file (``journalctl``, a container's log) often holds
several starts of the server, a refused one and then the one that ran, or the starts before and after a
change of flags; only the last start
that got as far as sizing its KV cache is read (a start is the server's first line: ``vLLM API server
version X`` in earlier releases, later (0.23 in vllm#46169) a logo with ``version X`` beside it or, with
``VLLM_DISABLE_LOG_LOGO=1``, ``vLLM server version X, serving model M``; without one, the ``Initializing ...
LLM engine`` line), so that figures of different starts are never mixed. Terminal colour codes are removed
first. A number that runs into the end of the text is not read: a log cut mid-line (``'max_num_seqs': 12`` of
128) would otherwise give a wrong figure rather than none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

from sizing.container_logs import unwrap_text
from sizing.errors import SizingInputError

# A number that reaches the end of the text may be cut short ("12" of "128"): something must follow it.
_COMPLETE = r"(?![0-9.,]*\Z)"
_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)" + _COMPLETE
# V0 prints a negative KV remainder when nothing is left (vllm#13882)
_SIGNED = r"(-?[0-9][0-9,]*(?:\.[0-9]+)?)" + _COMPLETE


@dataclass(frozen=True)
class LogFacts:
    """What one startup log states; ``None`` where it does not say. Memory in GiB per GPU."""

    vllm_version: str | None = None
    engine: str | None = None  # "v0" or "v1"
    model: str | None = None
    tp: int | None = None
    pp: int | None = None  # pipeline stages: each rank holds some of the layers
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    dtype: str | None = None
    total_gib: float | None = None
    weights_gib: float | None = None
    non_torch_gib: float | None = None
    activation_gib: float | None = None
    kv_cache_gib: float | None = None
    gpu_blocks: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_len: int | None = None  # the "for N tokens per request" of the concurrency line
    cuda_graph_gib: float | None = None
    cuda_graph_estimated: bool = False  # graphs subtracted before the KV cache (vLLM 0.21+ default)
    refused: bool = False  # vLLM said the model's max seq len does not fit the KV cache
    kv_cache_memory_given: bool = False  # --kv-cache-memory: the pool was set by hand, not by profiling
    formats: tuple[str, ...] = ()  # the wordings recognised, for the report
    starts: int = 1  # starts of the server in the log (a restart, a changed flag)
    start_read: int = 1  # which of them these facts are of, from 1

    def found(self) -> list[str]:
        skip = ("formats", "starts", "start_read")
        return [
            f.name for f in fields(self) if f.name not in skip and getattr(self, f.name) not in (None, False)
        ]


def _f(text: str) -> float:
    return float(text.replace(",", ""))


def _i(text: str) -> int:
    return int(float(text.replace(",", "")))


# (field, format name, pattern, converter). The first match of a field wins unless the kind is "min"/"imin"
# (the smallest over ranks: vLLM sizes the KV cache by the tightest rank) or "max" (the largest over ranks:
# the tightest rank is the one with the most non-torch memory; vllm#16570 prints 0.34, 0.43 and 0.38 GiB).
_PATTERNS: tuple[tuple[str, str, re.Pattern[str], str], ...] = (
    ("total_gib", "v0-0.6.4", re.compile(r"total_gpu_memory=" + _NUM + r"\s*GiB"), "f"),
    ("non_torch_gib", "v0-0.6.4", re.compile(r"non_torch_memory=" + _NUM + r"\s*GiB"), "f"),
    ("kv_cache_gib", "v0-0.6.4", re.compile(r"kv_cache_size=" + _NUM + r"\s*GiB"), "min"),
    ("peak_torch", "v0-0.6.4", re.compile(r"peak_torch_memory=" + _NUM + r"\s*GiB"), "f"),
    ("gpu_memory_utilization", "v0-0.6.4", re.compile(r"gpu_memory_utilization=" + _NUM), "f"),
    ("total_gib", "v0-profile", re.compile(r"total_gpu_memory \(" + _NUM + r"\s*GiB\)"), "f"),
    (
        "gpu_memory_utilization",
        "v0-profile",
        re.compile(r"x gpu_memory_utilization \(" + _NUM + r"\)"),
        "f",
    ),
    ("weights_gib", "v0-profile", re.compile(r"model weights take\s+" + _NUM + r"\s*GiB"), "f"),
    ("non_torch_gib", "v0-profile", re.compile(r"non_torch_memory takes " + _NUM + r"\s*GiB"), "max"),
    (
        "activation_gib",
        "v0-profile",
        re.compile(r"PyTorch activation peak memory(?: takes)?\s+" + _NUM + r"\s*GiB"),
        "f",
    ),
    # 0.6.5's table (vllm PR#10511): "total_gpu_memory     79.22GiB", "non_torch_memory     1.79GiB", ...
    ("total_gib", "v0-0.6.5", re.compile(r"total_gpu_memory\s+" + _NUM + r"\s*GiB"), "f"),
    ("gpu_memory_utilization", "v0-0.6.5", re.compile(r"gpu_memory_utilization\s+" + _NUM), "f"),
    ("non_torch_gib", "v0-0.6.5", re.compile(r"non_torch_memory\s+" + _NUM + r"\s*GiB"), "f"),
    ("kv_cache_gib", "v0-0.6.5", re.compile(r"available_kv_cache_memory\s+" + _NUM + r"\s*GiB"), "min"),
    (
        "kv_cache_gib",
        "v0-profile",
        re.compile(r"the rest of the memory reserved for KV Cache is " + _SIGNED + r"\s*GiB"),
        "min",
    ),
    ("weights_gib", "v0-weights", re.compile(r"Loading model weights took " + _NUM + r"\s*GB"), "f"),
    # "GB" in V0 and V1 0.7-0.9 (GiB in fact, as above), "GiB" from about 0.10
    ("weights_gib", "v1-weights", re.compile(r"Model loading took " + _NUM + r"\s*Gi?B\b"), "f"),
    # a rank whose activation peak took the rest prints a negative figure (V1, TP ranks)
    ("kv_cache_gib", "v1-kv", re.compile(r"Available KV cache memory: " + _SIGNED + r"\s*GiB"), "min"),
    ("kv_cache_tokens", "v1-kv", re.compile(r"GPU KV cache size: " + _NUM + r" tokens"), "imin"),
    # V0's refusal names the engine-wide KV tokens (vllm#10517, vllm#13061): "... stored in KV cache (81536)"
    ("kv_cache_tokens", "v0-refusal", re.compile(r"can be stored in KV cache \(" + _NUM + r"\)"), "imin"),
    ("gpu_blocks", "blocks", re.compile(r"# (?:GPU|cuda|gpu) blocks: " + _NUM), "imin"),
    ("gpu_blocks", "blocks", re.compile(r"(?<!# )GPU blocks: " + _NUM), "imin"),
    (
        "cuda_graph_gib",
        "v1-graphs",
        re.compile(r"Graph capturing finished in [0-9.]+ secs?, took " + _NUM + r"\s*GiB"),
        "f",
    ),
    (
        "cuda_graph_gib",
        "v1-graph-estimate",
        re.compile(r"Estimated CUDA graph memory: " + _NUM + r"\s*GiB"),
        "f",
    ),
    (
        "cuda_graph_gib",
        "v1-graphs",
        re.compile(r"CUDA graph pool memory: " + _NUM + r"\s*GiB \(actual\)"),
        "f",
    ),
    # gpu_worker.py's summary once the graphs are captured: "Actual usage is X GiB for weight, Y GiB for peak
    # activation, Z GiB for non-torch memory, and W GiB for CUDAGraph memory" (earlier; DEBUG in some),
    # later "X GiB for consumed memory (weights + non-torch), Y GiB for peak activation, and W GiB for
    # CUDAGraph memory" (0.27, INFO); "... Current kv cache memory in use is K GiB."
    ("weights_gib", "v1-usage", re.compile(r"Actual usage is " + _NUM + r"\s*GiB for weight,"), "f"),
    ("activation_gib", "v1-usage", re.compile(_NUM + r"\s*GiB for peak activation"), "f"),
    ("non_torch_gib", "v1-usage", re.compile(_NUM + r"\s*GiB for non-torch memory"), "max"),
    (
        "consumed",
        "v1-usage",
        re.compile(r"Actual usage is " + _NUM + r"\s*GiB for consumed memory \(weights \+ non-torch\)"),
        "max",
    ),
    ("cuda_graph_gib", "v1-usage", re.compile(_NUM + r"\s*GiB for CUDAGraph memory"), "f"),
    ("kv_cache_gib", "v1-usage", re.compile(r"Current kv cache memory in use is " + _NUM + r"\s*GiB"), "min"),
    # MemoryProfilingResult's repr (vllm/utils), at DEBUG in 0.10-0.11 (VLLM_LOGGING_LEVEL=DEBUG): V0's
    # summary figures under other names, "Memory profiling takes 6.42 seconds. Total non KV cache memory:
    # 17.73GiB; torch peak memory increase: 1.87GiB; non-torch forward increase memory: 0.87GiB; weights
    # memory: 14.99GiB." (negative, not read, with weights offloaded to the CPU), after "Initial free memory:
    # 78.60 GiB; Requested memory: 0.90 (util), 71.27 GiB"
    ("weights_gib", "v1-profile", re.compile(r"; weights memory: " + _NUM + r"\s*GiB"), "f"),
    ("activation_gib", "v1-profile", re.compile(r"torch peak memory increase: " + _NUM + r"\s*GiB"), "f"),
    (
        "non_torch_gib",
        "v1-profile",
        re.compile(r"non-torch forward increase memory: " + _NUM + r"\s*GiB"),
        "max",
    ),
    ("gpu_memory_utilization", "v1-profile", re.compile(r"Requested memory: " + _NUM + r" \(util\)"), "f"),
    ("total_gib", "v1-free", re.compile(r"Free memory on device \([0-9.]+/" + _NUM + r"\s*GiB\)"), "f"),
    (
        "gpu_memory_utilization",
        "v1-free",
        re.compile(r"Desired GPU memory utilization is \(" + _NUM),
        "f",
    ),
    ("gpu_memory_utilization", "args", re.compile(r"--gpu-memory-utilization=" + _NUM), "f"),
    ("gpu_memory_utilization", "args", re.compile(r"'gpu_memory_utilization': " + _NUM), "f"),
    ("max_num_seqs", "args", re.compile(r"'max_num_seqs': " + _NUM), "i"),
    # before the "non-default args" dict (about 0.9), the server printed all of them: "args: Namespace(...)"
    ("max_num_seqs", "args", re.compile(r"\bmax_num_seqs=" + _NUM), "i"),
    ("max_num_batched_tokens", "args", re.compile(r"'max_num_batched_tokens': " + _NUM), "i"),
    ("max_num_batched_tokens", "args", re.compile(r"max_num_batched_tokens=" + _NUM), "i"),
    ("max_model_len", "args", re.compile(r"'max_model_len': " + _NUM), "i"),
    ("max_model_len", "config", re.compile(r"max_seq_len=" + _NUM), "i"),
    ("tp", "config", re.compile(r"tensor_parallel_size=" + _NUM), "i"),
    ("tp", "args", re.compile(r"'tensor_parallel_size': " + _NUM), "i"),
    ("pp", "config", re.compile(r"pipeline_parallel_size=" + _NUM), "i"),
    ("pp", "args", re.compile(r"'pipeline_parallel_size': " + _NUM), "i"),
)

_CONCURRENCY = re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: " + _NUM + r"\s*x")
_ENGINE = re.compile(r"Initializing an? (?:(V[01]) )?LLM engine \(v([0-9][0-9A-Za-z.+_-]*)\)")
# The server's first line: "vLLM API server version X" in earlier releases, later (0.23 in vllm#46169) a logo
# with "version X" and "model M" beside it, or (VLLM_DISABLE_LOG_LOGO=1) "vLLM server version X, serving
# model M" (api_utils.py).
_SERVER_LINE = r"(?:vLLM API server version |vLLM server version |\u2580\u2584\u2580 \u2588\s+version )"
_VERSION = re.compile(_SERVER_LINE + r"([0-9][0-9A-Za-z.+_-]*)")
_MODEL = re.compile(r"with config: model='([^']+)'")
_MODEL_ARG = re.compile(r"'model': '([^']+)'")
_MODEL_BANNER = re.compile(r"(?:, serving model |\u2588\s+model\s+)(\S+)")
_DTYPE = re.compile(r"dtype=torch\.(bfloat16|float16|float32)")
_REFUSED = re.compile(
    r"is larger than the maximum number of tokens that can be stored in KV cache|"
    r"KV cache is needed, which is larger than the available KV cache memory|"
    r"No available memory for the cache blocks|"
    r"# (?:GPU|cuda|gpu) blocks: 0\b"
)
_GRAPH_PROFILE = re.compile(r"CUDA graph memory profiling is enabled")
# --kv-cache-memory (about 0.11): vLLM skips profiling and says so; its advice to use the flag is not this.
_KV_GIVEN = re.compile(
    r"as specified by kv_cache_memory_bytes config and skipped memory profiling|"
    r"'kv_cache_memory_bytes': [0-9]|\bkv_cache_memory_bytes=[0-9]"
)
# One start of the server: the API server's first line, or (offline, no API server) the engine's.
_SERVER_START = re.compile(r"^.*" + _SERVER_LINE, re.M)
_ENGINE_START = re.compile(r"^.*Initializing an? (?:V[01] )?LLM engine", re.M)
# The data-parallel rank in an engine process's prefix: "(EngineCore_DP1 pid=N)", "(EngineCore_1 pid=N)".
_DP_RANK = re.compile(r"^.*?\(EngineCore_(?:DP)?([0-9]+)\b")
# ECMA-48 control sequences: the colours of vLLM's own formatter (0.11+) and of most terminals' captures.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")

_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


# A startup log is a few hundred kB; far more once decompressed is not one (or is a gzip bomb).
MAX_LOG_BYTES = 256 * 1024 * 1024
_GZIP_MAGIC = b"\x1f\x8b"
_BOMS = ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def decode_log(data: bytes) -> str:
    """A log file's bytes as text, as logs are kept and shipped: gzip-compressed (``docker logs | gzip``,
    logrotate's ``.gz``), UTF-16 with or without its byte-order mark (PowerShell's ``>`` writes UTF-16LE),
    UTF-8 with or without one. Bytes that are not valid in the encoding become U+FFFD, so one bad byte does
    not lose the log. Raises :class:`SizingInputError` on a corrupt or oversized compressed file."""
    if data.startswith(_GZIP_MAGIC):
        data = _gunzip(data)
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data[len(bom) :].decode(codec, errors="replace")
    head = data[:4096]
    # UTF-16 without a mark: ASCII text puts a NUL in every other byte (odd ones: little-endian).
    if len(head) >= 2 and head.count(0) * 3 > len(head):
        odd_nuls = head[1::2].count(0)
        codec = "utf-16-le" if odd_nuls * 2 > head.count(0) else "utf-16-be"
        return data[: len(data) // 2 * 2].decode(codec, errors="replace")
    return data.decode("utf-8", errors="replace")


def _gunzip(data: bytes) -> bytes:
    import zlib

    # A file cut short yields what arrived (the parser ignores a cut last line); concatenated members (``cat
    # a.gz b.gz``, appended rotations) are read one after the other.
    out = b""
    rest = data
    while rest.startswith(_GZIP_MAGIC):
        inflater = zlib.decompressobj(wbits=31)  # a gzip header and trailer
        try:
            out += inflater.decompress(rest, MAX_LOG_BYTES + 1 - len(out))
        except zlib.error as exc:
            raise SizingInputError(f"a gzip file that cannot be decompressed ({exc})") from None
        if len(out) > MAX_LOG_BYTES or inflater.unconsumed_tail:
            raise SizingInputError(
                f"more than {MAX_LOG_BYTES // 2**20} MiB once decompressed: not a startup log"
            )
        rest = inflater.unused_data
    return out


def parse_startup_log(text: str) -> LogFacts:
    """The facts a vLLM startup log states. Raises :class:`SizingInputError` naming what is missing when the
    text holds no KV cache figure (the one line a calibration cannot do without)."""
    facts = read_startup_log(text)
    _require(facts)
    return facts


def read_startup_log(text: str) -> LogFacts:
    """The facts a vLLM startup log (or any excerpt of one) states, ``None`` where it is silent.

    Of several starts in one log, the last that states its KV cache (or was refused) is read; when none does,
    the last start."""
    starts = _starts(_one_server(_ANSI.sub("", unwrap_text(text))))
    for index in range(len(starts), 0, -1):
        facts = _read_start(starts[index - 1])
        if facts.refused or not _missing_kv(facts):
            return replace(facts, starts=len(starts), start_read=index)
    return replace(_read_start(starts[-1]), starts=len(starts), start_read=len(starts))


# The source before each line when one file gathers several: `kubectl logs --prefix` ("[pod/NAME/CONTAINER] ")
# and `docker compose logs` ("SERVICE-1  | ").
_SOURCE = re.compile(r"\[(pod/[^\]\s]+)\] |([A-Za-z][\w.-]*) +\| ")


def _one_server(text: str) -> str:
    """The lines of the one server in a file that gathers several sources' logs: the sources that state no KV
    cache (a sidecar, a proxy) are left out. Raises :class:`SizingInputError` naming them when several servers
    do: their figures would mix."""
    groups: dict[str, list[str]] = {}
    for line in text.splitlines(keepends=True):
        match = _SOURCE.match(line)
        key = (match.group(1) or match.group(2)) if match else ""
        groups.setdefault(key, []).append(line[match.end() :] if match else line)
    if len([key for key in groups if key]) < 2:
        return text
    servers = [key for key, lines in groups.items() if key and not _missing_kv(_read_start("".join(lines)))]
    if len(servers) > 1:
        raise SizingInputError(
            f"the log gathers {len(servers)} servers ({', '.join(servers)}), whose figures would mix: give "
            "one server's log (kubectl logs POD -c CONTAINER, docker compose logs SERVICE)"
        )
    return "".join(groups[servers[0]]) if servers else text


def _starts(text: str) -> list[str]:
    """The text of each start of the server in the log, oldest first (the whole text when it holds one).

    The engine's line marks a start only when no API server line does and it appears more than once: behind
    an API server it comes after the server's own lines (its arguments), which belong to the same start. The
    data-parallel engines of one start each print it (``(EngineCore_DP1 pid=N)``): an engine's line begins a
    new start only when that engine has already started in the current one."""
    marks = [m.start() for m in _SERVER_START.finditer(text)]
    if not marks:
        marks = _engine_marks(text)
        if len(marks) < 2:
            return [text]
    bounds = [0, *marks[1:], len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _engine_marks(text: str) -> list[int]:
    marks: list[int] = []
    seen: set[str] = set()
    for match in _ENGINE_START.finditer(text):
        rank = _DP_RANK.match(match.group(0))
        key = rank.group(1) if rank else ""
        if not marks or key in seen or not key:
            marks.append(match.start())
            seen = set()
        seen.add(key)
    return marks


# The figures each rank of a TP engine prints of its own GPU (the rest are the engine's, printed once).
_PER_RANK = ("weights_gib", "non_torch_gib", "activation_gib", "peak_torch", "consumed", "cuda_graph_gib")
# A worker process's prefix anywhere in a line (after a journal's or a collector's own prefix): "(VllmWorker
# rank=1 pid=N)", "(VllmWorkerProcess pid=N)", "(RayWorkerWrapper pid=N, ip=A)", "(Worker_TP1 pid=N)"
_PROCESS = re.compile(r"\(([A-Za-z_][\w]*(?: rank=[0-9]+)? pid=[0-9]+)[^)]*\)\s")
# vLLM's own record header: a line without one continues the record above it (a multi-line message)
_RECORD = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) [0-9]{2}-[0-9]{2} ")


def _read_start(text: str) -> LogFacts:
    values, formats = _match_patterns(text)
    _tightest_rank(text, values)
    return _facts(text, values, formats)


def _by_process(text: str) -> dict[str, str]:
    """The lines with a memory figure (GiB; V0's weights in "GB") of each process that printed into the log,
    by its prefix (``""``: the unprefixed driver)."""
    groups: dict[str, list[str]] = {}
    key = ""
    for line in text.splitlines(keepends=True):
        process = _PROCESS.search(line) if "pid=" in line else None
        if process:
            key = process.group(1)
        elif _RECORD.search(line):
            key = ""
        if "GiB" in line or "GB" in line:
            groups.setdefault(key, []).append(line)
    return {key: "".join(lines) for key, lines in groups.items()}


def _tightest_rank(text: str, values: dict[str, object]) -> None:
    """Where the ranks of a TP engine each print their figures, the per-GPU ones are the tightest rank's: the
    one with the least KV cache memory, by which vLLM sizes every rank's pool (``unify_kv_cache_configs`` in
    V1, the minimum of the workers' block counts in V0). Its weights, activation peak and non-torch memory
    then add up with that KV figure to the one GPU's memory, as the calibration needs them to."""
    ranks = []
    for lines in _by_process(text).values():
        own, _ = _match_patterns(lines, (*_PER_RANK, "kv_cache_gib"))
        if isinstance(own.get("kv_cache_gib"), float):
            ranks.append(own)
    if len(ranks) < 2:
        return
    tightest = min(ranks, key=lambda own: own["kv_cache_gib"])  # type: ignore[arg-type,return-value]
    for name in _PER_RANK:
        if name in tightest:
            values[name] = tightest[name]


def _match_patterns(text: str, names: tuple[str, ...] = ()) -> tuple[dict[str, object], list[str]]:
    """The figures the patterns find in ``text`` (only those of ``names`` where given) and their formats."""
    values: dict[str, object] = {}
    formats: list[str] = []
    for name, fmt, pattern, kind in _PATTERNS:
        if names and name not in names:
            continue
        for match in pattern.finditer(text):
            raw = match.group(1)
            value: float | int = _i(raw) if kind in ("i", "imin") else _f(raw)
            prev = values.get(name)
            if kind in ("min", "imin") and isinstance(prev, int | float):
                values[name] = min(prev, value)
            elif kind == "max" and isinstance(prev, int | float):
                values[name] = max(prev, value)
            else:
                values.setdefault(name, value)
            if fmt not in formats:
                formats.append(fmt)
    return values, formats


def _facts(text: str, values: dict[str, object], formats: list[str]) -> LogFacts:
    conc = _CONCURRENCY.search(text)
    if conc:
        values["concurrency_len"] = _i(conc.group(1))
        values["max_concurrency"] = _f(conc.group(2))
        formats.append("concurrency")
    _version_and_engine(text, values)
    _v064_activation(values)
    _consumed_non_torch(values)
    model = _MODEL.search(text) or _MODEL_ARG.search(text) or _MODEL_BANNER.search(text)
    if model:
        values["model"] = model.group(1)
    dtype = _DTYPE.search(text)
    if dtype:
        values["dtype"] = _DTYPES[dtype.group(1)]
    values.pop("peak_torch", None)
    return LogFacts(
        **values,  # type: ignore[arg-type]  # keys are LogFacts fields by construction of _PATTERNS
        cuda_graph_estimated=bool(_GRAPH_PROFILE.search(text)),
        refused=bool(_REFUSED.search(text)) or _no_room(values.get("kv_cache_gib")),
        kv_cache_memory_given=bool(_KV_GIVEN.search(text)),
        formats=tuple(formats),
    )


def _version_and_engine(text: str, values: dict[str, object]) -> None:
    engine = _ENGINE.search(text)
    if engine:
        values["vllm_version"] = engine.group(2)
        if engine.group(1):
            values["engine"] = engine.group(1).lower()
    else:
        version = _VERSION.search(text)
        if version:
            values["vllm_version"] = version.group(1)
    if "engine" not in values:
        # wording decides it: the profiling summary lines are V0's worker; "Available KV cache memory" is V1's
        if "Available KV cache memory" in text or "EngineCore" in text:
            values["engine"] = "v1"
        elif "Memory profiling" in text or "CPU blocks" in text or "Loading model weights took" in text:
            values["engine"] = "v0"


def _v064_activation(values: dict[str, object]) -> None:
    """0.6.4's one-line summary has no weights or activation term: peak_torch = weights + activation."""
    peak = values.get("peak_torch")
    weights = values.get("weights_gib")
    if isinstance(peak, float) and isinstance(weights, float) and "activation_gib" not in values:
        values["activation_gib"] = max(0.0, peak - weights)


def _consumed_non_torch(values: dict[str, object]) -> None:
    """The later V1 summary gives weights and non-torch memory together; the weights line splits them (the
    largest over ranks, less one rank's weights: TP ranks hold equal shares)."""
    consumed = values.pop("consumed", None)
    weights = values.get("weights_gib")
    if not (isinstance(consumed, float) and isinstance(weights, float)) or "non_torch_gib" in values:
        return
    if consumed >= weights:
        values["non_torch_gib"] = round(consumed - weights, 4)


def _no_room(kv_cache_gib: object) -> bool:
    """A KV figure of zero or below: vLLM cannot start (it says so next, if the log goes on that far)."""
    return isinstance(kv_cache_gib, float) and kv_cache_gib <= 0


def _missing_kv(facts: LogFacts) -> bool:
    return facts.kv_cache_gib is None and facts.gpu_blocks is None and facts.kv_cache_tokens is None


def _require(facts: LogFacts) -> None:
    if not _missing_kv(facts):
        return
    lines = (
        "found no KV cache line ('Available KV cache memory', 'GPU KV cache size', '# GPU blocks' or "
        "'the rest of the memory reserved for KV Cache')"
    )
    if facts.weights_gib is None:
        raise SizingInputError(
            f"not a vLLM startup log I can read: {lines} (nor a 'Model loading took X GiB' weights line)"
        )
    # vLLM's own log of a start that failed (out of memory in the profile run) or a copy cut short
    version = f"vLLM {facts.vllm_version}" if facts.vllm_version else "vLLM"
    raise SizingInputError(
        f"{version} loaded the model ({facts.weights_gib:g} GiB) but the log stops before it sized its KV "
        f"cache: {lines}; give the log of a start that got that far"
    )
