"""The capture line format (cryptofeed's raw-data format): parsing, writing, round trips."""

from __future__ import annotations

import io

import pytest

from pipeline.trading.bitget.capture import (
    HTTP,
    OPEN,
    RECV,
    SEND,
    CaptureError,
    CaptureLine,
    CaptureRecorder,
    CaptureWriter,
    format_line,
    parse_line,
    parse_lines,
    read_capture,
)
from pipeline.trading.bitget.errors import BitgetError

URL = "wss://ws.bitget.com/v2/ws/public"


@pytest.mark.parametrize(
    "line, expected",
    [
        (f"{URL} <-> 1649290076.511507\n", CaptureLine(1649290076.511507, OPEN, "")),
        (f'{URL} <- 1649290077.318636: {{"op":"subscribe","args":[]}}\n',
         CaptureLine(1649290077.318636, SEND, '{"op":"subscribe","args":[]}')),
        ('1649290077.5198772: {"event":"subscribe","arg":{"a": "b: c"}}\n',
         CaptureLine(1649290077.5198772, RECV, '{"event":"subscribe","arg":{"a": "b: c"}}')),
        ("1649290077.5: pong", CaptureLine(1649290077.5, RECV, "pong")),
        ('https://api.bitget.com/x -> 1649290077.5: {"code":"00000"}',
         CaptureLine(1649290077.5, HTTP, '{"code":"00000"}')),
    ],
    ids=["open", "send", "recv", "recv-text", "http"],
)
def test_parse_each_line_form(line, expected):
    assert parse_line(line) == expected


@pytest.mark.parametrize(
    "line",
    ["", "hello", "abc: {}", "-1.0: {}", "inf: {}", f"{URL} <=> 1.0: x", f"{URL} <- 1.0", f"{URL} <-> 1.0: x", "a b c d: x"],
)
def test_malformed_lines_raise_capture_error(line):
    with pytest.raises(CaptureError):
        parse_line(line, 3)
    assert issubclass(CaptureError, BitgetError)


def test_blank_lines_are_skipped_and_errors_name_the_line():
    assert list(parse_lines(["\n", "1.0: a\n"])) == [CaptureLine(1.0, RECV, "a")]
    with pytest.raises(CaptureError, match="line 2"):
        list(parse_lines(["1.0: a\n", "oops\n"]))


def test_writer_records_in_the_same_format_and_reads_back(tmp_path):
    path = tmp_path / "rec.ws"
    with open(path, "w", encoding="utf-8") as fp:
        w = CaptureWriter(fp, URL)
        w.opened(1700000000.25)
        w.sent(1700000000.5, '{"op":"subscribe","args":[{"instType":"SPOT","channel":"books15","instId":"BTCUSDT"}]}')
        w.received(1700000000.75, "pong")
        w.received(1700000001.0, '{"event":"subscribe"}')
    assert w.lines_written == 4
    assert path.read_text().splitlines()[:3] == [
        f"{URL} <-> 1700000000.25",
        f'{URL} <- 1700000000.5: {{"op":"subscribe","args":[{{"instType":"SPOT","channel":"books15","instId":"BTCUSDT"}}]}}',
        "1700000000.75: pong",
    ]
    assert [(e.direction, e.text) for e in read_capture(path)] == [
        (OPEN, ""), (SEND, '{"op":"subscribe","args":[{"instType":"SPOT","channel":"books15","instId":"BTCUSDT"}]}'),
        (RECV, "pong"), (RECV, '{"event":"subscribe"}'),
    ]


@pytest.mark.parametrize(
    "args",
    [(1.0, RECV, "a\nb"), (1.0, "sideways", "x", URL), (1.0, SEND, "x", ""), (1.0, SEND, "x", "a b"),
     (1.0, OPEN, "x", URL), (-1.0, RECV, "x"), (float("nan"), RECV, "x")],
    ids=["newline", "direction", "no-url", "url-space", "open-text", "negative-time", "nan-time"],
)
def test_unwritable_records_raise(args):
    with pytest.raises(CaptureError):
        format_line(*args)
    with pytest.raises(CaptureError):
        CaptureWriter(io.StringIO(), "a b").opened(1.0)


def test_the_real_capture_reads_and_rewrites_byte_for_byte(capture_path):
    raw = capture_path.read_text(encoding="utf-8").splitlines(keepends=True)
    events = list(read_capture(capture_path))
    assert len(events) == len(raw) == 686
    assert [e.direction for e in events[:3]] == [OPEN, SEND, RECV]  # line 2 is our subscribe request
    assert events[1].text.startswith('{"op":"subscribe"')
    assert {e.direction for e in events[2:]} == {RECV}
    url = raw[0].split(" ")[0]
    assert [format_line(e.receive_time_s, e.direction, e.text, url) for e in events] == raw


def test_the_recorder_writes_capture_lines_and_reports_what_it_could_not_record():
    fp = io.StringIO()
    rec = CaptureRecorder(fp)
    assert rec.opened(1.5, "ws://h/p x") and rec.sent(2.0, "ping") and rec.received(2.5, b'{"a":1}')
    assert not rec.received(3.0, "two\nlines"), "the line format holds one frame a line"
    assert not rec.received(3.5, b"\xff"), "not UTF-8"
    assert rec.flush()
    assert list(parse_lines(fp.getvalue().splitlines())) == [
        CaptureLine(1.5, OPEN, ""), CaptureLine(2.0, SEND, "ping"), CaptureLine(2.5, RECV, '{"a":1}')]
    assert fp.getvalue().startswith("ws://h/p%20x <-> 1.5\n")
