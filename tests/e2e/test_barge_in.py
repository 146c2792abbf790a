"""converse with barge_in through the real server, on the rig's worst echo: the agent's speech reaches
the server's microphone at full level (speaker_rig.py), the canceller takes it out with the played
samples as the reference, and only the user's voice — played into the same sink while the agent
talks — stops the speech and becomes the answer."""

from __future__ import annotations

import pytest
from rpc import wire
from speaker_rig import agent_alone, agent_words_in, user_cuts_in

# The user's onset must be found within seconds of real-time echo cancellation: on a machine that the
# parallel tiers load, the canceller's windows come late. They run alone (tools/dev test).
pytestmark = [pytest.mark.anyio, pytest.mark.solo]


def test_the_user_speaking_over_the_agent_stops_it_and_is_the_answer(speak_env, vmic, model_path):
    """The user starts about 2.5 s into a long speech: the speech stops, the result says how much was
    played, and the transcription holds not a word of the agent's. The user's words were said over the
    agent and the canceller damps them: how well they come through (and how often the agent's own voice
    stops the speech first) is measured in bench/barge.py, not asserted here."""
    args = {"whisper_model": str(model_path), "silence_ms": 800, "barge_in": True}
    with wire(speak_env) as w:
        w.call("speak_text", {"text": "Hello."}, timeout=60)  # the voice loaded: the speech starts at once
        reply, _ = user_cuts_in(w, vmic, "converse", args)
    result = reply["result"]
    assert not result.get("isError"), result
    data = result["structuredContent"]
    spoken = data["spoken"]
    assert spoken["interrupted"] is True, data
    assert spoken["played_ms"] == spoken["duration_ms"] and 1000 < spoken["played_ms"] < 10_000, spoken
    assert agent_words_in(data["transcription"]) == [], data
    assert data["stopped_by"] in ("silence", "ceiling") and "warning" not in data, data


def test_the_agents_own_voice_at_full_level_never_becomes_the_answer(speak_env, vmic, model_path):
    """Nobody speaks: the long speech plays into the microphone at full level, and whatever the turn
    makes of it (bench/barge.py counts how often the agent's own voice stops it), no word of it is
    the answer. Barge-in comes from MCP_LISTEN_BARGE_IN here, not the argument."""
    with wire({**speak_env, "MCP_LISTEN_BARGE_IN": "true"}) as w:
        bad = w.call("converse", {"text": "Hi.", "barge_in": "yes"})
        reply = agent_alone(w, model_path)
    assert bad.get("isError") and "barge_in" in bad["content"][0]["text"], bad
    assert not reply.get("isError"), reply
    data = reply["structuredContent"]
    assert data["spoken"]["played_ms"] == data["spoken"]["duration_ms"] > 1000, data
    assert agent_words_in(data["transcription"]) == [], data


def test_speak_text_with_barge_in_stops_and_returns_when_the_user_talks(speak_env, vmic):
    """speak_text returns as soon as the user talks over it, interrupted; with wait false it is refused."""
    with wire(speak_env) as w:
        refused = w.call("speak_text", {"text": "Hi.", "barge_in": True, "wait": False})
        w.call("speak_text", {"text": "Hello."}, timeout=60)  # the voice loaded: the speech starts at once
        reply, started = user_cuts_in(w, vmic, "speak_text", {"barge_in": True})
        returned_after = w.arrived[reply["id"]] - started
        free = w.status()
    assert refused.get("isError") and "barge_in true needs wait true" in refused["content"][0]["text"], refused
    data = reply["result"]["structuredContent"]
    assert data["interrupted"] is True and 1000 < data["duration_ms"] < 10_000, data
    assert returned_after < 3.0, returned_after  # long before the 20 s speech would have ended
    assert free["recording"] is False and "speaking" not in free, free
