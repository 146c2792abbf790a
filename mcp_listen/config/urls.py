"""The Ollama address as Ollama itself accepts it, and URLs as they may be shown: credentials
never reach a message or a log."""

from __future__ import annotations

from urllib.parse import quote

DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
USERINFO_SAFE = ":%!$&'()*+,;=-._~"
"""What `user:password@` keeps unencoded in a URL (RFC 3986 userinfo); `%` keeps what is encoded already."""


def normalize_ollama_host(raw: str) -> str:
    """Accept the forms Ollama accepts: `host`, `host:port`, `:port`, or a URL.

    `user:password@` before the host is kept (ollama/http.py sends it as HTTP basic auth, for an Ollama
    behind a reverse proxy); show the result to people only through `redact_url`.
    """
    host = raw.strip()
    if not host:
        return DEFAULT_OLLAMA_HOST
    scheme = "http"
    if "://" in host:
        scheme, host = host.split("://", 1)
        if scheme not in ("http", "https"):
            raise ValueError(raw)
    if any(c in host for c in "?# \t"):
        raise ValueError(raw)
    userinfo, at, host = host.rpartition("@")  # first: a password may hold an unencoded "/"
    host, _, path = host.partition("/")
    if host.startswith(":"):
        host = "127.0.0.1" + host
    if host.startswith("["):
        has_port = "]:" in host
    else:
        has_port = ":" in host
    if not has_port:
        host += ":443" if scheme == "https" and "://" in raw else ":11434"
    name, _, port = host.rpartition(":")
    if not name or not port.isdigit() or not (0 < int(port) < 65536):
        raise ValueError(raw)
    if name == "0.0.0.0":
        name = "127.0.0.1"
    credentials = f"{quote(userinfo, safe=USERINFO_SAFE)}@" if at else ""  # "/" and "@" encoded, as URLs need
    return f"{scheme}://{credentials}{name}:{port}" + (f"/{path}".rstrip("/") if path else "")


def split_credentials(url: str) -> tuple[str, str | None]:
    """`url` without its `user:password@`, and that userinfo as written (None when there is none).

    The userinfo ends at the URL's last "@", as `redact_url` and `normalize_ollama_host` read it: a
    password may hold an unencoded "/" (`https://kim:pa/ss@host/x`), which a URL parser would take for
    the start of the path, the rest of the password for the host. An "@" in a path is written `%40`.
    """
    scheme, sep, rest = url.partition("://")
    rest = rest if sep else url
    userinfo, at, rest = rest.rpartition("@")
    if not at:
        return url, None
    return (f"{scheme}{sep}{rest}" if sep else rest), userinfo


def redact_url(url: str) -> str:
    """`url` as it may appear in a message or a log: `user:password@` replaced by `***@`.

    OLLAMA_HOST may hold credentials; an error result travels to the calling model and into its
    transcript, and logs get copied into bug reports, so neither may carry them.
    """
    bare, userinfo = split_credentials(url)
    if userinfo is None:
        return url
    scheme, sep, rest = bare.partition("://")
    return f"{scheme}{sep}***@{rest}" if sep else f"***@{bare}"
