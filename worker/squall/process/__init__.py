"""Worker and acker processes: the pod contract, the process entrypoint and ``squall run``'s supervisor."""
