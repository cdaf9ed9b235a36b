"""The warning the compile cache gives when one of its tiers cannot be used for a compile.

A leaf module so that the local cache (``driver.cache``) and the remote tier (``driver.remote``) warn with one
type without importing each other.
"""

from __future__ import annotations


class CacheWarning(UserWarning):
    """The cache could not be used for one compile (a damaged entry, an unwritable directory, a refused or
    unreachable remote entry); the compile went ahead without it."""
