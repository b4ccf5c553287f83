"""The trace readers: text in, requests out; bad text raises TraceError naming the source and the row."""

from __future__ import annotations

import io
import json
import re

import pytest

from sizing.traces import (
    TimeUnit,
    TraceError,
    TraceRequest,
    parse_azure_csv,
    parse_columns,
    parse_mooncake_jsonl,
    read_trace,
)

AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,0"
)
BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens\n5,ChatGPT,472,18\n9,ChatGPT,1000,0\n12,GPT-4,20,7\n"
)
MOONCAKE = (
    '{"timestamp": 500, "input_length": 10, "output_length": 3}\n'
    "\n"
    '{"timestamp": 0, "input_length": 7, "output_length": 2}\n'
)


def test_columns_of_azure_csv_give_seconds_from_the_first_stamp_and_skip_zero_tokens() -> None:
    assert parse_columns(AZURE + "\n2023-11-16 18:15:47.6805900,10,5", "t.csv", jsonl=False) == (
        TraceRequest(0.0, 374, 44),
        TraceRequest(1.0, 10, 5),
    )


def test_columns_of_burstgpt_read_seconds_and_skip_failed_requests() -> None:
    assert parse_columns(BURSTGPT, "b.csv", jsonl=False) == (
        TraceRequest(5.0, 472, 18),
        TraceRequest(12.0, 20, 7),
    )


def test_columns_of_mooncake_read_milliseconds_sorted() -> None:
    assert parse_columns(MOONCAKE, "m.jsonl", jsonl=True) == (
        TraceRequest(0.0, 7, 2),
        TraceRequest(0.5, 10, 3),
    )


def test_epoch_milliseconds_in_a_csv_are_read_as_milliseconds() -> None:
    # a gateway log's epoch-ms column was read as seconds: three requests a second apart lasted 2000 s
    text = "timestamp,prompt_tokens,output_tokens\n1700000000000,100,50\n1700000001000,200,60\n"
    assert parse_columns(text, "gw.csv", jsonl=False) == (
        TraceRequest(1.7e9, 100, 50),
        TraceRequest(1.7e9 + 1, 200, 60),
    )
    seconds = "timestamp,prompt_tokens,output_tokens\n1700000000,100,50\n1700000001,200,60\n"
    assert parse_columns(seconds, "gw.csv", jsonl=False)[1].arrival_s == 1700000001.0


def test_a_column_named_arrival_s_is_seconds_in_json_lines_too() -> None:
    # JSON lines read numeric times as milliseconds (Mooncake's timestamp); an export whose key says seconds
    # was read as milliseconds too, a thousand times the load
    rows = (
        '{"arrival_s": 0.5, "input_tokens": 100, "output_tokens": 20}\n'
        '{"arrival_s": 30, "input_tokens": 9, "output_tokens": 2}\n'
    )
    assert parse_columns(rows, "mine.jsonl", jsonl=True) == (
        TraceRequest(0.5, 100, 20),
        TraceRequest(30.0, 9, 2),
    )


@pytest.mark.parametrize(
    ("text", "jsonl", "message"),
    [
        ("a,b,c\n1,2,3\n", False, "m.csv: needs a time column"),
        ("", False, "m.csv: the file is empty"),
        ("\r\n\n", True, "m.csv: the file is empty"),
        ("timestamp,prompt_tokens,completion_tokens\r\n", False, "m.csv: the trace has no request rows"),
        (
            '{"timestamp": 1, "input_length": 1, "output_length": 1}\nnot json\n',
            True,
            "m.csv: line 2: not valid JSON",
        ),
        ("time,prompt_tokens,output_tokens\n1,x,3\n2,4,5\n", False, "m.csv: line 2:"),
        ("time,prompt_tokens,output_tokens\n1,2,3\n", False, "m.csv: fewer than two usable requests$"),
        # every row a failed request (no output): the line said "fewer than two usable" of a 3-row trace
        (
            "time,prompt_tokens,output_tokens\n1,2,0\n2,4,0\n3,5,0\n",
            False,
            r"m.csv: fewer than two usable requests \(3 of 3 rows skipped: "
            r"3 with zero tokens \(failed requests\)\)$",
        ),
    ],
)
def test_columns_refuse_bad_text_in_one_line(text: str, jsonl: bool, message: str) -> None:
    with pytest.raises(TraceError, match="^" + message):
        parse_columns(text, "m.csv", jsonl=jsonl)


@pytest.mark.parametrize(
    ("text", "jsonl"),
    [(AZURE + "\n2023-11-16 18:15:47.6805900,10,5", False), (BURSTGPT, False), (MOONCAKE, True)],
)
def test_columns_read_a_trace_saved_with_a_byte_order_mark(text: str, jsonl: bool) -> None:
    # Excel's "CSV UTF-8" starts with U+FEFF: it was glued to the first column's name ("\ufefftimestamp")
    assert parse_columns("\ufeff" + text, "t", jsonl=jsonl) == parse_columns(text, "t", jsonl=jsonl)


def test_the_simulators_formats_read_a_trace_saved_with_a_byte_order_mark() -> None:
    assert parse_azure_csv("\ufeff" + AZURE, "t.csv") == parse_azure_csv(AZURE, "t.csv")
    assert parse_mooncake_jsonl("\ufeff" + MOONCAKE, "t.jsonl") == parse_mooncake_jsonl(MOONCAKE, "t.jsonl")


def test_azure_format_keeps_zero_token_rows_at_one_token_and_drops_the_seventh_digit() -> None:
    assert parse_azure_csv(AZURE, "a.csv") == [TraceRequest(0.0, 374, 44), TraceRequest(4.314579, 396, 1)]


def test_azure_format_wants_its_header() -> None:
    with pytest.raises(TraceError, match="^a.csv: expected the header"):
        parse_azure_csv(BURSTGPT, "a.csv")


def test_mooncake_format_restarts_at_zero_and_names_a_bad_line() -> None:
    assert parse_mooncake_jsonl(MOONCAKE, "m.jsonl") == [TraceRequest(0.0, 7, 2), TraceRequest(0.5, 10, 3)]
    with pytest.raises(TraceError, match="^m.jsonl:2: not a Mooncake row"):
        parse_mooncake_jsonl(
            '{"timestamp": 1, "input_length": 1, "output_length": 1}\n{"timestamp": 2}', "m.jsonl"
        )


@pytest.mark.parametrize("jsonl", [False, True])
@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("1733500000", "1733500002"),  # epoch seconds: read as milliseconds in JSON lines, 1000 x too fast
        ("1733500000.25", "1733500002.25"),
        ("1733500000000", "1733500002000"),  # milliseconds
        ("1733500000000000", "1733500002000000"),  # microseconds: read as milliseconds, 1000 x too slow
        ("1733500000000000000", "1733500002000000000"),  # nanoseconds: a million times too slow
    ],
)
def test_epoch_times_in_any_unit_give_seconds(first: str, second: str, jsonl: bool) -> None:
    if jsonl:
        text = "".join(
            f'{{"timestamp": {t}, "prompt_tokens": 10, "completion_tokens": 2}}\n' for t in (first, second)
        )
    else:
        text = f"timestamp,prompt_tokens,completion_tokens\n{first},10,2\n{second},10,2\n"
    got = parse_columns(text, "gw", jsonl=jsonl)
    assert got[1].arrival_s - got[0].arrival_s == pytest.approx(2.0)
    assert got[0].arrival_s == pytest.approx(1733500000.0, abs=1.0)


GATEWAY_LOGS = {
    # OpenAI-style responses as a gateway logs them: epoch-seconds created, the counts in a nested usage
    "openai-nested": (
        True,
        '{"id": "c1", "created": 1733500000, "model": "qwen", '
        '"usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}\n'
        '{"id": "c2", "created": 1733500002, "model": "qwen", '
        '"usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}}\n',
    ),
    # an OpenAI batch output: the usage two objects down
    "openai-batch": (
        True,
        '{"id": "b1", "response": {"body": {"created": 1733500000, '
        '"usage": {"prompt_tokens": 100, "completion_tokens": 20}}}}\n'
        '{"id": "b2", "response": {"body": {"created": 1733500002, '
        '"usage": {"prompt_tokens": 50, "completion_tokens": 10}}}}\n',
    ),
    "openai-flat-csv": (
        False,
        "created,prompt_tokens,completion_tokens,total_tokens\n1733500000,100,20,120\n1733500002,50,10,60\n",
    ),
    # LiteLLM's spend logs: startTime / endTime as datetimes with a zone
    "litellm-csv": (
        False,
        "request_id,call_type,spend,total_tokens,prompt_tokens,completion_tokens,startTime,endTime,model\n"
        "a,acompletion,0.1,120,100,20,2024-12-06 10:00:00+00:00,2024-12-06 10:00:05+00:00,qwen\n"
        "b,acompletion,0.1,60,50,10,2024-12-06 10:00:02+00:00,2024-12-06 10:00:04+00:00,qwen\n",
    ),
    "litellm-jsonl": (
        True,
        '{"request_id": "a", "startTime": "2024-12-06T10:00:00Z", "endTime": "2024-12-06T10:00:05Z", '
        '"prompt_tokens": 100, "completion_tokens": 20}\n'
        '{"request_id": "b", "startTime": "2024-12-06T10:00:02Z", "endTime": "2024-12-06T10:00:04Z", '
        '"prompt_tokens": 50, "completion_tokens": 10}\n',
    ),
    # an Alibaba Cloud SLS export: __time__ in epoch seconds, a JSON field quoted in a CSV cell
    "sls-json-cell": (
        False,
        "__time__,__source__,__topic__,request_id,usage\n"
        '1733500000,10.0.0.1,gw,a,"{""prompt_tokens"": 100, ""completion_tokens"": 20}"\n'
        '1733500002,10.0.0.1,gw,b,"{""prompt_tokens"": 50, ""completion_tokens"": 10}"\n',
    ),
    # Higress's access log with the ai-statistics plugin: its ai_log a JSON object as a string, counts as text
    "higress-ai-log": (
        True,
        '{"start_time": "2024-12-06T10:00:00.123Z", "method": "POST", "response_code": "200", '
        '"ai_log": "{\\"model\\":\\"qwen\\",\\"input_token\\":\\"100\\",\\"output_token\\":\\"20\\"}"}\n'
        '{"start_time": "2024-12-06T10:00:02.123Z", "method": "POST", "response_code": "200", '
        '"ai_log": "{\\"model\\":\\"qwen\\",\\"input_token\\":\\"50\\",\\"output_token\\":\\"10\\"}"}\n',
    ),
    "sls-flat": (
        False,
        "__time__,__source__,prompt_tokens,completion_tokens\n"
        "1733500000,10.0.0.1,100,20\n1733500002,10.0.0.1,50,10\n",
    ),
}


@pytest.mark.parametrize("name", sorted(GATEWAY_LOGS))
def test_gateway_logs_are_read_by_their_own_column_names(name: str) -> None:
    # each was refused: "needs a time column (timestamp/arrival_s/arrival_time/time) ..."
    jsonl, text = GATEWAY_LOGS[name]
    got = parse_columns(text, name, jsonl=jsonl)
    assert [(r.arrival_s - got[0].arrival_s, r.prompt_tokens, r.output_tokens) for r in got] == [
        (0.0, 100, 20),
        (2.0, 50, 10),
    ]


def test_a_column_search_names_nested_fields_it_found() -> None:
    text = '{"created": 1733500000, "usage": {"input": 5, "output": 2}}\n'
    with pytest.raises(TraceError, match=r"found created, usage, usage\.input, usage\.output$"):
        parse_columns(text, "x.jsonl", jsonl=True)


def test_skipped_rows_are_counted_by_reason_not_dropped_silently() -> None:
    # a missing count refused the whole trace ("row 3: could not convert string to float: ''"), a JSON null
    # likewise; negative and zero counts were dropped without a word
    text = (
        "timestamp,prompt_tokens,completion_tokens\n"
        "0,10,2\n1,,2\n2,-5,2\n3,10,-1\n4,10,0\n5,null,2\n"
        "timestamp,prompt_tokens,completion_tokens\n"  # a second export appended with its header
        "6,11,3\n7,,\n8,12,4\n"
    )
    got = read_trace(io.StringIO(text, newline=""), "gw.csv", jsonl=False)
    assert [(r.arrival_s, r.prompt_tokens) for r in got.requests] == [(0.0, 10), (6.0, 11), (8.0, 12)]
    assert got.skipped_note() == (
        "7 of 10 rows skipped: 1 with zero tokens (failed requests), 3 with no token counts, "
        "2 with negative token counts, 1 repeating the header"
    )
    rows = (
        '{"created": 1733500000, "usage": null}\n'
        '{"created": 1733500001, "usage": {"prompt_tokens": 9, "completion_tokens": null}}\n'
        '{"created": null, "usage": {"prompt_tokens": 9, "completion_tokens": 1}}\n'
        '{"created": 1733500002, "usage": {"prompt_tokens": 9, "completion_tokens": 1}}\n'
        '{"created": 1733500003, "usage": {"prompt_tokens": 9, "completion_tokens": 1}}\n'
    )
    got = read_trace(io.StringIO(rows, newline=""), "gw.jsonl", jsonl=True)
    assert len(got.requests) == 2
    assert got.skipped_note() == "3 of 5 rows skipped: 2 with no token counts, 1 with no time"
    clean = read_trace(io.StringIO(BURSTGPT.replace(",0\n", ",5\n"), newline=""), "b.csv", jsonl=False)
    assert clean.skipped_note() is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # the last of two prompt_tokens columns was taken, silently
        (
            "timestamp,prompt_tokens,Prompt_Tokens,completion_tokens\n0,1,2,3\n",
            "the header names prompt_tokens twice",
        ),
        (
            "timestamp,prompt_tokens,completion_tokens\n0,many,3\n",
            "line 2: prompt tokens 'many' is not a number",
        ),
        (
            "timestamp,prompt_tokens,completion_tokens\n2024-12-06 10:00,1,3\n06/12/2024 10:01,1,3\n",
            "line 3: time '06/12/2024 10:01' is neither a number nor an ISO-8601 datetime",
        ),
        (
            "timestamp,prompt_tokens,completion_tokens\n2024-12-06T10:00Z,1,3\n2024-12-06T10:01,1,3\n",
            "line 3: time '2024-12-06T10:01' has no zone where the first row's has one",
        ),
        (
            "timestamp,prompt_tokens,completion_tokens\ntimestamp,prompt_tokens,completion_tokens\n",
            "the trace has no request rows",
        ),
    ],
)
def test_a_log_that_cannot_be_read_right_is_one_line_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(TraceError, match="^gw.csv: " + re.escape(message)):
        parse_columns(text, "gw.csv", jsonl=False)


def test_a_json_null_line_is_refused_not_taken_for_a_repeated_header() -> None:
    rows = '{"timestamp": 0, "input_length": 1, "output_length": 1}\nnull\n'
    with pytest.raises(TraceError, match="^m.jsonl: line 2: not an object of named fields$"):
        parse_columns(rows, "m.jsonl", jsonl=True)


@pytest.mark.parametrize(
    "text",
    [
        '[{"timestamp": 0, "input_length": 1, "output_length": 1}]\n',
        '[\n  {"timestamp": 0, "input_length": 1, "output_length": 1}\n]\n',
    ],
)
def test_a_json_array_export_is_named_as_one(text: str) -> None:
    # read as JSON lines it was "the trace has no request rows" or "line 1: not valid JSON"
    with pytest.raises(TraceError, match=r"^log.json: holds a JSON array, not JSON lines"):
        parse_columns(text, "log.json", jsonl=True)


# ------------------------------------------------------------------------- logs as they are kept and shipped
def test_a_log_read_twice_is_warned_of_and_distinct_requests_are_not() -> None:
    """A gateway log exported twice into one file read as twice the load without a word; the copies are
    kept (a client replaying one prompt repeats rows too) but the read says how many repeat."""
    rows = [f"{t},{100 + 7 * t},{20 + t % 9}\n" for t in range(40)]
    header = "timestamp,prompt_tokens,completion_tokens\n"
    once = read_trace(io.StringIO(header + "".join(rows), newline=""), "gw.csv", jsonl=False)
    assert once.repeated_note() is None
    twice = read_trace(io.StringIO(header + "".join(rows) + "".join(rows), newline=""), "gw.csv", jsonl=False)
    assert len(twice.requests) == 80
    assert twice.repeated_note() == (
        "40 of 80 requests repeat another exactly (same time and token counts): a log exported or collected "
        "twice reads as twice the load; remove the copies if that is so"
    )
    # a few chance repeats in a long log are not worth a warning
    few = read_trace(
        io.StringIO(header + "".join(rows) + "".join(rows[:3]), newline=""), "gw.csv", jsonl=False
    )
    assert few.repeated_note() is None


def _cri(lines: list[str], cut: int = 16 * 1024) -> str:
    """A gateway's stdout as containerd keeps it: a line past 16 KiB in P records, then an F."""
    out = []
    for line in lines:
        pieces = [line[i : i + cut] for i in range(0, len(line), cut)]
        for k, piece in enumerate(pieces):
            out.append(
                f"2024-12-06T10:00:0{k}.123456789Z stdout {'F' if k == len(pieces) - 1 else 'P'} {piece}\n"
            )
    return "".join(out)


def _docker(lines: list[str], cut: int = 16 * 1024) -> str:
    """The same as Docker's json-file driver keeps it: each piece but the last without its newline."""
    out = []
    for line in lines:
        text = line + "\n"
        for i in range(0, len(text), cut):
            out.append(
                json.dumps({"log": text[i : i + cut], "stream": "stdout", "time": "2024-12-06T10:00:00Z"})
            )
    return "\n".join(out) + "\n"


def _access(t: int, prompt: int, messages: int = 0) -> str:
    """One OpenAI-style access record; ``messages`` characters of request body make it long."""
    body = {"messages": [{"role": "user", "content": "x" * messages}]}
    return json.dumps(
        {"created": t, "request": body, "usage": {"prompt_tokens": prompt, "completion_tokens": 7}}
    )


@pytest.mark.parametrize("wrap", [_cri, _docker])
def test_a_container_runtimes_log_is_read_with_its_long_lines_joined(wrap) -> None:
    # read as JSON lines, each record was "line 1: not valid JSON" (CRI) or lacked the columns (Docker's
    # log/stream/time); a line past 16 KiB came in pieces
    lines = [_access(1733500000, 100), _access(1733500002, 40_000, messages=40_000), _access(1733500003, 50)]
    got = read_trace(io.StringIO(wrap(lines), newline=""), "gw.log", jsonl=True)
    assert [(r.arrival_s - 1733500000, r.prompt_tokens) for r in got.requests] == [
        (0, 100),
        (2, 40_000),
        (3, 50),
    ]
    assert got.skipped_note() is None


def test_a_container_logs_other_output_is_counted_not_refused() -> None:
    text = _cri(["INFO:     Started server process [1]", _access(1733500000, 10), _access(1733500001, 20)])
    got = read_trace(io.StringIO(text, newline=""), "gw.log", jsonl=True)
    assert [r.prompt_tokens for r in got.requests] == [10, 20]
    assert got.skipped_note() == "1 of 3 rows skipped: 1 not JSON (the log's other lines)"
    # in a file named as JSON lines that is no container's log, such a line is refused, naming it
    with pytest.raises(TraceError, match=r"^gw.jsonl: line 2: not valid JSON"):
        parse_columns(_access(1, 1) + "\nINFO: Started\n", "gw.jsonl", jsonl=True)


# A gateway that prints its per-request CSV to stdout among its other output (uvicorn's start-up and access
# lines, a warning with commas in it, one with an unclosed quote)
CSV_IN_LOG = [
    "INFO:     Started server process [1]",
    "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
    "timestamp,input_tokens,output_tokens",
    "1733500000,100,50",
    'WARNING: slow upstream, "model busy, retrying',
    "1733500002,40,7",
    'INFO:     10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "WARNING: queue at 12, draining, 3 s",
    "1733500003,60,9",
    "timestamp,input_tokens,output_tokens",
    "1733500005,10,2",
]


@pytest.mark.parametrize("wrap", [_cri, _docker])
def test_a_csv_trace_in_a_container_log_skips_and_counts_the_logs_other_lines(wrap) -> None:
    got = read_trace(io.StringIO(wrap(CSV_IN_LOG), newline=""), "gw.log", jsonl=False)
    assert [(r.arrival_s - 1733500000, r.prompt_tokens, r.output_tokens) for r in got.requests] == [
        (0, 100, 50),
        (2, 40, 7),
        (3, 60, 9),
        (5, 10, 2),
    ]
    assert got.skipped_note() == (
        "6 of 10 rows skipped: 1 repeating the header, 5 not rows of the CSV trace (the log's other lines)"
    )


def test_a_csv_trace_among_a_programs_output_in_a_plain_log_is_read_the_same() -> None:
    text = "\n".join(CSV_IN_LOG) + "\n"
    got = read_trace(io.StringIO(text, newline=""), "gw.log", jsonl=False, other_lines=True)
    assert [r.prompt_tokens for r in got.requests] == [100, 40, 60, 10]
    # a file that is a CSV by its name keeps refusing a line that is not a row of it
    with pytest.raises(TraceError, match=r"^gw.csv: line 2: prompt tokens"):
        parse_columns(
            "timestamp,input_tokens,output_tokens\nbusy, retrying, 3 s\n1,2,3\n", "gw.csv", jsonl=False
        )


@pytest.mark.parametrize("name", ["sls-json-cell", "sls-flat"])
def test_a_csv_export_named_as_a_log_reads_as_it_does_named_csv(name: str) -> None:
    # its token counts in a JSON cell: the header names only the time column, the rows the rest
    _, text = GATEWAY_LOGS[name]
    as_log = read_trace(io.StringIO(text, newline=""), "export.log", jsonl=False, other_lines=True)
    assert as_log.requests == parse_columns(text, "export.csv", jsonl=False)
    assert as_log.skipped_note() is None


def test_a_container_log_left_with_too_few_rows_or_no_header_is_refused() -> None:
    few = _cri(["INFO: starting", "timestamp,input_tokens,output_tokens", "1733500000,100,50", "INFO: bye"])
    with pytest.raises(TraceError, match=r"fewer than two usable requests \(2 of 3 rows skipped: 2 not rows"):
        read_trace(io.StringIO(few, newline=""), "gw.log", jsonl=False)
    none = _cri(["INFO: starting", "INFO: serving", "1733500000,100,50"])
    with pytest.raises(TraceError, match=r"^gw.log: no line of the log is a CSV header: needs a time column"):
        read_trace(io.StringIO(none, newline=""), "gw.log", jsonl=False)


def _mooncake(times: list[int]) -> str:
    return "".join(f'{{"timestamp": {t}, "input_length": 10, "output_length": 2}}\n' for t in times)


def test_milliseconds_from_the_start_past_1e9_are_milliseconds_whichever_row_comes_first() -> None:
    # the first row fixed the unit: a trace whose first row was 11.6 days in (rows out of order, or a slice
    # of a longer trace) read as epoch seconds and played 1000 x too slowly
    got = read_trace(io.StringIO(_mooncake([1_300_000_000, 0, 1_000_000_000])), "m.jsonl", jsonl=True)
    assert [r.arrival_s for r in got.requests] == [0.0, 1_000_000.0, 1_300_000.0]
    late = read_trace(io.StringIO(_mooncake([1_000_000_000, 1_000_002_000])), "m.jsonl", jsonl=True)
    assert late.requests[1].arrival_s - late.requests[0].arrival_s == 2.0
    assert late.unit_guess is None  # 1e9 s is 2001: no log of an LLM's, so not a guess


def test_a_json_time_that_reads_as_a_recent_date_is_epoch_seconds_and_the_guess_is_said() -> None:
    got = read_trace(io.StringIO(_mooncake([1733500000, 1733500002])), "m.jsonl", jsonl=True)
    assert got.requests[1].arrival_s - got.requests[0].arrival_s == 2.0
    assert got.unit_guess is not None and "epoch seconds" in got.unit_guess and "2024-12-06" in got.unit_guess
    # a name that means epoch seconds (OpenAI's created) is no guess; a unit given is taken as given
    assert (
        read_trace(
            io.StringIO(_access(1733500000, 1) + "\n" + _access(1733500001, 1)), "g", jsonl=True
        ).unit_guess
        is None
    )
    given = read_trace(
        io.StringIO(_mooncake([1733500000, 1733500002])), "m.jsonl", jsonl=True, unit=TimeUnit.MS
    )
    assert given.requests[1].arrival_s - given.requests[0].arrival_s == pytest.approx(0.002)
    assert given.unit_guess is None


def test_milliseconds_from_the_start_past_3_2_years_are_one_unit_not_two() -> None:
    # ms from 0 pass 1e11 (the size above which a number is epoch ms) 3.2 years in: the column runs on across
    # that size without a gap, and was refused as "not in the unit of line 1's 0"
    times = [0, 60_000, 99_999_990_000, 100_000_020_000, 100_000_080_000]
    for order in (times, times[::-1]):
        got = read_trace(io.StringIO(_mooncake(order)), "m.jsonl", jsonl=True)
        assert [r.arrival_s for r in got.requests] == [t / 1000 for t in times]
        # microseconds from the start pass 1e11 27.8 hours in, nanoseconds 100 s in: the reading is said
        assert got.unit_guess is not None and got.unit_hint == "us"
        assert "read as milliseconds from the trace's start (1157 days)" in got.unit_guess
    # in a CSV too, where numbers are seconds otherwise: past 1e11 they are no seconds (3,170 years)
    csv_text = "timestamp,input_tokens,output_tokens\n" + "".join(f"{t},10,2\n" for t in times)
    got = parse_columns(csv_text, "gw.csv", jsonl=False)
    assert [r.arrival_s for r in got] == [t / 1000 for t in times]
    # the unit given is taken as given, as before, and nothing is guessed
    given = read_trace(io.StringIO(_mooncake(times)), "m.jsonl", jsonl=True, unit=TimeUnit.MS)
    assert [r.arrival_s for r in given.requests] == [t / 1000 for t in times]
    assert given.unit_guess is None


@pytest.mark.parametrize(
    "times",
    [
        [0, 60_000, 1733500000000],  # ms from the start, then an epoch-ms row: a gap of 1.7e12
        [99_000_000_000, 1733500000000],  # both near the edge, still 17 x apart
        [1733500000000, 1733500001000, 1733500000000000],  # epoch ms then epoch us
    ],
)
def test_numbers_of_two_units_with_a_gap_between_them_are_still_refused(times: list[int]) -> None:
    with pytest.raises(TraceError, match=r"is not in the unit of line 1's .*: give every time in one unit"):
        parse_columns(_mooncake(times), "m.jsonl", jsonl=True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _mooncake([1733500000000, 1733500001000, 5]),
            "line 3: time 5 (too small for epoch ms) is not in the unit of line 1's 1733500000000 "
            "(epoch ms by its size): give every time in one unit",
        ),
        (
            '{"timestamp": "2024-12-06T10:00:00Z", "input_length": 1, "output_length": 1}\n'
            '{"timestamp": 1733500000, "input_length": 1, "output_length": 1}\n',
            "line 2: time 1733500000 is a number where the first row's is a datetime",
        ),
        (
            '{"created": 1, "usage": {"total_tokens": 5}}\n',
            "has total tokens but not the prompt / output split the sizing model needs",
        ),
        (
            '{"timestamp": 1, "input_length": true, "output_length": 1}\n',
            "line 1: prompt tokens True is not a number",
        ),
        (
            '\n\n{"timestamp": 1, "input_length": 1e12, "output_length": 1}\n',
            "line 3: prompt tokens 1000000000000.0 is more than any model's context (100,000,000)",
        ),
    ],
)
def test_json_lines_that_cannot_be_read_right_name_the_line_and_the_problem(text: str, message: str) -> None:
    with pytest.raises(TraceError, match="^m.jsonl: " + re.escape(message)):
        parse_columns(text, "m.jsonl", jsonl=True)


def test_pretty_printed_json_objects_are_named_as_such() -> None:
    # `jq . log.json > out.jsonl` (without -c) was "line 1: not valid JSON (Expecting property name ...)"
    text = '{\n  "timestamp": 0,\n  "input_length": 1,\n  "output_length": 1\n}\n'
    with pytest.raises(TraceError, match=r"^m.jsonl: line 1: a JSON object over several lines.*jq -c \.$"):
        parse_columns(text, "m.jsonl", jsonl=True)


def test_a_json_nan_count_is_a_missing_count_as_a_csv_nan_is() -> None:
    # json.dumps writes a missing float as NaN: it was "prompt tokens nan is not a number"
    text = _mooncake([0, 1]) + '{"timestamp": 2, "input_length": NaN, "output_length": 2}\n'
    got = read_trace(io.StringIO(text), "m.jsonl", jsonl=True)
    assert len(got.requests) == 2 and got.skipped_note() == "1 of 3 rows skipped: 1 with no token counts"


@pytest.mark.parametrize(
    "text",
    [
        "timestamp\tprompt_tokens\tcompletion_tokens\n1\t10\t2\n3\t20\t4\n",  # a TSV export
        "timestamp;prompt_tokens;completion_tokens\n1;10;2\n3;20;4\n",  # a spreadsheet's ; separated values
        "timestamp,prompt_tokens,completion_tokens\n"  # a zone named after the time (SQL exports)
        "2024-12-06 10:00:01 UTC,10,2\n2024-12-06 10:00:03 UTC,20,4\n",
        "timestamp,prompt_tokens,completion_tokens\n"  # nginx's $time_local
        "06/Dec/2024:18:00:01 +0800,10,2\n[06/Dec/2024:18:00:03 +0800],20,4\n",
        "timestamp,prompt_tokens,completion_tokens\n"  # nanoseconds and a zone offset
        "2024-12-06T18:00:01.000000001+08:00,10,2\n2024-12-06T10:00:03.000000001Z,20,4\n",
    ],
)
def test_other_common_csv_shapes_read_the_same(text: str) -> None:
    got = parse_columns(text, "gw.csv", jsonl=False)
    assert [(r.arrival_s - got[0].arrival_s, r.prompt_tokens) for r in got] == [(0.0, 10), (2.0, 20)]
