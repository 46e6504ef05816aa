"""``python -m squall_operator``: run the operator (settings from the environment, see docs/operator.md)."""

from __future__ import annotations

import asyncio
import logging
import sys

import kopf
from kubernetes import client, config

from squall.errors import ConfigError
from squall_operator.handlers import operate
from squall_operator.settings import Settings


def api_client() -> client.ApiClient:
    """A ``kubernetes`` client with the pod's service account, or the local kubeconfig outside a cluster."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except config.ConfigException as exc:
            raise ConfigError(f"no Kubernetes API to talk to: not in a pod, and no kubeconfig ({exc}); set "
                              "KUBECONFIG, or run the operator in the cluster (helm install squall "
                              "charts/squall)") from None
    return client.ApiClient()


def main() -> int:
    try:
        settings = Settings.from_env()
        api = api_client()
    except ConfigError as exc:
        print(f"squall-operator: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level_number, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    registry = kopf.OperatorRegistry()
    # kopf logs in as the kubernetes client does: the pod's service account, or the kubeconfig
    kopf.on.login(registry=registry)(kopf.login_via_client)
    asyncio.run(operate(settings=settings, api=api, registry=registry))
    return 0


if __name__ == "__main__":
    sys.exit(main())
