"""Storm's acker: tracks every spout tuple tree with one 64-bit XOR value per tree."""

from squall.acker.acker import AckBatch, Acker, AckerMessage, Notification
from squall.acker.table import PendingTrees

__all__ = ["AckBatch", "Acker", "AckerMessage", "Notification", "PendingTrees"]
