"""The Squall operator: runs Topology resources on Kubernetes (``python -m squall_operator``).

Modules by role: ``resource`` (the Topology resource and its spec), ``render`` (spec to manifests,
pure), ``apply`` (idempotent writes), ``status`` (phase and conditions, pure), ``rebalance`` (a spec
change's steps, pure), ``reconcile`` (one Topology brought in line with its spec), ``processes``
(talking to its pods' processes), ``resync`` (the drift-repair loop), ``handlers`` (kopf), ``settings``
(the operator's environment), ``crd`` (the CustomResourceDefinition, generated).
See docs/operator.md.
"""
