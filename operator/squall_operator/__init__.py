"""The Squall operator: runs Topology resources on Kubernetes (``python -m squall_operator``).

Modules by role: ``resource`` (the Topology resource and its spec), ``render`` (spec to manifests,
pure), ``apply`` (idempotent writes), ``status`` (phase and conditions, pure), ``handlers`` (kopf),
``settings`` (the operator's environment), ``crd`` (the CustomResourceDefinition, generated).
See docs/operator.md.
"""
