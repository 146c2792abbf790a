"""Output devices: listing by kind, stable ids shared with inputs, and resolving a speaker.

PortAudio's answer is scripted here (a fake `sounddevice` module: a host with an output-only
speaker, a duplex headset, two microphones of the same name and an HDMI output) because the
test machine's only devices are the virtual microphone's, which are all duplex. The real
listing is tests/e2e/test_server.py's job.
"""

from __future__ import annotations

import types

import pytest

from mcp_listen.audio import devices
from mcp_listen.contract import arguments, results
from mcp_listen.contract.results import Devices, wire
from mcp_listen.errors import DeviceNotFound, InvalidArgument

RAW = [
    {"name": "Built-in Mic", "hostapi": 0, "max_input_channels": 2, "max_output_channels": 0, "default_samplerate": 48000.0},
    {"name": "Speakers", "hostapi": 0, "max_input_channels": 0, "max_output_channels": 2, "default_samplerate": 48000.0},
    {"name": "USB Headset", "hostapi": 0, "max_input_channels": 1, "max_output_channels": 2, "default_samplerate": 44100.0},
    {"name": "Built-in Mic", "hostapi": 0, "max_input_channels": 2, "max_output_channels": 0, "default_samplerate": 48000.0},
    {"name": "HDMI 1", "hostapi": 1, "max_input_channels": 0, "max_output_channels": 8, "default_samplerate": 48000.0},
]  # fmt: skip


class PortAudioError(Exception):
    pass


def fake_sounddevice(raw=RAW, default=(0, 1)):
    return types.SimpleNamespace(
        query_devices=lambda: [dict(d) for d in raw],
        query_hostapis=lambda index=None: (
            [{"name": "ALSA"}, {"name": "JACK Audio Connection Kit"}]
            if index is None
            else {"default_input_device": -1, "default_output_device": -1}
        ),
        default=types.SimpleNamespace(device=list(default), hostapi=0),
        PortAudioError=PortAudioError,
    )


@pytest.fixture
def portaudio(monkeypatch):
    def install(**kw):
        monkeypatch.setattr(devices, "sounddevice", lambda: fake_sounddevice(**kw))

    install()
    return install


def test_input_listing_is_unchanged(portaudio):
    listed = wire(Devices(devices.list_devices("input")))["devices"]
    assert [d["id"] for d in listed] == ["ALSA:Built-in Mic", "ALSA:USB Headset", "ALSA:Built-in Mic#2"]
    assert all(set(d) == {"index", "name", "id", "maxInputChannels", "defaultSampleRate", "isDefault"} for d in listed)
    assert [d["isDefault"] for d in listed] == [True, False, False]


def test_outputs_carry_their_kind_and_the_default_output(portaudio):
    listed = wire(Devices(devices.list_devices("output")))["devices"]
    assert [(d["id"], d["kind"], d["maxOutputChannels"]) for d in listed] == [
        ("ALSA:Speakers", "output", 2),
        ("ALSA:USB Headset", "both", 2),
        ("JACK Audio Connection Kit:HDMI 1", "output", 8),
    ]
    assert [d["isDefaultOutput"] for d in listed] == [True, False, False]
    assert [d["isDefault"] for d in listed] == [False, False, False], "isDefault stays the default input"


def test_all_lists_every_device_once_with_the_same_ids_as_each_kind(portaudio):
    every = wire(Devices(devices.list_devices("all")))["devices"]
    ids = {d["id"]: d["kind"] for d in every}
    assert len(every) == len(RAW) == len(ids)
    inputs = {d.id for d in devices.list_inputs()}
    outputs = {d.id for d in devices.list_outputs()}
    assert inputs | outputs == set(ids) and inputs & outputs == {"ALSA:USB Headset"}
    assert {i for i, k in ids.items() if k == "both"} == {"ALSA:USB Headset"}


def test_every_all_entry_validates_against_the_result_schema(portaudio):
    results.DevicesResult.model_validate(wire(Devices(devices.list_devices("all"))))


@pytest.mark.parametrize(
    "wanted, expected",
    [
        (None, "ALSA:Speakers"),
        (2, "ALSA:USB Headset"),
        ("ALSA:USB Headset", "ALSA:USB Headset"),
        ("speakers", "ALSA:Speakers"),
    ],
)
def test_resolve_output_by_default_index_id_or_name(portaudio, wanted, expected):
    assert devices.resolve_output(wanted).id == expected


@pytest.mark.parametrize(
    "wanted, code",
    [
        (0, "device_not_found"),  # index 0 is a microphone, not a speaker
        ("Built-in Mic", "device_not_found"),
        ("nothing like it", "device_not_found"),
        ("ALSA:", "device_ambiguous"),
    ],
)
def test_resolve_output_refuses_what_is_not_one_speaker(portaudio, wanted, code):
    with pytest.raises(DeviceNotFound) as caught:
        devices.resolve_output(wanted)
    assert caught.value.code == code
    assert "output" in caught.value.message


@pytest.mark.parametrize("wanted", ["hdmi", "jack:HDMI 1", 4])
def test_a_jack_speaker_is_refused_naming_the_way_out(portaudio, wanted):
    """PortAudio's JACK output crashes on blocking writes: refused before anything opens."""
    from mcp_listen.errors import CaptureError

    with pytest.raises(CaptureError) as caught:
        devices.resolve_output(wanted)
    assert caught.value.code == "device_unsupported"
    assert "JACK Audio Connection Kit:HDMI 1" in caught.value.message and "PulseAudio" in caught.value.message
    assert [d.id for d in devices.list_outputs()][-1] == "JACK Audio Connection Kit:HDMI 1"  # still listed


def test_no_speaker_and_no_default_speaker_are_named(portaudio):
    portaudio(raw=[RAW[0]])
    with pytest.raises(DeviceNotFound) as none:
        devices.resolve_output(None)
    assert none.value.code == "no_output_device" and 'kind "output"' in none.value.message
    portaudio(default=(0, -1))
    with pytest.raises(DeviceNotFound) as no_default:
        devices.resolve_output(None)
    assert no_default.value.code == "no_default_output"


def test_resolve_still_means_inputs(portaudio):
    assert devices.resolve(None).id == "ALSA:Built-in Mic"
    with pytest.raises(DeviceNotFound):
        devices.resolve("Speakers")


@pytest.mark.parametrize("kind", ["input", "output", "all", None])
def test_kind_argument_accepts_the_three_kinds(kind):
    raw = {} if kind is None else {"kind": kind}
    assert arguments.parse_args(arguments.ListDevicesArgs, raw).kind == kind


@pytest.mark.parametrize("kind", ["speakers", "", "INPUT", 1, True, "none"])
def test_kind_argument_refuses_anything_else(kind):
    with pytest.raises(InvalidArgument) as caught:
        arguments.parse_args(arguments.ListDevicesArgs, {"kind": kind})
    assert "kind" in caught.value.message and '"output"' in caught.value.message


def test_kind_schema_is_an_enum_of_the_limits_kinds():
    from mcp_listen.contract.limits import DEVICE_KINDS

    prop = arguments.input_schema(arguments.ListDevicesArgs)["properties"]["kind"]
    enum = next(branch["enum"] for branch in prop["anyOf"] if "enum" in branch)
    assert tuple(enum) == DEVICE_KINDS
