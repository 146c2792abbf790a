"""Device enumeration, stable ids and device resolution, inputs and outputs (sounddevice, imported lazily).

PortAudio numbers devices by position, and positions move when a device is
plugged in or out; names repeat. The stable id is `host API:device name`, with a
`#2`, `#3` suffix only where that pair repeats, so it survives restarts and other
devices coming and going. Ids are numbered over every device, inputs and outputs
alike, so a headset that does both has one id, and an input's id is the same
whichever kind was listed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mcp_listen.contract.limits import DEFAULT_DEVICE_KIND
from mcp_listen.errors import CaptureError, DeviceNotFound, PortAudioMissing

log = logging.getLogger(__name__)

PORTAUDIO_HELP = (
    "PortAudio, the audio library mcp-listen records through, is not installed. "
    "Install it: sudo apt install libportaudio2 (Debian/Ubuntu), sudo dnf install portaudio (Fedora), "
    "brew install portaudio (macOS). Then restart the MCP server."
)

_init_lock = threading.Lock()


@dataclass(frozen=True)
class InputDevice:
    index: int
    name: str
    id: str
    max_input_channels: int
    default_samplerate: float
    is_default: bool

    def public(self) -> dict[str, Any]:
        """Field names as the Node edition returns them."""
        return {
            "index": self.index,
            "name": self.name,
            "id": self.id,
            "maxInputChannels": self.max_input_channels,
            "defaultSampleRate": self.default_samplerate,
            "isDefault": self.is_default,
        }


@dataclass(frozen=True)
class AudioDevice:
    """Any device, input, output or both: what list_audio_devices shows for kind output or all,
    and what `resolve_output` returns."""

    index: int
    name: str
    id: str
    max_input_channels: int
    max_output_channels: int
    default_samplerate: float
    is_default_input: bool
    is_default_output: bool
    host_api: str = ""
    """PortAudio's name for the host API (`ALSA`, `JACK Audio Connection Kit`, ...); not shown."""

    @property
    def kind(self) -> str:
        """`input`, `output` or `both` (a headset or a sound card's duplex device)."""
        if self.max_input_channels > 0 and self.max_output_channels > 0:
            return "both"
        return "input" if self.max_input_channels > 0 else "output"

    def public(self) -> dict[str, Any]:
        """An input's fields (`isDefault` still the default input), then what outputs add."""
        return {
            "index": self.index,
            "name": self.name,
            "id": self.id,
            "maxInputChannels": self.max_input_channels,
            "defaultSampleRate": self.default_samplerate,
            "isDefault": self.is_default_input,
            "kind": self.kind,
            "maxOutputChannels": self.max_output_channels,
            "isDefaultOutput": self.is_default_output,
        }


@dataclass(frozen=True)
class _Listing:
    """One PortAudio query: the raw device dicts, their ids, and the default indexes."""

    raw: list[dict[str, Any]]
    apis: list[str]
    ids: list[str]
    default_input: int
    default_output: int


def sounddevice() -> Any:
    """Import sounddevice on first use; a missing PortAudio becomes an error that says how to install it."""
    try:
        import sounddevice as sd
    except OSError as exc:
        raise PortAudioMissing(PORTAUDIO_HELP) from exc
    return sd


def refresh() -> None:
    """Re-initialise PortAudio so devices added or removed since start are seen.

    Only safe while no stream is open: the caller guarantees that.
    """
    sd = sounddevice()
    with _init_lock:
        try:
            sd._terminate()
        finally:
            sd._initialize()


def build_ids(pairs: Iterable[tuple[str, str]]) -> list[str]:
    """Stable ids from (host API, device name) pairs: `api:name`, `#N` only where a pair repeats."""
    seen: dict[str, int] = {}
    ids = []
    for api, name in pairs:
        base = f"{api}:{name}"
        seen[base] = seen.get(base, 0) + 1
        ids.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return ids


def _query(*, rescan: bool) -> _Listing:
    sd = sounddevice()
    if rescan:
        refresh()
    try:
        raw = list(sd.query_devices())
        apis = [api["name"] for api in sd.query_hostapis()]
    except sd.PortAudioError as exc:
        raise CaptureError(f"Could not list audio devices: {exc}") from exc
    ids = build_ids((apis[d["hostapi"]], d["name"]) for d in raw)
    return _Listing(
        raw, apis, ids, _default_index(sd, 0, "default_input_device"), _default_index(sd, 1, "default_output_device")
    )


def list_inputs(*, rescan: bool = False) -> list[InputDevice]:
    """Every device that can record, in PortAudio order; an empty list when there is none."""
    found = _query(rescan=rescan)
    return [
        InputDevice(
            index=i,
            name=d["name"],
            id=found.ids[i],
            max_input_channels=int(d["max_input_channels"]),
            default_samplerate=float(d["default_samplerate"]),
            is_default=i == found.default_input,
        )
        for i, d in enumerate(found.raw)
        if d["max_input_channels"] > 0
    ]


def list_devices(kind: str = DEFAULT_DEVICE_KIND, *, rescan: bool = False) -> list[Any]:
    """What list_audio_devices shows for `kind`: InputDevice for "input" (the Node edition's
    shape, unchanged), AudioDevice for "output" (devices that can play) and "all"."""
    if kind == "input":
        return list_inputs(rescan=rescan)
    found = _query(rescan=rescan)
    every = [
        AudioDevice(
            index=i,
            name=d["name"],
            id=found.ids[i],
            max_input_channels=int(d["max_input_channels"]),
            max_output_channels=int(d["max_output_channels"]),
            default_samplerate=float(d["default_samplerate"]),
            is_default_input=i == found.default_input,
            is_default_output=i == found.default_output,
            host_api=found.apis[d["hostapi"]],
        )
        for i, d in enumerate(found.raw)
    ]
    if kind == "output":
        return [d for d in every if d.max_output_channels > 0]
    return [d for d in every if d.max_input_channels > 0 or d.max_output_channels > 0]


def list_outputs(*, rescan: bool = False) -> list[AudioDevice]:
    """Every device that can play, in PortAudio order; an empty list when there is none."""
    return list_devices("output", rescan=rescan)


def _default_index(sd: Any, slot: int, hostapi_key: str) -> int:
    """The default device of one direction (slot 0 input, 1 output); -1 when there is none."""
    try:
        index = sd.default.device[slot]
        if index is None or index < 0:
            index = sd.query_hostapis(sd.default.hostapi)[hostapi_key]
        return int(index)
    except Exception:  # noqa: BLE001 - no default is a normal state, not an error
        return -1


def resolve(device: int | str | None, *, rescan: bool = False) -> InputDevice:
    """The input device a tool argument names; None means the system default input."""
    inputs = list_inputs(rescan=rescan)
    missing = DeviceNotFound(
        "No microphone found: PortAudio lists no input device. Connect one, check the system's "
        "sound settings (and microphone permission), then call list_audio_devices.",
        code="no_input_device",
    )
    no_default = DeviceNotFound(
        "There is no default input device. Pick one with the device argument "
        "(an id from list_audio_devices) or set a default microphone in the system's sound settings.",
        code="no_default_device",
    )
    default = next((d for d in inputs if d.is_default), None)
    return _chosen(inputs, device, default, missing, no_default, "input", "list_audio_devices")


def resolve_output(device: int | str | None, *, rescan: bool = False) -> AudioDevice:
    """The output device an argument names (id, index, name or a unique part); None means the
    system default output. The same rules and messages as `resolve`, for speakers."""
    outputs = list_outputs(rescan=rescan)
    missing = DeviceNotFound(
        "No speaker found: PortAudio lists no output device. Connect one, check the system's sound "
        'settings, then call list_audio_devices with kind "output".',
        code="no_output_device",
    )
    no_default = DeviceNotFound(
        'There is no default output device. Pick one by its id (list_audio_devices with kind "output") '
        "or set a default speaker in the system's sound settings.",
        code="no_default_output",
    )
    default = next((d for d in outputs if d.is_default_output), None)
    chosen: AudioDevice = _chosen(
        outputs, device, default, missing, no_default, "output", 'list_audio_devices with kind "output"'
    )
    if chosen.host_api == JACK_HOST_API:
        raise CaptureError(
            f"The speaker {chosen.id} is a JACK device, and PortAudio's JACK output crashes the process on "
            "the blocking writes speech uses. Choose the same speaker through PulseAudio, PipeWire or ALSA "
            '(list_audio_devices with kind "output" lists them; "default" follows the system\'s choice).',
            code="device_unsupported",
        )
    return chosen


JACK_HOST_API = "JACK Audio Connection Kit"
"""Its PortAudio output segfaults in Pa_WriteStream (measured: PortAudio 19.7, jackd2 1.9.21, every block
size and sample format); its inputs, opened with a callback, are fine."""


def _chosen(
    devices: list[Any],
    device: int | str | None,
    default: Any,
    missing: DeviceNotFound,
    no_default: DeviceNotFound,
    kind: str,
    listing: str,
) -> Any:
    """The one resolution rule for inputs and outputs: none listed, the default, an index, a name."""
    if not devices:
        raise missing
    if device is None:
        if default is None:
            raise no_default
        return default
    if isinstance(device, int):
        for candidate in devices:
            if candidate.index == device:
                return candidate
        raise DeviceNotFound(
            f"No {kind} device with index {device}. Call {listing} for the current ids "
            "(ids are stable; indexes change when devices are added or removed)."
        )
    return _by_name(devices, device, kind)


CPAL_HOSTS = {
    "alsa": "alsa",
    "coreaudio": "core audio",
    "wasapi": "windows wasapi",
    "asio": "asio",
    "jack": "jack audio connection kit",
}
"""The Node edition's ids start with cpal's host name; PortAudio names the same host APIs so."""


def _by_name(devices: list[Any], wanted: str, kind: str) -> Any:
    """A string device of `kind` (input or output): our id, a Node-edition id (`alsa:vmic`, host
    API matched case-insensitively), the device's name, or a part of its name or id that only one
    device has."""
    text = wanted.strip().casefold()
    rules = (
        lambda d: d.id == wanted,
        lambda d: d.id.casefold() == text or _node_id_matches(d, text),
        lambda d: d.name.casefold() == text,
        lambda d: text in d.name.casefold() or text in d.id.casefold(),
    )
    for rule in rules:
        found = [d for d in devices if rule(d)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            ids = ", ".join(repr(d.id) for d in found[:6])
            raise DeviceNotFound(
                f"Device {wanted!r} matches {len(found)} {kind} devices ({ids}). Pass one of these ids.",
                code="device_ambiguous",
            )
    listing = "list_audio_devices" if kind == "input" else f'list_audio_devices with kind "{kind}"'
    raise DeviceNotFound(
        f"No {kind} device matches {wanted!r} (by id, name or part of a name). Call {listing} "
        "for the current ids (ids are stable; indexes change when devices are added or removed)."
    )


def _node_id_matches(device: Any, text: str) -> bool:
    """`alsa:vmic` (cpal host name, device name) against `ALSA:vmic` (PortAudio host API name)."""
    host, sep, name = text.partition(":")
    if not sep:
        return False
    api, _, own_name = device.id.casefold().partition(":")
    return CPAL_HOSTS.get(host, host) == api and name == own_name.split("#", 1)[0]
