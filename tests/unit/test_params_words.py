"""server/params.py: the words for invalid params, against pydantic's real errors for real requests."""

from __future__ import annotations

import mcp_types as types
import pytest
from mcp_types import methods
from pydantic import ValidationError

from mcp_listen.server import params
from mcp_listen.server.app import MESSAGE_KINDS
from mcp_listen.server.ledger import Ledger


def _errors(method: str, version: str, body: dict) -> list:
    with pytest.raises(ValidationError) as caught:
        methods.validate_client_request(method, version, body)
    return caught.value.errors(include_url=False)


def test_a_union_failure_names_the_field_once_with_the_value():
    body = {"name": "get_status", "arguments": {}, "_meta": {"progressToken": 1.5}}
    words = params.problem("tools/call", _errors("tools/call", "2025-11-25", body), body)
    assert words.count("_meta.progressToken") == 1, words
    assert "got 1.5" in words and words.startswith("Invalid params for tools/call: "), words


def test_a_missing_field_is_required_and_a_long_value_is_cut():
    body: dict = {}
    assert "name is required" in params.problem("tools/call", _errors("tools/call", "2025-11-25", body), body)
    body = {"name": "x" * 1000, "arguments": ["y" * 1000]}
    words = params.problem("tools/call", _errors("tools/call", "2025-11-25", body), body)
    assert "arguments must be an object" in words and len(words) < 300, words


@pytest.mark.parametrize(("token", "refused", "dropped"), [(None, True, False), (True, True, False), ({}, True, False),
                         (1.5, False, True), (2.0, False, True), ("a", False, False), (3, False, False)])  # fmt: skip
def test_progress_tokens_as_mcp_types_them(token, refused, dropped):
    body = {"name": "get_status", "_meta": {"progressToken": token, "other": 1}}
    error, drop = params.token_problem("tools/call", body)
    assert (error is not None, drop) == (refused, dropped), error
    if drop:
        assert params.without_token(body)["_meta"] == {"other": 1}


def _request(method: str, meta: dict | None = None) -> object:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": meta} if meta is not None else {}}
    return type("Item", (), {"message": types.JSONRPCRequest.model_validate(body)})()


@pytest.mark.parametrize(("first", "era", "gated"), [
    (("tools/list", {types.PROTOCOL_VERSION_META_KEY: "2026-07-28"}), "2026-07-28", False),
    (("initialize", {types.PROTOCOL_VERSION_META_KEY: "2026-07-28"}), "2025", False),
    (("tools/list", {"progressToken": 1}), "2025", True),
])  # fmt: skip
def test_the_ledger_tells_the_era_by_the_first_request_as_the_sdk_does(first, era, gated):
    """Only a 2025 connection before initialize has its invalid-params errors reworded to
    "Not initialized": the 2026-07-28 era has no initialize to send."""
    ledger = Ledger(on_eof=lambda: None, kinds=MESSAGE_KINDS)
    ledger.inbound(_request(*first))
    ledger.inbound(_request("tools/call"))
    assert ledger.era == era
    assert bool(ledger.early) == gated, ledger.early
