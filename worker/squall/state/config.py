"""The config keys of stateful topologies (Storm's where Storm has them), with their defaults."""

from squall.contract import STATE_DIR, STATE_REDIS_URL

#: Milliseconds between checkpoints, and between retries of a failed one (Storm's key and default).
CHECKPOINT_INTERVAL_KEY = "topology.state.checkpoint.interval.ms"
DEFAULT_CHECKPOINT_INTERVAL_MS = 1000
#: Which store keeps the tasks' state (Storm's key): memory (lost with the process), embedded (a SQLite
#: file per task, the default where a state directory is known) or redis.
PROVIDER_KEY = "topology.state.provider"
MEMORY, EMBEDDED, REDIS = "memory", "embedded", "redis"
PROVIDERS = (MEMORY, EMBEDDED, REDIS)
#: The embedded store's directory: ``squall run`` sets the environment variable to its run directory's
#: ``state/``, the operator to the worker pod's volume; the config key wins.
DIR_KEY, DIR_ENV = "topology.state.dir", STATE_DIR
#: The Redis store's URL (``redis://[:password@]host:port/db``): the operator sets the environment
#: variable from a Secret; the config key wins.
REDIS_URL_KEY, REDIS_URL_ENV = "topology.state.redis.url", STATE_REDIS_URL
