"""The config keys of stateful topologies (Storm's where Storm has them), with their defaults."""

#: Milliseconds between checkpoints, and between retries of a failed one (Storm's key and default).
CHECKPOINT_INTERVAL_KEY = "topology.state.checkpoint.interval.ms"
DEFAULT_CHECKPOINT_INTERVAL_MS = 1000
#: Which store keeps the tasks' state (Storm's key): memory (lost with the process), embedded (a SQLite
#: file per task, the default where a state directory is known) or redis.
PROVIDER_KEY = "topology.state.provider"
MEMORY, EMBEDDED, REDIS = "memory", "embedded", "redis"
PROVIDERS = (MEMORY, EMBEDDED, REDIS)
#: The embedded store's directory; without it, the pod contract's SQUALL_STATE_DIR (``squall run``'s run
#: directory's ``state/``, a worker pod's volume).
DIR_KEY = "topology.state.dir"
#: The Redis store's URL (``redis://[:password@]host:port/db``); without it, the pod contract's
#: SQUALL_STATE_REDIS_URL (the operator sets it from a Secret).
REDIS_URL_KEY = "topology.state.redis.url"
#: What a stateful topology promises its state (Squall's): at least once (Storm's: a replay after a failure may
#: count a record again), or exactly once (each record of its offset spouts once in the committed state:
#: checkpoints are aligned barriers through the data streams, and a failure rewinds the whole topology).
GUARANTEE_KEY = "topology.state.guarantee"
AT_LEAST_ONCE, EXACTLY_ONCE = "at_least_once", "exactly_once"
GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE)


def exactly_once(conf: dict) -> bool:
    """Whether the topology's config asks for exactly-once state."""
    return conf.get(GUARANTEE_KEY) == EXACTLY_ONCE
