"""The MCP prompts talk and dictate: what they tell the agent, and what they refuse."""

from __future__ import annotations

import importlib.util

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from mcp_listen.server import app, prompts


def _get(name: str, **arguments: str) -> str:
    params = types.GetPromptRequestParams(name=name, arguments=arguments)
    result = app.prompt_result(app.listed_prompts(), params)
    return result.messages[0].content.text  # type: ignore[union-attr]


def test_talk_has_the_agent_converse_every_turn_and_keep_it_short():
    text = _get("talk", topic="gardening")
    assert "Let's talk about gardening." in text
    assert "call the converse tool" in text and "short" in text and "speak_text" in text


def test_dictate_listens_with_a_patient_end_of_turn_and_writes_where_asked():
    assert "Write it down here" in _get("dictate")
    text = _get("dictate", destination="notes.md")
    assert "Write it to notes.md." in text and 'end_of_turn "smart"' in text


@pytest.mark.parametrize("value", ["x" * (prompts.MAX_PROMPT_ARGUMENT_CHARS + 1), "two\nlines", "bell\x07"])
def test_a_bad_argument_is_invalid_params_naming_it(value):
    with pytest.raises(MCPError) as caught:
        _get("talk", topic=value)
    assert caught.value.code == types.INVALID_PARAMS and "Invalid topic" in caught.value.error.message


def test_an_unknown_prompt_names_the_prompts():
    with pytest.raises(MCPError) as caught:
        _get("sing")
    assert "Prompts: talk, dictate." in caught.value.error.message


def test_talk_is_offered_only_where_converse_is(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a, **k: None if n == "piper" else real(n, *a, **k))
    assert [p.name for p in app.listed_prompts()] == ["dictate"]
    with pytest.raises(MCPError) as caught:
        _get("talk")
    assert "speak extra" in caught.value.error.message
