"""Input-device enumeration, stable ids and device resolution (sounddevice, imported lazily).

PortAudio numbers devices by position, and positions move when a device is
plugged in or out; names repeat. The stable id is `host API:device name`, with a
`#2`, `#3` suffix only where that pair repeats, so it survives restarts and other
devices coming and going.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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


def list_inputs(*, rescan: bool = False) -> list[InputDevice]:
    """Every device that can record, in PortAudio order; an empty list when there is none."""
    sd = sounddevice()
    if rescan:
        refresh()
    try:
        raw = list(sd.query_devices())
        apis = [api["name"] for api in sd.query_hostapis()]
    except sd.PortAudioError as exc:
        raise CaptureError(f"Could not list audio devices: {exc}") from exc
    default_in = _default_input_index(sd)
    ids = build_ids((apis[d["hostapi"]], d["name"]) for d in raw)
    return [
        InputDevice(
            index=i,
            name=d["name"],
            id=ids[i],
            max_input_channels=int(d["max_input_channels"]),
            default_samplerate=float(d["default_samplerate"]),
            is_default=i == default_in,
        )
        for i, d in enumerate(raw)
        if d["max_input_channels"] > 0
    ]


def _default_input_index(sd: Any) -> int:
    try:
        index = sd.default.device[0]
        if index is None or index < 0:
            index = sd.query_hostapis(sd.default.hostapi)["default_input_device"]
        return int(index)
    except Exception:  # noqa: BLE001 - no default is a normal state, not an error
        return -1


def resolve(device: int | str | None, *, rescan: bool = False) -> InputDevice:
    """The input device a tool argument names; None means the system default input."""
    inputs = list_inputs(rescan=rescan)
    if not inputs:
        raise DeviceNotFound(
            "No microphone found: PortAudio lists no input device. Connect one, check the system's "
            "sound settings (and microphone permission), then call list_audio_devices.",
            code="no_input_device",
        )
    if device is None:
        for candidate in inputs:
            if candidate.is_default:
                return candidate
        raise DeviceNotFound(
            "There is no default input device. Pick one with the device argument "
            "(an id from list_audio_devices) or set a default microphone in the system's sound settings.",
            code="no_default_device",
        )
    if isinstance(device, int):
        for candidate in inputs:
            if candidate.index == device:
                return candidate
        raise DeviceNotFound(
            f"No input device with index {device}. Call list_audio_devices for the current ids "
            "(ids are stable; indexes change when devices are added or removed)."
        )
    return _by_name(inputs, device)


CPAL_HOSTS = {
    "alsa": "alsa",
    "coreaudio": "core audio",
    "wasapi": "windows wasapi",
    "asio": "asio",
    "jack": "jack audio connection kit",
}
"""The Node edition's ids start with cpal's host name; PortAudio names the same host APIs so."""


def _by_name(inputs: list[InputDevice], wanted: str) -> InputDevice:
    """A string device: our id, a Node-edition id (`alsa:vmic`, host API matched case-insensitively),
    the device's name, or a part of its name or id that only one device has."""
    text = wanted.strip().casefold()
    rules = (
        lambda d: d.id == wanted,
        lambda d: d.id.casefold() == text or _node_id_matches(d, text),
        lambda d: d.name.casefold() == text,
        lambda d: text in d.name.casefold() or text in d.id.casefold(),
    )
    for rule in rules:
        found = [d for d in inputs if rule(d)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            ids = ", ".join(repr(d.id) for d in found[:6])
            raise DeviceNotFound(
                f"Device {wanted!r} matches {len(found)} input devices ({ids}). Pass one of these ids.",
                code="device_ambiguous",
            )
    raise DeviceNotFound(
        f"No input device matches {wanted!r} (by id, name or part of a name). Call list_audio_devices "
        "for the current ids (ids are stable; indexes change when devices are added or removed)."
    )


def _node_id_matches(device: InputDevice, text: str) -> bool:
    """`alsa:vmic` (cpal host name, device name) against `ALSA:vmic` (PortAudio host API name)."""
    host, sep, name = text.partition(":")
    if not sep:
        return False
    api, _, own_name = device.id.casefold().partition(":")
    return CPAL_HOSTS.get(host, host) == api and name == own_name.split("#", 1)[0]
