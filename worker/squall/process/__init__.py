"""Worker and acker processes: the process entrypoint, its control commands and ``squall run``'s supervisor."""
