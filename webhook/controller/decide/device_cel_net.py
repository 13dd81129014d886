"""Kubernetes' IP and CIDR libraries of CEL (k8s.io/apiserver/pkg/cel/library ip.go, cidr.go), for device
selectors: a network driver publishes addresses as attributes (`cidr("10.0.0.0/8").containsIP(...)`).
Addresses parse as Go's net/netip does, less what the library refuses: a zone (`fe80::1%eth0`) and an
IPv4-mapped IPv6 address (`::ffff:1.2.3.4`); no leading zero in an IPv4 octet or a prefix length."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from celpy import celtypes

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_BITS = re.compile(r"0|[1-9][0-9]{0,2}")  # netip.ParsePrefix: decimal, no leading zero


class IP:
    """An IP address in CEL: equal by value, shown in its canonical form (netip.Addr.String)."""

    def __init__(self, address: Address) -> None:
        self.address = address

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IP) and self.address == other.address

    def __hash__(self) -> int:
        return hash(self.address)

    def __str__(self) -> str:
        return str(self.address)


class CIDR:
    """A prefix in CEL: its address as written (host bits and all) and its length (netip.Prefix)."""

    def __init__(self, address: Address, bits: int) -> None:
        self.address, self.bits = address, bits

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network(f"{self.address}/{self.bits}", strict=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CIDR) and (self.address, self.bits) == (other.address, other.bits)

    def __hash__(self) -> int:
        return hash((self.address, self.bits))

    def __str__(self) -> str:
        return f"{self.address}/{self.bits}"


def _address(raw: object) -> Address:
    text = str(raw) if isinstance(raw, str) else None
    if text is None:
        raise TypeError(f"no such overload: {type(raw).__name__} is not a string")
    if "%" in text:
        raise ValueError(f"IP address {text!r} with zone value is not allowed")
    try:
        address = ipaddress.ip_address(text)
    except ValueError as error:
        raise ValueError(f"IP Address {text!r} parse error during conversion from string: {error}") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise ValueError(f"IPv4-mapped IPv6 address {text!r} is not allowed")
    return address


def _ip(value: object) -> IP:
    """`ip(string)`, and a CIDR's `.ip()`: its address."""
    if isinstance(value, CIDR):
        return IP(value.address)
    return IP(_address(value))


def _cidr(value: object) -> CIDR:
    if isinstance(value, CIDR):
        return value
    text = str(value) if isinstance(value, str) else ""
    address, slash, bits = text.partition("/")
    if not slash or not _BITS.fullmatch(bits):
        raise ValueError(f"network address parse error during conversion from string: {text!r}")
    parsed = _address(address)
    if int(bits) > parsed.max_prefixlen:
        raise ValueError(f"network address parse error during conversion from string: {text!r}")
    return CIDR(parsed, int(bits))


def _valid(parse: Any, value: object) -> celtypes.BoolType:
    try:
        parse(value)
    except (TypeError, ValueError):
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _of(value: object) -> Address:
    if not isinstance(value, IP):
        raise TypeError(f"no such overload: {type(value).__name__} is not an IP address")
    return value.address


def _link_local_multicast(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv4Address):
        return address in ipaddress.IPv4Network("224.0.0.0/24")
    return (int(address) >> 112) & 0xFF0F == 0xFF02  # netip: ff02::/16, any flags


def _global_unicast(address: Address) -> bool:
    """netip.Addr.IsGlobalUnicast: private addresses are global unicast too."""
    if isinstance(address, ipaddress.IPv4Address) and int(address) in (0, 0xFFFFFFFF):
        return False
    return not (address.is_unspecified or address.is_loopback or address.is_multicast or address.is_link_local)


def _contains_ip(cidr: object, other: object) -> celtypes.BoolType:
    address = other.address if isinstance(other, IP) else _address(other)
    network = _cidr(cidr).network
    return celtypes.BoolType(address.version == network.version and address in network)


def _contains_cidr(cidr: object, other: object) -> celtypes.BoolType:
    outer, inner = _cidr(cidr), _cidr(other)
    if outer.address.version != inner.address.version:
        return celtypes.BoolType(False)
    return celtypes.BoolType(outer.network.overlaps(inner.network) and outer.bits <= inner.bits)


FUNCTIONS: dict[str, Any] = {
    "ip": _ip,
    "isIP": lambda value: _valid(_address, value),
    "ip.isCanonical": lambda value: celtypes.BoolType(str(_address(value)) == str(value)),
    "family": lambda ip: celtypes.IntType(_of(ip).version),
    "isUnspecified": lambda ip: celtypes.BoolType(_of(ip).is_unspecified),
    "isLoopback": lambda ip: celtypes.BoolType(_of(ip).is_loopback),
    "isLinkLocalMulticast": lambda ip: celtypes.BoolType(_link_local_multicast(_of(ip))),
    "isLinkLocalUnicast": lambda ip: celtypes.BoolType(_of(ip).is_link_local),
    "isGlobalUnicast": lambda ip: celtypes.BoolType(_global_unicast(_of(ip))),
    "cidr": _cidr,
    "isCIDR": lambda value: _valid(_cidr, value),
    "containsIP": _contains_ip,
    "containsCIDR": _contains_cidr,
    "prefixLength": lambda cidr: celtypes.IntType(_cidr(cidr).bits),
    "masked": lambda cidr: CIDR(_cidr(cidr).network.network_address, _cidr(cidr).bits),
}
