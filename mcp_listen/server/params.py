"""What is wrong with a request's params, in words: the SDK's own answer names nothing.

mcp 2.3 answers every params validation failure with the bare "Invalid request parameters"
(mcp/shared/jsonrpc_dispatcher.py, `handler_exception_to_error_data`), so a client that sent
`arguments: "x"` or a null progress token cannot tell which field to fix. server/app.py's
middleware words the failure here instead: the field, what it must be, the value sent.

mcp-free (server/app.py hands in pydantic's error list), so the wording is tested on its own.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

SHOWN_CHARS = 60
"""The most of a refused value an error quotes: enough to recognise it, never a whole prompt."""
MAX_PROBLEMS = 3
"""The most fields one error message names; the client fixes those and sends again."""
BAD_TOKEN = (
    "Invalid params for {method}: _meta.progressToken must be a string or a number, got {value}. Send a string "
    "or a number, or leave progressToken out for no progress notifications."
)
MUST_BE = {
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "list_type": "must be an array",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "int_parsing": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "literal_error": "must be one of the values the specification lists",
    "missing": "is required",
    "extra_forbidden": "is not a field of this request",
}
"""pydantic's error types as the wire's JSON words."""


def shown(value: Any) -> str:
    """A value as the client wrote it (JSON), cut to SHOWN_CHARS."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def token_problem(method: str, params: Mapping[str, Any] | None) -> tuple[str | None, bool]:
    """(the error for a progress token MCP does not allow, else None; whether to drop the token).

    MCP's ProgressToken is `string | number`. The SDK types it `str | int` and refuses a whole
    call whose token is 1.5, a legal token, and sends no progress for any JSON float (its
    dispatcher matches `str() | int()`): a float token is dropped, and the call goes ahead
    without progress, which a receiver need not send. null, a boolean, an object or an array
    is no token at all, and is named.
    """
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    if not isinstance(meta, Mapping) or "progressToken" not in meta:
        return None, False
    token = meta["progressToken"]
    if isinstance(token, bool) or not isinstance(token, (str, int, float)):
        return BAD_TOKEN.format(method=method, value=shown(token)), False
    if isinstance(token, float):
        log.info("%s: progress token %s is a float; the call goes ahead without progress notifications", method, token)
        return None, True
    return None, False


def without_token(params: Mapping[str, Any]) -> dict[str, Any]:
    """`params` with `_meta.progressToken` taken out (token_problem said to drop it)."""
    meta = {key: value for key, value in params["_meta"].items() if key != "progressToken"}
    return {**params, "_meta": meta}


def problem(method: str, errors: Sequence[Mapping[str, Any]], params: Mapping[str, Any] | None) -> str:
    """The message for a params validation failure: each field named with what it must be and
    the value sent (pydantic's `errors()`, whose `loc` starts at the request's `params`)."""
    said: dict[str, str] = {}
    for error in errors:
        path, value = _walk(params, _inside_params(error.get("loc", ())))
        kind = error.get("type", "")
        if kind == "missing":
            path = ".".join(str(part) for part in _inside_params(error.get("loc", ())))
        words = MUST_BE.get(kind) or f"is invalid ({error.get('msg', 'no reason given')})"
        if path in said:
            continue  # one field, checked against each member of a union: named once
        said[path] = f"{path or 'params'} {words}" + ("" if kind == "missing" else f", got {shown(value)}")
    named = list(said.values())[:MAX_PROBLEMS] or ["they do not match the request's schema"]
    fix = "them" if len(named) > 1 else "it"
    return f"Invalid params for {method}: {'; '.join(named)}. Fix {fix} and send the request again."


def _inside_params(loc: Sequence[Any]) -> list[Any]:
    parts = list(loc)
    return parts[1:] if parts[:1] == ["params"] else parts


def _walk(params: Any, loc: Sequence[Any]) -> tuple[str, Any]:
    """(the dotted path of the deepest part of `loc` the params hold, its value):
    a union's member names (`str`, `int`) that pydantic adds to `loc` are not in the params."""
    value, taken = params, []
    for part in loc:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
            value = value[part]
        else:
            break
        taken.append(str(part))
    return ".".join(taken), value
