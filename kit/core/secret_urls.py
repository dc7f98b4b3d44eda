"""URLs as the kit records them: never with credentials.

Whenever a URL is recorded (manifest, log, error message, bundle), `redact_url` is applied first:
- userinfo (`user:password@`) is dropped; scheme, host, port and path are kept;
- the value of every secret-looking query parameter is replaced by `[REDACTED]` (the parameter's name
  stays, so a reader knows one was passed); other parameters are kept as written; a fragment of
  `name=value` pairs (`#access_token=...`) is treated the same way.

A query parameter looks secret when its name, lower-cased with `-` read as `_`, is in
SECRET_QUERY_PARAMS or has one of SECRET_PARAM_WORDS as one of its `_`-separated words (`x-api-key`,
`client_secret`, `hf_token`). The engine clients still connect with the full URL (`connection_parts`).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote_plus, urlsplit, urlunsplit

REDACTED = "[REDACTED]"
SECRET_QUERY_PARAMS = frozenset({
    "api_key", "apikey", "key", "token", "access_token", "refresh_token", "id_token", "auth", "auth_token",
    "authorization", "secret", "client_secret", "password", "passwd", "pwd", "pass", "sig", "signature",
    "credential", "credentials", "session", "sessionid", "x_amz_signature", "x_amz_credential",
    "x_amz_security_token", "x_goog_signature", "x_goog_credential"})
SECRET_PARAM_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "pwd", "auth",
                                "sig", "signature", "credential", "credentials"})
URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>()\[\]{}]+")


def secret_param(name: str) -> bool:
    """True for a query parameter whose value must never be recorded (see the module docstring)."""
    normal = name.strip().lower().replace("-", "_")
    return normal in SECRET_QUERY_PARAMS or any(word in SECRET_PARAM_WORDS for word in normal.split("_"))


def redact_url(url: str) -> str:
    """`url` without userinfo and with the values of secret-looking query parameters replaced by
    [REDACTED]; anything that does not parse as a URL with a host comes back unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.scheme or not parts.netloc:
        return url
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, _redact_pairs(parts.query), _redact_pairs(parts.fragment)))


def _redact_pairs(text: str) -> str:
    """A query (or an OAuth-style `#access_token=...` fragment) with secret-named values redacted."""
    return "&".join(_redact_pair(pair) for pair in text.split("&")) if text else ""


def _redact_pair(pair: str) -> str:
    name, sep, _ = pair.partition("=")
    return f"{name}={REDACTED}" if sep and secret_param(unquote_plus(name)) else pair


def redact_urls_in(text: str) -> str:
    """`text` with every URL in it redacted (error messages and log lines that echo a URL)."""
    return URL_IN_TEXT.sub(lambda match: redact_url(match.group(0)), text)


def connection_parts(url: str, strip_suffix: str = "") -> tuple[str, list[tuple[str, str]], str]:
    """(URL to connect to without its query, trailing '/' and `strip_suffix` removed; its query
    parameters, to send with every request; the same URL as it may be recorded)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/").removesuffix(strip_suffix).rstrip("/") if strip_suffix else parts.path.rstrip("/")
    base = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    params = parse_qsl(parts.query, keep_blank_values=True)
    shown = redact_url(urlunsplit((parts.scheme, parts.netloc, path, parts.query, "")))
    return base, params, shown
