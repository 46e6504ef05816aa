"""Pods that cannot run show in the Topology's status: kopf runs Squall's handlers against kmock, and
the tests write the pod status a kubelet would report (kmock has no kubelet, see operator_kit)."""

from __future__ import annotations

import pytest
from operator_kit import SPEC, condition, create_topology, events, eventually, put_pod, roll_out, status

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]

IMPORT_ERROR = "Traceback (most recent call last):\n  ...\nModuleNotFoundError: No module named 'examples'"
CRASH_LOOP = {"phase": "Running", "containerStatuses": [{
    "name": "worker", "ready": False, "restartCount": 4,
    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s restarting failed container"}},
    "lastState": {"terminated": {"reason": "Error", "exitCode": 1, "message": IMPORT_ERROR}}}]}
PULL = {"phase": "Pending", "containerStatuses": [{
    "name": "worker", "ready": False, "restartCount": 0,
    "state": {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "squall:typo"'}}}]}
OOM = {"phase": "Running", "containerStatuses": [{
    "name": "worker", "ready": False, "restartCount": 1, "state": {"running": {}},
    "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}
READY = {"phase": "Running", "containerStatuses": [{"name": "worker", "ready": True, "restartCount": 1,
                                                    "state": {"running": {}}}]}


async def test_crash_loops_pull_errors_and_oom_kills_degrade_the_topology(api, start_operator):
    await start_operator()
    await create_topology(api, "wc", SPEC)
    await eventually("status Pending", lambda: status(api, "wc").get("phase") == "Pending")

    await put_pod(api, "wc-worker-0", "wc", CRASH_LOOP)
    degraded = await eventually("Degraded by the crash loop", lambda: condition(api, "wc", "Degraded")
                                if condition(api, "wc", "Degraded").get("status") == "True" else None)
    assert degraded["reason"] == "CrashLoopBackOff"
    assert degraded["message"] == ("pod wc-worker-0: CrashLoopBackOff: container worker: exit code 1: "
                                   "Traceback (most recent call last): ... ModuleNotFoundError: "
                                   "No module named 'examples'")
    assert status(api, "wc")["phase"] == "Pending"  # not lost: it may still come up once fixed
    assert status(api, "wc")["errors"][-1]["message"] == degraded["message"]
    warning = await eventually("the Warning event", lambda: events(api, "CrashLoopBackOff"))
    assert warning[0]["type"] == "Warning" and "No module named 'examples'" in warning[0]["message"]

    await put_pod(api, "wc-worker-0", "wc", PULL)
    await eventually("ImagePullBackOff", lambda: condition(api, "wc", "Degraded").get("reason") == "ImagePullBackOff")
    assert condition(api, "wc", "Degraded")["message"] == \
        'pod wc-worker-0: ImagePullBackOff: container worker: Back-off pulling image "squall:typo"'
    await eventually("its Warning event", lambda: events(api, "ImagePullBackOff"))

    await put_pod(api, "wc-worker-0", "wc", OOM)
    await eventually("OOMKilled", lambda: condition(api, "wc", "Degraded").get("reason") == "OOMKilled")
    assert "container worker ran out of memory (exit code 137)" in condition(api, "wc", "Degraded")["message"]

    # fixed: every pod ready, nothing degraded any more; the errors stay as history
    await put_pod(api, "wc-worker-0", "wc", READY)
    for sts in ("wc-worker", "wc-acker"):
        await roll_out(api, sts)
    await eventually("Running", lambda: status(api, "wc").get("phase") == "Running")
    assert condition(api, "wc", "Degraded")["status"] == "False"
    assert len(status(api, "wc")["errors"]) == 3
