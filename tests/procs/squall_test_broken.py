"""A module that fails while it is imported, as one reading a missing input file at import time would."""

raise FileNotFoundError("no such input: /nowhere/records.db")
