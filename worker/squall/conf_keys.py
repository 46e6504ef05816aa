"""A component's config keys as its user types them: misspellings refused, unknown keys warned of."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from squall.errors import ConfigError

log = logging.getLogger(__name__)

# How close a key must be to one the component reads to be taken for a misspelling of it: a missing or
# doubled letter, a swapped pair, a plural ('processing.guarantees', 'offset.commit.period')
CLOSE = 0.85


def refuse_misspelled(component: str, conf: Mapping[str, Any], known: Collection[str]) -> None:
    """Raise :class:`ConfigError` for a key of ``conf`` that is not one of ``known`` but nearly is: read by no
    one, it would leave the setting meant at its default, silently. (``conf`` is the topology's config merged
    with the component's: keys far from these may be other components'.)"""
    for key in conf:
        if isinstance(key, str) and key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=CLOSE)
            if close:
                raise ConfigError(f"{component!r}: config key {key!r} is read by no one; did you mean {close[0]!r}?")


def warn_unknown(conf: Mapping[str, Any], *, prefixes: Iterable[str], known: Collection[str], what: str) -> None:
    """Log a warning for keys under ``prefixes`` that are not ``known`` (likely typos). Only a warning: the
    conf is the whole topology's, and another component may use the prefix."""
    for key in conf:
        if isinstance(key, str) and key.startswith(tuple(prefixes)) and key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            log.warning("%s: unknown config key %r is ignored%s", what, key, hint)
