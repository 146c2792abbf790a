"""A broken bundled Silero model is a named capture error, never "Internal error" (pure: no model is loaded)."""

from __future__ import annotations

import pytest

from mcp_listen.errors import ListenError
from mcp_listen.speech import vad


def test_a_missing_bundled_model_is_a_named_error(monkeypatch, tmp_path):
    monkeypatch.setattr(vad, "model_folder", lambda: tmp_path)
    with pytest.raises(ListenError) as caught:
        vad.read_model_bytes()
    assert (caught.value.code, caught.value.stage) == ("vad_unavailable", "capture")
    assert "reinstall mcp-listen" in caught.value.message


def test_a_model_with_another_interface_is_a_named_error():
    class Arg:
        def __init__(self, name: str, type: str, shape: list[int]) -> None:
            self.name, self.type, self.shape = name, type, shape

    with pytest.raises(ListenError) as caught:
        vad.check_interface([Arg("x", "tensor(float)", [1, 576])], [Arg("y", "tensor(float)", [1, 1])])
    assert caught.value.code == "vad_unavailable"
