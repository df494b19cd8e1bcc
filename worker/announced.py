"""What a downstream's answer announces of its rate limit: the quota left, the quota, its window
and when it resets, and for a 429 the kind of limit it hit (docs/worker.md, "Rate-limit
headers").

Read from the header fields an answer carries, only those present:

- IETF draft "RateLimit header fields for HTTP" -08 and later: ``RateLimit-Policy:
  "name";q=<quota>;w=<window>`` and ``RateLimit: "name";r=<remaining>;t=<reset>`` (structured
  field lists; an answer may name several policies: the one with the least remaining counts);
- the earlier drafts' ``RateLimit-Limit`` / ``RateLimit-Remaining`` / ``RateLimit-Reset`` (the
  window from a ``;w=`` parameter of the limit or of an unnamed ``RateLimit-Policy``, when given);
- ``X-RateLimit-Limit`` / ``X-RateLimit-Remaining`` / ``X-RateLimit-Reset`` (no window);
- on a 429, Stripe's ``Stripe-Rate-Limited-Reason`` names the kind of limit hit, and Twilio's
  ``Twilio-Concurrent-Requests`` (the account's requests in progress, sent by an API whose limit
  is on concurrency) makes it a concurrency-kind 429.

One style per answer, in that order of preference (an API sending several sends one limit).
Every answer is read for its least remaining quota (``least_remaining``); the whole limit is
read only for the answer a tally keeps (``limit``).

A reset is seconds to wait, except that a value above ``EPOCH_SECONDS`` is an instant in epoch
seconds (GitHub's ``X-RateLimit-Reset``) and one above ``EPOCH_MILLISECONDS`` in epoch
milliseconds. A value that is not a finite non-negative number is ignored, with whatever needs it
(a remaining quota without a number is no announcement): malformed headers are skipped, counted
nowhere, and never raise.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from operator import attrgetter
from typing import Any, Final, NamedTuple, cast

# The kinds of limit a 429 may name.
CONCURRENCY: Final = "concurrency"
RATE: Final = "rate"

# A reset above this is an instant, not seconds to wait (2001-09-09 in epoch seconds; nobody
# announces a wait of 31 years).
EPOCH_SECONDS: Final = 1e9
EPOCH_MILLISECONDS: Final = 1e12

STRIPE_KINDS: Final = {
    "global-concurrency": CONCURRENCY,
    "endpoint-concurrency": CONCURRENCY,
    "global-rate": RATE,
    "endpoint-rate": RATE,
    "resource-specific": RATE,
}

# The fields read, by lowercase name.
_POLICY: Final = "ratelimit-policy"
_RATELIMIT: Final = "ratelimit"
_LEGACY: Final = ("ratelimit-limit", "ratelimit-remaining", "ratelimit-reset")
_X: Final = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")
_STRIPE: Final = "stripe-rate-limited-reason"
_TWILIO: Final = "twilio-concurrent-requests"
_FIELDS: Final = frozenset((_POLICY, _RATELIMIT, *_LEGACY, *_X, _STRIPE, _TWILIO))
# Header names as sent, each with the field it spells (None: not a rate-limit field): every
# header of every answer is looked up here. Forgotten all at once when this many.
_NAMES_HELD: Final = 1024
_names: dict[str | bytes, str | None] = {}


class Limit(NamedTuple):
    """One announced limit: ``reset_at`` in epoch seconds; None where not announced."""

    remaining: float
    quota: float | None
    window_s: float | None
    reset_at: float | None


# An answer's rate-limit fields by lowercase name (``fields``).
Fields = dict[str, str]


def fields(headers: Iterable[tuple[str | bytes, str | bytes]]) -> Fields | None:
    """The rate-limit fields among an answer's headers, as str or as raw bytes (httpx's); None
    when it has none (most answers of most APIs: this is all they cost)."""
    found: Fields | None = None
    for name, value in headers:
        try:
            field = _names[name]
        except KeyError:
            field = _field_name(name)
        if field is not None:
            if found is None:
                found = {}
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            # A field sent twice is one list (RFC 9110, 5.3).
            found[field] = f"{found[field]}, {text}" if field in found else text
    return found


def _field_name(name: str | bytes) -> str | None:
    """The rate-limit field a header name spells (any case), or None; remembered, since an API
    sends the same names on every answer."""
    lowered = (name.decode("latin-1") if isinstance(name, bytes) else name).lower()
    field = lowered if lowered in _FIELDS else None
    if len(_names) >= _NAMES_HELD:
        _names.clear()
    _names[name] = field
    return field


def least_remaining(headers: Any) -> float | None:
    """The least remaining quota an answer announces (None: none, or no rate-limit field:
    most answers of most APIs). What every answer is read for, by its type's reader
    (``remaining_reader``: httpx's hook reads its answers as they come, the fold the
    others'); the rest of its limit (``limit``) is read
    only for the answer a tally keeps, and the kind of limit only for a 429 (``limit_kind``).

    One style per answer (an API sending several sends the same limit in each): the draft -08
    fields when present, else the earlier draft's, else X-RateLimit; the remaining quota of a
    ``RateLimit`` field is read from the fields read lately (``_least_by_field``).
    """
    return remaining_reader(headers)(headers)


def remaining_reader(headers: Any) -> Callable[[Any], float | None]:
    """``least_remaining`` for headers of ``headers``' type: the client's own object
    (``header_pairs``), read the cheapest way its type allows, chosen once per type."""
    try:
        return _remaining_readers[type(headers)]
    except KeyError:
        found = _remaining_readers[type(headers)] = _remaining_reader(headers)
        return found


def _remaining_reader(headers: Any) -> Callable[[Any], float | None]:
    """How ``least_remaining`` reads headers of ``headers``' type."""
    if _is_urllib3_headers(headers):
        return _remaining_in_lowercase_dict
    entries = _entries_of(headers)
    if entries == (_HTTPX_ENTRIES, 1):
        return _remaining_in_httpx_entries
    return partial(_remaining_in_entries, *entries)


def _remaining_in_lowercase_dict(headers: Any) -> float | None:
    """urllib3's headers: a dict by lowercase name of [name as sent, value, ...]. An answer
    without a rate-limit field costs one membership test, in C."""
    container = headers._container
    if _FIELDS.isdisjoint(container):
        return None
    entry = container.get(_RATELIMIT)
    if entry is not None:
        # Read as ``fields`` and ``limit`` read it (one list, ``_members``): never otherwise.
        text = entry[1] if len(entry) == 2 else ", ".join(entry[1:])
        try:
            return _least_by_field[text]
        except KeyError:
            return _least_in_field(text)
    # A field sent twice is one list whose first member counts, as ``fields`` reads it.
    entry = container.get(_LEGACY[1]) or container.get(_X[1])
    return None if entry is None else _first_number(entry[1])


def _remaining_in_httpx_entries(headers: Any) -> float | None:
    """httpx's headers: (raw name, lowercase name, raw value) triples, each name tested once
    against the fields that say what remains. A ``RateLimit`` field's least remaining is
    remembered by its raw bytes (``_least_by_field``): nothing decoded or built for an answer
    that sends it once; one that sends it twice is read as any other headers are."""
    ietf = legacy = x_ratelimit = None
    for _, name, value in headers._list:
        if name in _REMAINING_BYTES:
            if name == _RATELIMIT_BYTES:
                if ietf is not None:
                    return _least_in_field_sent_twice(headers)
                ietf = value
            # A field sent twice is one list whose first member counts, as ``fields`` reads it.
            elif name == _LEGACY_REMAINING_BYTES:
                if legacy is None:
                    legacy = value
            elif x_ratelimit is None:
                x_ratelimit = value
    if ietf is not None:
        try:
            return _least_by_field[ietf]
        except KeyError:
            return _least_in_field(ietf)
    first = x_ratelimit if legacy is None else legacy
    return None if first is None else _first_number(first.decode("latin-1"))


def _remaining_in_entries(
    reader: Callable[[Any], Iterable[Sequence[str | bytes]]], name_at: int, headers: Any
) -> float | None:
    """Any other headers (http.client's ``HTTPMessage``, pairs): one pass over the entries as
    the client holds them (``reader``, the name at ``name_at``, its value next), each name
    looked up once (``_names``: names in any case)."""
    value_at = name_at + 1
    names = _names
    ietf = legacy = x_ratelimit = None
    for entry in reader(headers):
        name = entry[name_at]
        try:
            field = names[name]
        except KeyError:
            field = _field_name(name)
        if field is not None:
            if field == _RATELIMIT:
                if ietf is not None:
                    return _least_in_field_sent_twice(headers)
                ietf = entry[value_at]
            elif field == _LEGACY[1]:
                if legacy is None:
                    legacy = entry[value_at]
            elif field == _X[1] and x_ratelimit is None:
                x_ratelimit = entry[value_at]
    if ietf is not None:
        try:
            return _least_by_field[ietf]
        except KeyError:
            return _least_in_field(ietf)
    first = x_ratelimit if legacy is None else legacy
    return None if first is None else _first_number(_text(first))


def _least_in_field_sent_twice(headers: Any) -> float | None:
    """The least remaining of an answer that sends its ``RateLimit`` field more than once:
    one list (RFC 9110, 5.3), read as ``fields`` joins it, and so as ``limit`` reads it."""
    text = (fields(header_pairs(headers)) or {})[_RATELIMIT]
    try:
        return _least_by_field[text]
    except KeyError:
        return _least_in_field(text)


def limit_kind(headers: Any) -> str | None:
    """The kind of limit a 429's headers name (``CONCURRENCY`` or ``RATE``), or None."""
    found = fields(header_pairs(headers)) or {}
    reason = found.get(_STRIPE)
    if reason is not None:
        return STRIPE_KINDS.get(reason.strip().lower())
    return CONCURRENCY if _TWILIO in found else None


def _is_urllib3_headers(headers: Any) -> bool:
    """urllib3's ``HTTPHeaderDict`` (looked up only if urllib3 is loaded: headers cannot come
    from a library nobody imported)."""
    collections = sys.modules.get("urllib3._collections")
    return collections is not None and isinstance(headers, collections.HTTPHeaderDict)


_RATELIMIT_BYTES: Final = _RATELIMIT.encode()
_LEGACY_REMAINING_BYTES: Final = _LEGACY[1].encode()
_X_REMAINING_BYTES: Final = _X[1].encode()
_REMAINING_BYTES: Final = frozenset((_RATELIMIT_BYTES, _LEGACY_REMAINING_BYTES, _X_REMAINING_BYTES))
_remaining_readers: dict[type, Callable[[Any], float | None]] = {}


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _least_in_field(field: str | bytes) -> float | None:
    """The least ``r`` among a ``RateLimit`` field's members (None: none is a number; the field
    as text, or as the raw bytes httpx holds), remembered by the field as given: a pure
    function of the field's text, read for every answer, and an API's answers repeat their
    fields as its quota counts down. Forgotten all at once when ``_PARSED_HELD``, as
    ``_members``' memory is."""
    remaining = None
    for _, parameters in _members(_text(field)):
        member = _number(parameters.get("r"))
        if member is not None and (remaining is None or member < remaining):
            remaining = member
    if len(_least_by_field) >= _PARSED_HELD:
        _least_by_field.clear()
    _least_by_field[field] = remaining
    return remaining


# By the field's text, or its raw bytes (httpx's): a str and a bytes key are never equal.
_least_by_field: dict[str | bytes, float | None] = {}


def header_pairs(headers: Any) -> Iterable[tuple[str | bytes, str | bytes]]:
    """An answer's header fields as (name, value) pairs, read from the entries as the client
    holds them: http.client's ``HTTPMessage`` (its list of (name, value) as
    parsed, rather than ``items()``, which rewrites every value), urllib3's ``HTTPHeaderDict``
    (its dict by lowercase name of [name as sent, value, ...]), httpx's ``Headers`` (its
    (raw name, lowercase name, raw value) triples, rather than ``raw``, which copies the list,
    or decoding every one), or (name, value) pairs. How a client's headers are read, and
    where an entry holds its name (its value is next), is chosen once per type
    (``_entry_readers``): an answer pays one lookup for it."""
    reader, name_at = _entries_of(headers)
    return ((entry[name_at], entry[name_at + 1]) for entry in reader(headers))


def _entries_of(headers: Any) -> _EntryReader:
    """How to read the entries of ``headers``' type (``_entry_reader``), chosen once a type."""
    try:
        return _entry_readers[type(headers)]
    except KeyError:
        found = _entry_readers[type(headers)] = _entry_reader(headers)
        return found


def _entry_reader(headers: Any) -> _EntryReader:
    """How to read the entries of headers of ``headers``' type, and where an entry's name is."""
    if type(getattr(headers, "_headers", None)) is list:
        return _HTTP_CLIENT_ENTRIES, 0
    if _is_urllib3_headers(headers):
        return _urllib3_entries, 0
    listed = getattr(headers, "_list", None)
    if type(listed) is list and all(type(item) is tuple and len(item) == 3 for item in listed):
        return _HTTPX_ENTRIES, 1
    if type(getattr(headers, "raw", None)) is list:
        return _RAW_ENTRIES, 0
    if type(headers) in (list, tuple):
        return _as_given, 0
    return _items, 0


# http.client's parsed list; httpx's (raw name, lowercase name, value) triples; a raw list.
_HTTP_CLIENT_ENTRIES: Final = attrgetter("_headers")
_HTTPX_ENTRIES: Final = attrgetter("_list")
_RAW_ENTRIES: Final = attrgetter("raw")
_EntryReader = tuple[Callable[[Any], Iterable[Sequence[str | bytes]]], int]
_entry_readers: dict[type, _EntryReader] = {}


def _urllib3_entries(headers: Any) -> Iterable[Sequence[str | bytes]]:
    return ((entry[0], value) for entry in headers._container.values() for value in entry[1:])


def _as_given(headers: Any) -> Iterable[Sequence[str | bytes]]:
    return cast(Iterable[Sequence[str | bytes]], headers)


def _items(headers: Any) -> Iterable[Sequence[str | bytes]]:
    return cast(Iterable[Sequence[str | bytes]], headers.items())


def limit(headers: Any, answered_at: float) -> Limit | None:
    """The announced limit with the least remaining (None: none), in the style ``least_remaining``
    reads. ``answered_at`` is when the answer came, in epoch seconds: a reset in seconds to
    wait counts from it."""
    found = fields(header_pairs(headers))
    if found is None:
        return None
    if _RATELIMIT in found:
        candidates = _ietf(found, answered_at)
        return min(candidates, key=lambda candidate: candidate.remaining) if candidates else None
    if _LEGACY[1] in found:
        return _triple(found, _LEGACY, answered_at, _policy_windows(found))
    return _triple(found, _X, answered_at, {})


def newer(latest: Limit | None, least: Limit) -> bool:
    """Whether ``latest``, announced after ``least`` with more remaining, is the same limit in a
    later window: both announce a window, of the same length. Within one window of a limit
    its remaining only falls, so more remaining is a reset since (or a quota changed: a
    capacity drop's first answers announce the new quota with most of it left, and the least
    of a batch straddling the drop was the old window's, its quota no longer in force). Limits
    of different windows, or of none (X-RateLimit's), may be different limits: the least
    counts."""
    return latest is not None and latest.window_s is not None and latest.window_s == least.window_s


def _ietf(fields: Fields, answered_at: float) -> list[Limit]:
    """The limits of draft -08's named policies (``RateLimit`` with ``RateLimit-Policy``)."""
    ratelimit = fields.get(_RATELIMIT)
    if ratelimit is None:
        return []
    policies = {name: params for name, params in _members(fields.get(_POLICY, ""))}
    limits = []
    for name, params in _members(ratelimit):
        remaining = _number(params.get("r"))
        if remaining is None:
            continue
        policy = policies.get(name, {})
        limits.append(
            Limit(
                remaining,
                _number(policy.get("q")),
                _number(policy.get("w")),
                _instant(_number(params.get("t")), answered_at),
            )
        )
    return limits


def _policy_windows(fields: Fields) -> dict[float, float]:
    """The earlier drafts' windows by quota: ``RateLimit-Limit: 10, 10;w=1`` or an unnamed
    ``RateLimit-Policy: 10;w=1``."""
    windows: dict[float, float] = {}
    for field in (fields.get(_LEGACY[0], ""), fields.get(_POLICY, "")):
        for item, params in _members(field):
            quota, window = _number(item), _number(params.get("w"))
            if quota is not None and window is not None:
                windows.setdefault(quota, window)
    return windows


def _triple(
    found: Fields,
    names: tuple[str, str, str],
    answered_at: float,
    windows: dict[float, float],
) -> Limit | None:
    """The limit of a Limit / Remaining / Reset triple of fields (each a number, or a list
    whose first member is the one in force)."""
    limit_name, remaining_name, reset_name = names
    remaining = _first_number(found.get(remaining_name))
    if remaining is None:
        return None
    quota = _first_number(found.get(limit_name))
    return Limit(
        remaining,
        quota,
        None if quota is None else windows.get(quota),
        _instant(_first_number(found.get(reset_name)), answered_at),
    )


def _instant(reset: float | None, answered_at: float) -> float | None:
    """The epoch second a reset value names (seconds to wait, or an epoch instant)."""
    if reset is None:
        return None
    if reset > EPOCH_MILLISECONDS:
        return reset / 1000.0
    if reset > EPOCH_SECONDS:
        return reset
    return answered_at + reset


def _members(field: str) -> list[tuple[str, dict[str, str]]]:
    """A structured field list's members (RFC 8941): each item (a string's quotes removed) with
    its parameters. Lenient, and a regular expression's work rather than a scan in Python: what
    is not a member is skipped by its reader, not here. A field value seen lately is parsed once
    (a policy is the same string on every answer)."""
    members = _parsed.get(field)
    if members is None:
        members = [
            (item[1:-1] if item[:1] == '"' else item, dict(_PARAMETER.findall(parameters)))
            for item, parameters in _MEMBER.findall(field)
        ]
        if len(_parsed) >= _PARSED_HELD:
            _parsed.clear()
        _parsed[field] = members
    return members


# A member: a quoted string or a bare item, then its parameters up to the next comma.
_MEMBER: Final = re.compile(r'\s*("[^"]*"|[^\s,;]+)\s*((?:;[^,]*)?)(?:,|$)')
_PARAMETER: Final = re.compile(r";\s*([a-z*][a-z0-9_.*-]*)\s*=\s*([^;\s]*)")
# Field values parsed lately; forgotten all at once when this many (a worker calls a few APIs).
_PARSED_HELD: Final = 256
_parsed: dict[str, list[tuple[str, dict[str, str]]]] = {}


def _number(text: str | bytes | None) -> float | None:
    """A finite non-negative number (its text as str or bytes), or None."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value >= 0.0 and math.isfinite(value) else None


def _first_number(field: str | None) -> float | None:
    """The first member of a list field, as a number (``10, 10;w=1`` is 10)."""
    if field is None:
        return None
    try:
        value = float(field)  # the common case: one number
    except ValueError:
        return _number(field.split(",", 1)[0].split(";", 1)[0])
    return value if value >= 0.0 and math.isfinite(value) else None
