"""How a simulated or served downstream announces its rate limit (issue 30).

The one list of header styles: the scenario format names one (``announce``), the simulator
fills the announced ``Sample`` fields when a downstream has one, and ``load/downstream.py``
sends that style's real headers over HTTP. Every style describes the same limit: a quota of
``capacity x window`` calls per fixed window of ``window`` seconds; ``remaining`` is what is
left of it in the current window and ``reset`` the seconds until that window ends.
"""

from __future__ import annotations

from enum import StrEnum


class HeaderStyle(StrEnum):
    """The rate-limit headers a downstream sends on every answer."""

    # IETF draft "RateLimit header fields for HTTP", -08 and later:
    # RateLimit-Policy: "name";q=<quota>;w=<window> and RateLimit: "name";r=<remaining>;t=<reset>.
    IETF = "ietf"
    # The same draft's earlier fields, still widely sent: RateLimit-Limit/-Remaining/-Reset.
    IETF_LEGACY = "ietf-legacy"
    # X-RateLimit-Limit/-Remaining/-Reset, the reset in seconds to wait.
    X_RATELIMIT = "x-ratelimit"
    # X-RateLimit-* as GitHub sends them: the reset as epoch seconds.
    GITHUB = "github"
    # No quota headers; Stripe-Rate-Limited-Reason on each 429 names the kind of limit.
    STRIPE = "stripe"
