"""Kubernetes' URL library of CEL (k8s.io/apiserver/pkg/cel/library/urls.go): `url(s)`, `isURL(s)`,
`getScheme`, `getHost`, `getHostname`, `getPort`, `getEscapedPath`, `getQuery`.

A URL is read as Go's net/url reads it (Go 1.26 net/url/url.go, gen_encoding_table.go), since that is
what kube-scheduler runs: `url(s)` and `isURL(s)` accept what `url.ParseRequestURI` accepts (an absolute
URI or an absolute path, no control characters, valid escapes, a numeric port, an IPv6 literal netip
parses), and `url(s)` keeps what `url.Parse` then makes of it (the fragment cut off). A host with two
colons is refused under http and https (urlstrictcolons, on for Kubernetes' go 1.26 module). Go strings
are bytes: the text is read byte by byte (latin-1 over its UTF-8), and made text again with any byte
that is not UTF-8 kept as a surrogate escape.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from celpy import celtypes

from webhook.controller.decide.device_cel_format import go_quote

PATH, PATH_SEGMENT, HOST, ZONE, USER_PASSWORD, QUERY_COMPONENT, FRAGMENT = range(7)
ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
HEX = frozenset("0123456789abcdefABCDEF")
HOST_EXTRA = frozenset("!$&'()*+,;=:[]<>\"")
RESERVED = frozenset("$&+,/:;=?@")
USERINFO = ALNUM | frozenset("-._:~!$&'()*+,;=%@")
VALID_ENCODED = frozenset("!$&'()*+,;=:@[]%")
MAX_QUERY_PARAMETERS = 10000  # url.go defaultMaxParams (urlmaxqueryparams)


def _escaped(char: str, mode: int) -> bool:
    """gen_encoding_table.go shouldEscape: whether a byte must be escaped in that part of a URL."""
    if char in ALNUM:
        return False
    if mode in (HOST, ZONE) and char in HOST_EXTRA:
        return False
    if char in "-_.~":
        return False
    if char in RESERVED:
        return {
            PATH: char == "?",
            PATH_SEGMENT: char in "/;,?",
            USER_PASSWORD: char in "@/?:",
            QUERY_COMPONENT: True,
            FRAGMENT: False,
        }.get(mode, True)
    return not (mode == FRAGMENT and char in "!()*")


def _unescape(text: str, mode: int) -> str:
    """url.go unescape: %XX decoded (a bad escape is an error), `+` a space in a query component."""
    at = 0
    while at < len(text):
        char = text[at]
        if char == "%":
            if at + 2 >= len(text) or text[at + 1] not in HEX or text[at + 2] not in HEX:
                raise ValueError(f"invalid URL escape {go_quote(_as_text(text[at : at + 3]))}")
            value = int(text[at + 1 : at + 3], 16)
            if mode == HOST and value < 0x80 and text[at : at + 3] != "%25" and int(text[at + 1], 16) < 8:
                raise ValueError(f"invalid URL escape {go_quote(_as_text(text[at : at + 3]))}")
            if mode == ZONE and text[at : at + 3] != "%25" and value != 0x20 and _escaped(chr(value), HOST):
                raise ValueError(f"invalid URL escape {go_quote(_as_text(text[at : at + 3]))}")
            at += 3
        else:
            if mode in (HOST, ZONE) and ord(char) < 0x80 and _escaped(char, mode):
                raise ValueError(f"invalid character {go_quote(_as_text(char))} in host name")
            at += 1
    out, at = [], 0
    while at < len(text):
        if text[at] == "%":
            out.append(chr(int(text[at + 1 : at + 3], 16)))
            at += 3
        else:
            out.append(" " if text[at] == "+" and mode == QUERY_COMPONENT else text[at])
            at += 1
    return "".join(out)


def _escape(text: str, mode: int) -> str:
    return "".join(f"%{ord(c):02X}" if _escaped(c, mode) else c for c in text)


def _valid_port(port: str) -> bool:
    return port == "" or (port[0] == ":" and all("0" <= c <= "9" for c in port[1:]))


def _host(scheme: str, host: str) -> str:
    """url.go parseHost."""
    bracket = host.rfind("[")
    if bracket > 0:
        raise ValueError("invalid IP-literal")
    if bracket == 0:
        close = host.rfind("]")
        if close < 0:
            raise ValueError("missing ']' in host")
        port = host[close + 1 :]
        if not _valid_port(port):
            raise ValueError(f"invalid port {go_quote(_as_text(port))} after host")
        name = host[1:close]
        zone = name.find("%25")
        plain = _unescape(name, HOST) if zone < 0 else _unescape(name[:zone], HOST) + _unescape(name[zone:], ZONE)
        try:
            address = ipaddress.ip_address(_as_text(plain))
        except ValueError as error:
            raise ValueError(f"invalid host: {error}") from None
        if isinstance(address, ipaddress.IPv4Address):
            raise ValueError("invalid IP-literal")
        return "[" + plain + "]" + _unescape(port, HOST)
    colon = host.find(":")
    if colon >= 0:
        last = host.rfind(":")
        if last != colon and scheme not in ("http", "https"):
            colon = last
        if not _valid_port(host[colon:]):
            raise ValueError(f"invalid port {go_quote(_as_text(host[colon:]))} after host")
    return _unescape(host, HOST)


@dataclass(frozen=True)
class URL:
    scheme: str = ""
    host: str = ""
    path: str = ""
    raw_path: str = ""
    raw_query: str = ""


def _scheme(raw: str) -> tuple[str, str]:
    """url.go getScheme."""
    for at, char in enumerate(raw):
        if char.isascii() and char.isalpha():
            continue
        if char.isascii() and (char.isdigit() or char in "+-."):
            if at == 0:
                return "", raw
            continue
        if char == ":":
            if at == 0:
                raise ValueError("missing protocol scheme")
            return raw[:at], raw[at + 1 :]
        return "", raw
    return "", raw


def _parse(raw: str, via_request: bool) -> URL:
    """url.go parse: `raw` is a byte string (one character a byte)."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise ValueError("net/url: invalid control character in URL")
    if raw == "" and via_request:
        raise ValueError("empty url")
    if raw == "*":
        return URL(path="*")
    scheme, rest = _scheme(raw)
    scheme = scheme.lower()
    query = ""
    if rest.endswith("?") and rest.count("?") == 1:
        rest = rest[:-1]
    else:
        rest, _, query = rest.partition("?")
    if not rest.startswith("/"):
        if scheme:
            return URL(scheme=scheme, raw_query=query)  # opaque
        if via_request:
            raise ValueError("invalid URI for request")
        if ":" in rest.partition("/")[0]:
            raise ValueError("first path segment in URL cannot contain colon")
    host = ""
    if (scheme or (not via_request and not rest.startswith("///"))) and rest.startswith("//"):
        authority, slash, tail = rest[2:].partition("/")
        rest = slash + tail
        at = authority.rfind("@")
        host = _host(scheme, authority[at + 1 :])
        userinfo = authority[:at] if at >= 0 else ""
        if any(c not in USERINFO for c in userinfo):
            raise ValueError("net/url: invalid userinfo")
        for part in userinfo.split(":", 1) if at >= 0 else ():
            _unescape(part, USER_PASSWORD)
    path = _unescape(rest, PATH)
    return URL(scheme, host, path, "" if _escape(path, PATH) == rest else rest, query)


def _bytes(text: object) -> str:
    if not isinstance(text, str):
        raise TypeError(f"no such overload: {type(text).__name__} is not a string")
    return str(text).encode("utf-8", "surrogateescape").decode("latin-1")


def _as_text(raw: str) -> str:
    return raw.encode("latin-1").decode("utf-8", "surrogateescape")


def _url(text: object) -> URL:
    """`url(s)`: ParseRequestURI to check it, Parse to read it (urls.go stringToUrl)."""
    raw = _bytes(text)
    try:
        _parse(raw, via_request=True)
        before, _, fragment = raw.partition("#")
        _unescape(fragment, FRAGMENT)
        return _parse(before, via_request=False)
    except ValueError as error:
        raise ValueError(
            f"URL parse error during conversion from string: parse {go_quote(_as_text(raw))}: {error}"
        ) from None


def request_uri_error(text: str) -> str | None:
    """What url.ParseRequestURI says of `text` (None: it parses): the format library's `uri`."""
    raw = _bytes(celtypes.StringType(text))
    try:
        _parse(raw, via_request=True)
    except ValueError as error:
        return f"parse {go_quote(text)}: {error}"
    return None


def _is_url(text: object) -> celtypes.BoolType:
    _bytes(text)
    return celtypes.BoolType(request_uri_error(str(text)) is None)


def _of(value: object) -> URL:
    if not isinstance(value, URL):
        raise TypeError(f"no such overload: {type(value).__name__} is not a URL")
    return value


def _split_host_port(host: str) -> tuple[str, str]:
    """url.go splitHostPort: a numeric port after the last colon; an IPv6 literal's brackets dropped."""
    port = ""
    colon = host.rfind(":")
    if colon >= 0 and _valid_port(host[colon:]):
        host, port = host[:colon], host[colon + 1 :]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def _escaped_path(url: URL) -> str:
    """url.go EscapedPath: the path as written when that is a valid encoding of it."""
    if url.raw_path and all(c in VALID_ENCODED or not _escaped(c, PATH) for c in url.raw_path):
        try:
            if _unescape(url.raw_path, PATH) == url.path:
                return url.raw_path
        except ValueError:
            pass
    return "*" if url.path == "*" else _escape(url.path, PATH)


def _query(url: URL) -> celtypes.MapType:
    """url.go parseQuery: `&`-separated key=value pairs, a bad one skipped; over 10,000 none at all."""
    values: dict[str, list[str]] = {}
    if url.raw_query.count("&") + 1 <= MAX_QUERY_PARAMETERS:
        for pair in url.raw_query.split("&") if url.raw_query else ():
            if ";" in pair or not pair:
                continue
            key, _, value = pair.partition("=")
            try:
                key, value = _unescape(key, QUERY_COMPONENT), _unescape(value, QUERY_COMPONENT)
            except ValueError:
                continue
            values.setdefault(key, []).append(value)
    return celtypes.MapType(
        {
            celtypes.StringType(_as_text(k)): celtypes.ListType([celtypes.StringType(_as_text(v)) for v in vs])
            for k, vs in values.items()
        }
    )


def _text(made: str) -> celtypes.StringType:
    return celtypes.StringType(_as_text(made))


FUNCTIONS: dict[str, Any] = {
    "url": _url,
    "isURL": _is_url,
    "getScheme": lambda u: _text(_of(u).scheme),
    "getHost": lambda u: _text(_of(u).host),
    "getHostname": lambda u: _text(_split_host_port(_of(u).host)[0]),
    "getPort": lambda u: _text(_split_host_port(_of(u).host)[1]),
    "getEscapedPath": lambda u: _text(_escaped_path(_of(u))),
    "getQuery": lambda u: _query(_of(u)),
}
