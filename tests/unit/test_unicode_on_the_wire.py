"""A request whose strings hold a lone surrogate escape: the MCP SDK's JSON parser drops such a
line without a reply, so the client would wait for ever. server.stdio.BoundedLines reads it in
place of a stand-in that the ledger answers with an error naming where the escape is."""

from __future__ import annotations

import io
import json

from mcp_listen.server.ledger import NOT_UNICODE, NOT_UNICODE_METHOD
from mcp_listen.server.stdio import BoundedLines


def _read(*messages: str) -> list[str]:
    lines = BoundedLines(io.BytesIO("".join(m + "\n" for m in messages).encode()))
    out = []
    while (line := lines.read_line()) is not None:
        out.append(line)
    return out


def _call(text_json: str, request_id: str = "7") -> str:
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call",'
        f'"params":{{"name":"speak_text","arguments":{{"text":{text_json}}}}}}}'
    )


def test_a_lone_surrogate_becomes_a_stand_in_with_the_id_and_the_path():
    [line] = _read(_call('"half \\ud800 pair"'))
    stand_in = json.loads(line)
    assert stand_in["id"] == 7 and stand_in["method"] == NOT_UNICODE_METHOD
    assert stand_in["params"] == {"where": "params.arguments.text", "escape": "d800"}
    assert "\\ud800" in NOT_UNICODE.format_map(stand_in["params"])


def test_paired_surrogates_and_plain_text_pass_unchanged():
    emoji = _call('"party \\ud83c\\udf89 time"')
    plain = _call('"hello"')
    assert _read(emoji, plain) == [emoji + "\n", plain + "\n"]


def test_a_low_surrogate_alone_a_string_id_and_a_key_are_found_too():
    [low, named, key] = _read(
        _call('"\\udc00"'),
        _call('"ok\\uDBFF"', request_id='"abc"'),
        '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x","arguments":{"k\\ud801":1}}}',
    )
    assert json.loads(low)["params"]["escape"] == "dc00"
    assert json.loads(named)["id"] == "abc" and json.loads(named)["params"]["escape"] == "dbff"
    assert json.loads(key)["params"]["where"] == "a key of params.arguments"


def test_a_notification_with_a_lone_surrogate_is_dropped_and_reading_goes_on():
    notification = '{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"\\ud800"}}'
    after = _call('"fine"')
    assert _read(notification, after) == [after + "\n"]


def test_a_line_that_is_not_json_is_left_to_the_sdk():
    broken = '{"id": 1, "text": "\\ud800'
    assert _read(broken) == [broken + "\n"]


def test_bounded_lines_keeps_the_limit_exactly():
    """The reader under the server's stdin (pure part): the limit counts the newline."""
    import io

    from mcp_listen.server.stdio import BoundedLines

    limit = 64
    data = b"a" * 63 + b"\n" + b"b" * 64 + b"\n" + b"c" * 10 + b"\n" + b"d" * 1000 + b"\n" + b"e" * 5
    reader = BoundedLines(io.BufferedReader(io.BytesIO(data), buffer_size=16), limit=limit)
    lines = []
    while (line := reader.read_line()) is not None:
        lines.append(line)
    assert lines == ["a" * 63 + "\n", "c" * 10 + "\n", "e" * 5]
    assert reader.dropped == 2
    unterminated = BoundedLines(io.BufferedReader(io.BytesIO(b"x" * 500)), limit=limit)
    assert unterminated.read_line() is None and unterminated.dropped == 1
