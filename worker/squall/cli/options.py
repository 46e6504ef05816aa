"""Argument types the subcommands share."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type: a number of ``kind`` above 0, or a message that says so."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            whole = " (a whole one)" if kind is int else ""
            raise argparse.ArgumentTypeError(f"{text!r} is not a number{whole}") from None
        if not 0 < value < math.inf:  # nan compares false
            raise argparse.ArgumentTypeError(f"must be above 0 and finite, not {text}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse
