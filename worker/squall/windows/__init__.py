"""Windowed bolts (Storm's ``BaseWindowedBolt``): windows by count or by duration, sliding or tumbling, on
processing time or event time with watermarks and a late-tuple stream. See docs/windows.md.

The public faces are here; :mod:`squall.windows.manager` computes the windows (pure), and
:mod:`squall.executor.windowing` runs them in a bolt executor.
"""

from squall.windows.api import Count, Duration, Window, WindowedBolt

__all__ = ["Count", "Duration", "Window", "WindowedBolt"]
