"""The argument contract, tested directly: every range edge, wrong type, null and unknown key."""

from __future__ import annotations

import math

import pytest

from mcp_listen.contract import arguments, limits, results
from mcp_listen.contract.arguments import CaptureArgs, TranscribeArgs, VoiceQueryArgs, parse_args
from mcp_listen.errors import InvalidArgument

VALID = [
    (CaptureArgs, {}),
    (CaptureArgs, {"duration_ms": 100}),
    (CaptureArgs, {"duration_ms": 30000}),
    (CaptureArgs, {"duration_ms": 500.0}),
    (CaptureArgs, {"duration_ms": None, "device": None}),
    (CaptureArgs, {"device": 0}),
    (CaptureArgs, {"device": "ALSA:vmic"}),
    (CaptureArgs, {"stop_on_silence": True, "silence_ms": 100}),
    (CaptureArgs, {"stop_on_silence": True, "silence_ms": 10000}),
    (VoiceQueryArgs, {"silence_ms": 500}),
    (VoiceQueryArgs, {"language": "auto", "model": "qwen2.5:0.5b", "prompt": ""}),
    (VoiceQueryArgs, {"whisper_model": "base.en", "language": "pt"}),
    (VoiceQueryArgs, {"prompt": "p" * 32000}),
    (TranscribeArgs, {"stop_on_silence": False, "duration_ms": 2000}),
    (TranscribeArgs, {"vocabulary": "mcp-listen, pywhispercpp, Siobhan, kubectl"}),
    (VoiceQueryArgs, {"vocabulary": "v" * limits.MAX_VOCABULARY_CHARS}),
    (TranscribeArgs, {"vocabulary": ""}),
    (arguments.ConverseArgs, {"text": "Which cluster?", "vocabulary": "kubectl, Grafana, Nguyen"}),
]

INVALID = [
    (CaptureArgs, {"duration_ms": 99}, "duration_ms", "100 to 30000", "99"),
    (CaptureArgs, {"duration_ms": 30001}, "duration_ms", "100 to 30000", "30001"),
    (CaptureArgs, {"duration_ms": 1500.5}, "duration_ms", "integer", "1500.5"),
    (CaptureArgs, {"duration_ms": "5000"}, "duration_ms", "integer", "'5000' (string)"),
    (CaptureArgs, {"duration_ms": True}, "duration_ms", "integer", "True (boolean)"),
    (CaptureArgs, {"duration_ms": math.nan}, "duration_ms", "integer", "nan"),
    (CaptureArgs, {"duration_ms": math.inf}, "duration_ms", "integer", "inf"),
    (CaptureArgs, {"duration_ms": -0.0}, "duration_ms", "100 to 30000", "-0.0"),
    (CaptureArgs, {"duration_ms": [5000]}, "duration_ms", "integer", "[5000]"),
    (CaptureArgs, {"device": ""}, "device", "non-empty string id", "''"),
    (CaptureArgs, {"device": -1}, "device", "non-negative integer", "-1"),
    (CaptureArgs, {"device": 1.5}, "device", "non-negative integer", "1.5"),
    (CaptureArgs, {"device": False}, "device", "non-negative integer", "False"),
    (CaptureArgs, {"device": {"id": 1}}, "device", "non-negative integer", "{'id': 1}"),
    (CaptureArgs, {"stop_on_silence": "true"}, "stop_on_silence", "boolean", "'true'"),
    (CaptureArgs, {"stop_on_silence": 1}, "stop_on_silence", "boolean", "1 (integer)"),
    (CaptureArgs, {"stop_on_silence": True, "silence_ms": 99}, "silence_ms", "100 to 10000", "99"),
    (CaptureArgs, {"stop_on_silence": True, "silence_ms": 10001}, "silence_ms", "100 to 10000", "10001"),
    (VoiceQueryArgs, {"model": "m" * 201}, "model", "1 to 200", "mmm"),
    (VoiceQueryArgs, {"prompt": "p" * 100001}, "prompt", "100000", "ppp"),
    (VoiceQueryArgs, {"language": "english!"}, "language", "language code", "'english!'"),
    (VoiceQueryArgs, {"whisper_model": "w" * 1025}, "whisper_model", "1 to 1024", "www"),
    (VoiceQueryArgs, {"language": "klingon"}, "language", "a name such as english", "'klingon'"),
    (VoiceQueryArgs, {"language": "xx-YY"}, "language", "language code", "'xx-YY'"),
    (TranscribeArgs, {"language": 7}, "language", "language code", "7 (integer)"),
    (VoiceQueryArgs, {"model": "llama3.2\r\nollama rm all"}, "model", "no control characters", "llama3.2\\r\\n"),
    (VoiceQueryArgs, {"whisper_model": "tiny\n"}, "whisper_model", "no control characters", "'tiny\\n'"),
    (VoiceQueryArgs, {"model": "a\x1b[2Jb"}, "model", "no control characters", "\\x1b"),
    # the vocabulary is the user's names: its length is shown, never the value
    (TranscribeArgs, {"vocabulary": "v" * 151}, "vocabulary", "at most 150 characters", "a string of 151 characters"),
    (VoiceQueryArgs, {"vocabulary": "Siobhan\nkubectl"}, "vocabulary", "no control characters", "string of 15 char"),
    (arguments.ConverseArgs, {"text": "Hi", "vocabulary": 7}, "vocabulary", "names and terms", "7 (integer)"),
    (TranscribeArgs, {"vocabulary": ["kubectl"]}, "vocabulary", "separated by commas", "got a list"),
]


@pytest.mark.parametrize("model,raw", VALID)
def test_valid_arguments_are_accepted(model, raw):
    args = parse_args(model, raw)
    for key, value in raw.items():
        if value is not None and not isinstance(value, float):
            assert getattr(args, key) == value


@pytest.mark.parametrize("model,raw,name,accepted,shown", INVALID)
def test_invalid_argument_names_argument_range_and_value(model, raw, name, accepted, shown):
    with pytest.raises(InvalidArgument) as caught:
        parse_args(model, raw)
    message = str(caught.value)
    assert name in message and accepted in message and shown in message


@pytest.mark.parametrize("model", [CaptureArgs, TranscribeArgs, VoiceQueryArgs, arguments.ListDevicesArgs])
def test_unknown_argument_is_named_with_the_accepted_list(model):
    with pytest.raises(InvalidArgument) as caught:
        parse_args(model, {"durationMs": 5000})
    message = str(caught.value)
    assert "'durationMs'" in message
    for field in model.model_fields:
        assert field in message


def test_silence_ms_requires_stop_on_silence():
    for raw in ({"silence_ms": 500}, {"silence_ms": 500, "stop_on_silence": False}):
        with pytest.raises(InvalidArgument, match="silence_ms requires stop_on_silence: true"):
            parse_args(CaptureArgs, raw)
    with pytest.raises(InvalidArgument, match="silence_ms requires stop_on_silence: true"):
        parse_args(VoiceQueryArgs, {"silence_ms": 500, "stop_on_silence": False})


def test_integral_floats_become_integers():
    assert parse_args(CaptureArgs, {"duration_ms": 750.0, "device": 2.0}).duration_ms == 750
    assert parse_args(CaptureArgs, {"device": 2.0}).device == 2


@pytest.mark.parametrize("model,longest", [(CaptureArgs, 30000), (TranscribeArgs, 600_000), (VoiceQueryArgs, 30000)])
def test_schema_is_closed_and_states_ranges(model, longest):
    schema = arguments.input_schema(model)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    duration = schema["properties"]["duration_ms"]["anyOf"][0]
    assert (duration["minimum"], duration["maximum"]) == (100, longest)
    assert f"100-{longest}" in schema["properties"]["duration_ms"]["description"]
    assert "required" not in schema


def test_dictation_is_transcribe_voice_s_alone_and_its_limit_is_named():
    assert parse_args(TranscribeArgs, {"duration_ms": 600_000}).duration_ms == 600_000
    with pytest.raises(InvalidArgument, match=r"duration_ms: expected an integer from 100 to 600000 .* 600001"):
        parse_args(TranscribeArgs, {"duration_ms": 600_001})
    with pytest.raises(InvalidArgument, match=r"duration_ms: expected an integer from 100 to 30000 .* 60000"):
        parse_args(VoiceQueryArgs, {"duration_ms": 60_000})
    with pytest.raises(InvalidArgument, match=r"from 100 to 30000"):
        parse_args(CaptureArgs, {"duration_ms": 60_000})


def test_results_keep_nulls_and_drop_unset_fields():
    result = results.VoiceQueryResult(transcription=None, response=None)
    result.speech_detected = False
    assert result.public() == {"transcription": None, "response": None, "speech_detected": False}


@pytest.mark.parametrize(
    "given,code",
    [
        ("english", "en"),
        ("Portuguese", "pt"),
        ("pt-BR", "pt"),
        ("PT_br", "pt"),
        ("de", "de"),
        ("auto", "auto"),
        ("castilian", "es"),
        ("zh-Hans", "zh"),
        ("yue", "yue"),
    ],
)
def test_language_names_and_region_tags_become_whisper_codes(given, code):
    """The Node edition passed names such as "portuguese"; whisper takes the code."""
    assert parse_args(TranscribeArgs, {"language": given}).language == code


@pytest.mark.parametrize("field", ["whisper_model", "model", "language"])
@pytest.mark.parametrize("blank", ["", "   "])
def test_an_empty_string_means_the_default(field, blank):
    assert getattr(parse_args(VoiceQueryArgs, {field: blank}), field) is None


def test_schemas_state_the_effective_defaults():
    mine = limits.Defaults(whisper_model="ggml-small.bin", language="pt", model="qwen3", silence_ms=700)
    props = arguments.input_schema(VoiceQueryArgs, mine)["properties"]
    assert (
        props["whisper_model"]["default"] == "ggml-small.bin"
        and "ggml-small.bin" in props["whisper_model"]["description"]
    )
    assert props["language"]["default"] == "pt" and props["model"]["default"] == "qwen3"
    assert props["silence_ms"]["default"] == 700 and "default 700" in props["silence_ms"]["description"]
    assert "default" not in props["duration_ms"] and "{" not in props["duration_ms"]["description"]


def test_barge_in_s_effective_default_is_stated_as_a_boolean():
    """MCP_LISTEN_BARGE_IN sets it, so tools/list states it, typed as the caller passes it."""
    for barge_in in (True, False):
        schema = arguments.input_schema(arguments.ConverseArgs, limits.Defaults(barge_in=barge_in))
        assert schema["properties"]["barge_in"]["default"] is barge_in


def test_the_words_so_far_are_marked_partial_and_keep_their_latest_200_characters():
    from mcp_listen.contract.limits import PARTIAL_PREFIX, PARTIAL_TEXT_CHARS, partial_message

    assert partial_message("  so far\n so  good ") == PARTIAL_PREFIX + "so far so good"
    long = " ".join(f"word{i}" for i in range(200))
    message = partial_message(long)
    words = message.removeprefix(PARTIAL_PREFIX)
    assert len(words) <= PARTIAL_TEXT_CHARS and words.startswith("…")
    assert words.endswith("word198 word199") and long.endswith(words[1:])


def test_max_pause_ms_is_bounded_needs_a_pause_to_hold_and_states_its_default():
    assert parse_args(TranscribeArgs, {"max_pause_ms": 4500}).max_pause_ms == 4500
    assert parse_args(VoiceQueryArgs, {"max_pause_ms": 4500.0}).max_pause_ms == 4500
    for bad in (99, 30001, "3000", True, 2500.5):
        with pytest.raises(InvalidArgument, match=r"Invalid max_pause_ms: expected an integer from 100 to 30000"):
            parse_args(TranscribeArgs, {"max_pause_ms": bad})
    with pytest.raises(InvalidArgument, match="max_pause_ms requires stop_on_silence: true"):
        parse_args(TranscribeArgs, {"max_pause_ms": 4000, "stop_on_silence": False})
    with pytest.raises(InvalidArgument, match='max_pause_ms requires end_of_turn: "smart"'):
        parse_args(TranscribeArgs, {"max_pause_ms": 4000, "end_of_turn": "silence"})
    with pytest.raises(InvalidArgument, match="Unknown argument 'max_pause_ms'"):
        parse_args(CaptureArgs, {"max_pause_ms": 4000})
    prop = arguments.input_schema(TranscribeArgs, limits.Defaults(max_pause_ms=5000))["properties"]["max_pause_ms"]
    assert prop["default"] == 5000 and "default 5000" in prop["description"]
    bounds = prop["anyOf"][0]
    assert (bounds["minimum"], bounds["maximum"]) == (limits.MIN_MAX_PAUSE_MS, limits.MAX_MAX_PAUSE_MS)


def test_end_reason_names_the_deciding_signal_in_every_listening_result_schema():
    for model in (results.CaptureResult, results.TranscribeResult, results.VoiceQueryResult, results.ConverseResult):
        prop = results.output_schema(model)["properties"]["end_reason"]
        assert prop["anyOf"][0]["enum"] == [
            "silence", "words", "voice", "words+voice", "end_word", "max_pause", "duration", "cancelled",
        ], model  # fmt: skip


def test_end_of_turn_is_silence_or_smart_and_needs_stop_on_silence():
    assert parse_args(TranscribeArgs, {"end_of_turn": "smart"}).end_of_turn == "smart"
    assert parse_args(VoiceQueryArgs, {}).end_of_turn is None  # the default applies (MCP_LISTEN_END_OF_TURN)
    with pytest.raises(InvalidArgument, match=r'end_of_turn: expected one of "silence" .* \'clever\''):
        parse_args(TranscribeArgs, {"end_of_turn": "clever"})
    with pytest.raises(InvalidArgument, match="end_of_turn requires stop_on_silence: true"):
        parse_args(TranscribeArgs, {"end_of_turn": "smart", "stop_on_silence": False})
    with pytest.raises(InvalidArgument, match="Unknown argument 'end_of_turn'"):
        parse_args(CaptureArgs, {"end_of_turn": "smart"})
    schema = arguments.input_schema(TranscribeArgs, limits.Defaults(end_of_turn="smart"))
    assert schema["properties"]["end_of_turn"]["default"] == "smart"
    assert "Default smart" in schema["properties"]["end_of_turn"]["description"]
