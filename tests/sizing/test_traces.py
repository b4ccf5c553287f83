"""The trace readers: text in, requests out; bad text raises TraceError naming the source and the row."""

from __future__ import annotations

import io
import re

import pytest

from sizing.traces import (
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
        ("", False, "m.csv: the trace has no request rows"),
        (
            '{"timestamp": 1, "input_length": 1, "output_length": 1}\nnot json\n',
            True,
            "m.csv: line 2: not valid JSON",
        ),
        ("time,prompt_tokens,output_tokens\n1,x,3\n2,4,5\n", False, "m.csv: row 2:"),
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
            "row 2: prompt tokens 'many' is not a number",
        ),
        (
            "timestamp,prompt_tokens,completion_tokens\n2024-12-06 10:00,1,3\n06/12/2024 10:01,1,3\n",
            "row 3: time '06/12/2024 10:01' is neither a number nor an ISO-8601 datetime",
        ),
        (
            "timestamp,prompt_tokens,completion_tokens\n2024-12-06T10:00Z,1,3\n2024-12-06T10:01,1,3\n",
            "row 3: time '2024-12-06T10:01' has no zone where the first row's has one",
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
    with pytest.raises(TraceError, match="^m.jsonl: row 3: not an object of named fields$"):
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
