"""The docs say what `tools/list` says, so they cannot drift from the code unnoticed.

README.md and docs/tools.md each hold a table of the tools and a table of the arguments. The truth is
the tools' listing as the server builds it (every ToolSpec, the speaking ones included, with the
contract's defaults): for each argument row, the tools it names must be exactly the tools whose input
schema has that argument (an argument may take several rows, e.g. `device` of the microphone and of the
speaker: each tool once), and the default it names must be the schema's `default`, or, where the schema
states none, the default the argument's description states (`Default true`, `"input" (..., the default)`).
The parser is small and tolerant: it reads pipe tables by their header, the tool names in a cell, and
the code spans of the default cell.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from mcp_listen.contract.limits import Defaults

REPO = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/tools.md")
UNSTATED = object()
"""An argument whose listing states no default (a device: "the system default input")."""


def listing() -> dict[str, dict[str, Any]]:
    """Each tool's inputSchema as tools/list sends it (camelCase JSON, the contract's defaults)."""
    from mcp_listen.server.app import TOOLS

    tools = (spec.as_tool(Defaults()).model_dump(mode="json", by_alias=True, exclude_none=True) for spec in TOOLS)
    return {tool["name"]: tool["inputSchema"] for tool in tools}


_STATED = (
    re.compile(r"\b[Dd]efault:?\s+(true|false|-?\d+(?:\.\d+)?)\b"),
    re.compile(r'(true|false|"[^"]*"|-?\d+(?:\.\d+)?) \((?:[^()]*, )?the default\)'),
)


def stated_default(prop: dict[str, Any]) -> Any:
    """The schema's `default`, else the scalar the description calls the default, else UNSTATED."""
    if "default" in prop:
        return prop["default"]
    for pattern in _STATED:
        found = pattern.search(prop.get("description", ""))
        if found:
            return json.loads(found.group(1))
    return UNSTATED


def tables(text: str, first_header: str) -> list[tuple[list[str], list[list[str]]]]:
    """The pipe tables whose header's first cell is `first_header`: (header, rows of cells)."""
    found: list[tuple[list[str], list[list[str]]]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if cells(line)[:1] == [first_header] and re.fullmatch(r"\|[\s|:-]+\|?", lines[i + 1].strip()):
            rows = []
            for row in lines[i + 2 :]:
                if not row.lstrip().startswith("|"):
                    break
                rows.append(cells(row))
            found.append((cells(line), rows))
    return found


def cells(line: str) -> list[str]:
    line = line.strip()
    if not line.startswith("|"):
        return []
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip("|"))]


def code_spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def value(span: str) -> Any:
    """A code span as the value it writes: JSON where it parses (`true`, `1000`, `"silence"`), else the text."""
    try:
        return json.loads(span)
    except ValueError:
        return span


def same(doc: Any, schema: Any) -> bool:
    if isinstance(doc, bool) or isinstance(schema, bool):
        return doc is schema
    return bool(doc == schema)


def per_tool_defaults(cell: str, tools: set[str], row_tools: list[str]) -> dict[str, Any]:
    """The defaults a cell names, each a code span or a bare number or boolean: one value for every tool
    of the row when it comes before any tool name ("1000 (`MCP_LISTEN_SILENCE_MS`)"), else each tool's
    next value ("capture_audio: `false`; transcribe_voice / voice_query: `true`")."""
    tokens = re.findall(r"`[^`]+`|-?\b\d+(?:\.\d+)?\b|\btrue\b|\bfalse\b|[a-z_]+", cell)
    names_or_values = [
        t for t in tokens if t in tools or t.startswith("`") or t[-1].isdigit() or t in ("true", "false")
    ]
    if not names_or_values:
        return {}
    if names_or_values[0] not in tools:
        return {tool: value(names_or_values[0].strip("`")) for tool in row_tools}
    named: dict[str, Any] = {}
    waiting: list[str] = []
    for token in names_or_values:
        if token not in tools:
            named.update({tool: value(token.strip("`")) for tool in waiting})
            waiting = []
        elif token not in named:
            waiting.append(token)
    return named


_RANGE = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s*[–-]\s*(\d[\d,]*(?:\.\d+)?)")


def accepted_problems(prop: dict[str, Any], cell: str) -> list[str]:
    """The numeric range (minimum–maximum) and the enum values of the schema the accepted cell leaves out."""
    problems = []
    ranges = {(float(a.replace(",", "")), float(b.replace(",", ""))) for a, b in _RANGE.findall(cell)}
    for variant in prop.get("anyOf", [prop]):
        low, high = variant.get("minimum"), variant.get("maximum")
        if variant.get("type") in ("integer", "number") and low is not None and high is not None:
            if (float(low), float(high)) not in ranges:
                problems.append(f"the accepted cell does not give the range {low:g}–{high:g} tools/list states")
        missing = [f'"{choice}"' for choice in variant.get("enum", []) if f'"{choice}"' not in cell]
        if missing:
            problems.append(f"the accepted cell does not name {', '.join(missing)} of {variant['enum']}")
    return problems


def argument_problems(doc: str, text: str, schemas: dict[str, dict[str, Any]]) -> list[str]:
    """What `text` (the doc named `doc`) says of the arguments that tools/list (`schemas`) does not."""
    found = tables(text, "argument")
    if not found:
        return [f"{doc}: no table whose header begins `| argument |`"]
    problems: list[str] = []
    tools = set(schemas)
    named: dict[str, list[str]] = {}
    for header, rows in found:
        column = {name: header.index(name) for name in ("tools", "accepted", "default") if name in header}
        if len(column) < 3:
            problems.append(
                f"{doc}: the argument table's header {header} lacks a `tools`, `accepted` or `default` column"
            )
            continue
        for row in rows:
            spans = code_spans(row[0])
            if not spans or len(row) <= max(column.values()):
                problems.append(f"{doc}: cannot read the argument row {row}")
                continue
            arg, tools_cell, default_cell = spans[0], row[column["tools"]], row[column["default"]]
            where = f"{doc}, the `{arg}` row ({tools_cell})"
            row_tools = [word for word in re.findall(r"[a-z_]+", tools_cell) if word in tools]
            strangers = [w for w in re.findall(r"[a-z]+_[a-z_]+", tools_cell) if w not in tools]
            if strangers:
                problems.append(f"{where}: {strangers} are no tools of tools/list ({sorted(tools)})")
            for tool in row_tools:
                if tool in named.get(arg, []):
                    problems.append(f"{where}: {tool} is named in two `{arg}` rows")
                named.setdefault(arg, []).append(tool)
                prop = schemas[tool]["properties"].get(arg)
                if prop is None:
                    continue  # the whole-argument check below names it
                if arg in schemas[tool].get("required", []) and "required" not in tools_cell:
                    problems.append(f"{where}: tools/list makes `{arg}` required for {tool}; the row does not say so")
                problems += [
                    f"{where}: {wrong} for {tool}" for wrong in accepted_problems(prop, row[column["accepted"]])
                ]
            defaults = per_tool_defaults(default_cell, tools, row_tools)
            for tool in row_tools:
                prop = schemas[tool]["properties"].get(arg)
                truth = UNSTATED if prop is None else stated_default(prop)
                if truth is UNSTATED:
                    continue
                if tool not in defaults:
                    problems.append(
                        f"{where}: the default cell names no default for {tool}; tools/list says "
                        f"{json.dumps(truth)} (default cell: {default_cell!r})"
                    )
                elif not same(defaults[tool], truth):
                    problems.append(
                        f"{where}: the default for {tool} reads {json.dumps(defaults[tool])}; tools/list says "
                        f"{json.dumps(truth)} (default cell: {default_cell!r})"
                    )
    arguments = {arg for schema in schemas.values() for arg in schema["properties"]}
    for arg in sorted(arguments | set(named)):
        has_it = {tool for tool, schema in schemas.items() if arg in schema["properties"]}
        listed = set(named.get(arg, []))
        if not listed:
            problems.append(f"{doc}: no argument row for `{arg}`; tools/list gives it to {sorted(has_it)}")
        elif listed != has_it:
            problems.append(
                f"{doc}: the `{arg}` row(s) name {sorted(listed)}; tools/list gives `{arg}` to {sorted(has_it)}"
                f" (missing: {sorted(has_it - listed)}, not in its schema: {sorted(listed - has_it)})"
            )
    return problems


@pytest.mark.parametrize("doc", DOCS)
def test_every_argument_row_names_the_tools_and_the_default_tools_list_gives(doc):
    problems = argument_problems(doc, (REPO / doc).read_text(encoding="utf-8"), listing())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", DOCS)
def test_every_tool_of_tools_list_is_in_the_tool_table(doc):
    text = (REPO / doc).read_text(encoding="utf-8")
    found = tables(text, "tool")
    assert found, f"{doc}: no table whose header begins `| tool |`"
    in_table = [spans[0] for _, rows in found for row in rows if (spans := code_spans(row[0]))]
    tools = set(listing())
    assert set(in_table) == tools, (
        f"{doc}: the tool table names {sorted(in_table)}; tools/list has {sorted(tools)} "
        f"(missing: {sorted(tools - set(in_table))}, unknown: {sorted(set(in_table) - tools)})"
    )


def test_every_tool_of_tools_list_has_its_section_in_docs_tools_md():
    headings = set(re.findall(r"^## (\w+)\s*$", (REPO / "docs/tools.md").read_text(encoding="utf-8"), re.M))
    missing = sorted(set(listing()) - headings)
    assert not missing, f"docs/tools.md: no `## NAME` section for {missing}"


def test_the_parser_reads_what_it_checks():
    """Guards the test itself: a parser that read nothing would pass every doc."""
    schemas = listing()
    prop = {tool: schema["properties"] for tool, schema in schemas.items()}
    assert stated_default(prop["converse"]["barge_in"]) is True
    assert stated_default(prop["transcribe_voice"]["translate"]) is False
    assert stated_default(prop["list_audio_devices"]["kind"]) == "input"
    assert stated_default(prop["capture_audio"]["device"]) is UNSTATED
    tools = set(schemas)
    assert per_tool_defaults("1000 (`MCP_LISTEN_SILENCE_MS`)", tools, ["converse"]) == {"converse": 1000}
    assert per_tool_defaults('`"smart"` (`MCP_LISTEN_END_OF_TURN`)', tools, ["converse"]) == {"converse": "smart"}
    cell = "capture_audio: `false`; transcribe_voice / voice_query: `true`"
    assert per_tool_defaults(cell, tools, ["capture_audio", "transcribe_voice", "voice_query"]) == {
        "capture_audio": False,
        "transcribe_voice": True,
        "voice_query": True,
    }
    assert accepted_problems(prop["transcribe_voice"]["duration_ms"], "integer 100–30000") == [
        "the accepted cell does not give the range 100–600000 tools/list states"
    ]
    assert accepted_problems(prop["list_audio_devices"]["kind"], '`"input"` or `"all"`') == [
        "the accepted cell does not name \"output\" of ['input', 'output', 'all']"
    ]
    wrong = (
        "| argument | tools | accepted | default |\n|---|---|---|---|\n| `barge_in` | converse | boolean | `false` |"
    )
    problems = argument_problems("wrong.md", wrong, {tool: schemas[tool] for tool in ("converse", "speak_text")})
    assert problems[0] == (
        "wrong.md, the `barge_in` row (converse): the default for converse reads false; tools/list says true "
        "(default cell: '`false`')"
    )
    assert "wrong.md: the `barge_in` row(s) name ['converse']; tools/list gives `barge_in` to ['converse', " in (
        "\n".join(problems)
    )
    assert "wrong.md: no argument row for `translate`" in "\n".join(problems)
