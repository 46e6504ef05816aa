"""The ids Squall reserves: its own components and streams (Storm's ``__acker``, ``__system``, ``__tick``)."""

DEFAULT_STREAM = "default"  # the stream of emits that name none
ACKER_COMPONENT = "__acker"  # the acker tasks, as in Storm's system topology
SYSTEM_COMPONENT = "__system"  # the source of tick tuples
TICK_STREAM = "__tick"
CHECKPOINT_COMPONENT = "__checkpoint"  # the checkpoint spout of stateful topologies (Storm's $checkpointspout)
CHECKPOINT_STREAM = "__checkpoint"  # its stream, which every bolt forwards (Storm's $checkpoint)
