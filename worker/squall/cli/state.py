"""``squall state show TOPOLOGY.yaml``: the committed state of a topology's stateful bolts, task by task.

Each stateful task's store is opened as the topology's config picks it (``topology.state.provider``, merged
with the bolt's own config as its tasks see it): the embedded store's SQLite file under
``topology.state.dir``, else ``$SQUALL_STATE_DIR``, else a ``squall run``'s run directory's ``state/``;
or Redis at ``topology.state.redis.url``, else ``$SQUALL_STATE_REDIS_URL``. It shows what the last
checkpoint committed, while the topology runs or after it, and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from squall.contract import STATE_DIR as DIR_ENV
from squall.contract import STATE_REDIS_URL as REDIS_URL_ENV
from squall.errors import SquallError
from squall.state.config import DIR_KEY, MEMORY, PROVIDER_KEY, REDIS, REDIS_URL_KEY
from squall.state.stores import embedded_path, open_store, provider, redis_namespace
from squall.topology import load_spec
from squall.topology.assignment import layout
from squall.topology.spec import TopologySpec

RUN_DIR = ".squall/run"  # squall run's default --run-dir

EXAMPLES = """\
examples:
  squall run examples/statefulwordcount.yaml --duration 30
  squall state show examples/statefulwordcount.yaml --sum      # the word counts, every task's added up
  squall state show examples/statefulwordcount.yaml --component count --task 1 -o json
  squall state show topology.yaml --run-dir /tmp/run           # the state of `squall run ... --run-dir /tmp/run`
  SQUALL_STATE_REDIS_URL=redis://localhost:6379/0 squall state show topology.yaml   # topology.state.provider: redis

exit status: 0 state shown, 1 no task has committed state yet (stderr says where it looked), 2 an error
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    top = subparsers.add_parser(
        "state", help="show the committed state of a topology's stateful bolts",
        description="The state of a topology's stateful bolts (squall.StatefulBolt), as their last checkpoint "
                    "committed it. See docs/state.md.")
    actions = top.add_subparsers(dest="state_command", required=True, metavar="ACTION")
    p = actions.add_parser(
        "show", help="print each stateful task's committed checkpoint id and keys and values",
        description="Print each stateful task's committed checkpoint id (txid) and its keys and values, read "
                    "from the store the topology's config picks (topology.state.provider): the embedded "
                    "store's file per task (under topology.state.dir, else $SQUALL_STATE_DIR, else "
                    "RUN_DIR/state/, where squall run keeps it) or Redis (topology.state.redis.url, else "
                    "$SQUALL_STATE_REDIS_URL). Reads only; a running topology goes on.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topology", help="path to the topology YAML")
    p.add_argument("--component", metavar="BOLT", help="only this stateful bolt (default: every one); exactly once, "
                                                       "a spout too: its tasks' checkpointed positions")
    p.add_argument("--task", type=int, metavar="ID", help="only this task id (default: every task)")
    p.add_argument("--run-dir", default=RUN_DIR, metavar="RUN_DIR",
                   help=f"the squall run's directory, whose state/ holds the embedded stores (default {RUN_DIR})")
    p.add_argument("--sum", action="store_true",
                   help="one table per bolt: its tasks' states merged, the values of equal keys added (numbers)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table",
                   help="table (default) or one JSON document")
    p.set_defaults(func=show)


@dataclass(frozen=True)
class TaskState:
    """One task's committed state; ``missing`` says why there is none yet, and ``looked`` where it looked."""

    component: str
    task: int
    where: str
    txid: int
    items: dict[Any, Any]
    looked: str
    missing: str | None = None


def show(args: argparse.Namespace) -> int:
    spec = load_spec(args.topology)
    states = [read(spec, component, task, run_dir=Path(args.run_dir))
              for component, task in stateful_tasks(spec, component=args.component, task=args.task)]
    found = [s for s in states if s.missing is None]
    for s in states:
        if s.missing is not None:
            print(f"squall state: {s.component} task {s.task}: nothing committed yet ({s.missing})", file=sys.stderr)
    if not found:
        for looked in dict.fromkeys(s.looked for s in states):
            print(f"squall state: looked in {looked}", file=sys.stderr)
    try:
        if args.output == "json":
            print(json.dumps(_document(spec, found, add=args.sum), ensure_ascii=False, indent=2))
        elif args.sum:
            _print_sums(found)
        else:
            _print_tasks(found)
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, and keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0 if found else 1


def stateful_tasks(spec: TopologySpec, *, component: str | None = None,
                   task: int | None = None) -> list[tuple[str, int]]:
    """``(component, task)`` of every stateful task of ``spec``, or of ``component``'s, or ``task`` alone."""
    stateful = [b.name for b in spec.bolts if b.stateful]
    if not stateful:
        raise SquallError(f"topology {spec.name!r} has no stateful bolt (a squall.StatefulBolt declared stateful: "
                          "true): it keeps no state")
    if spec.exactly_once:  # each spout task's positions are its state: `--component SPOUT` shows them
        stateful += [s.name for s in spec.spouts]
    names = ", ".join(map(repr, stateful))
    if component is not None:
        if component not in {c.name for c in spec.components()}:
            raise SquallError(f"topology {spec.name!r} has no component {component!r}; its stateful bolts: {names}")
        if component not in stateful:
            raise SquallError(f"{component!r} is not a stateful bolt and keeps no state; the stateful bolts of "
                              f"{spec.name!r}: {names}")
        stateful = [component]
    tasks = layout(spec).component_tasks
    chosen = [(c, t) for c in stateful for t in tasks[c] if task is None or t == task]
    if not chosen:
        ids = "; ".join(f"{c!r}: {', '.join(map(str, tasks[c]))}" for c in stateful)
        raise SquallError(f"task {task} is not a task of a stateful bolt of {spec.name!r} (their tasks: {ids})")
    return chosen


def read(spec: TopologySpec, component: str, task: int, *, run_dir: Path) -> TaskState:
    """The state ``task`` of ``component`` last committed, from the store its config picks."""
    conf = {**spec.config, **spec.component(component).config}  # as its tasks are given it
    if conf.get(DIR_KEY):
        where, why = str(conf[DIR_KEY]), f"{DIR_KEY} of the topology's config"
    elif os.environ.get(DIR_ENV):
        where, why = os.environ[DIR_ENV], f"${DIR_ENV}"
    else:
        where, why = str(run_dir / "state"), (f"the state/ of squall run's directory {run_dir}: run the topology with "
                                              "squall run first, or pass the --run-dir of the run that ran it")
    conf = {**conf, DIR_KEY: where}  # squall run gives its processes a state directory: so does this
    chosen = provider(conf)
    if chosen == MEMORY:
        raise SquallError(f"config {PROVIDER_KEY} is {MEMORY}: the state of {component!r} lives in its processes' "
                          "memory and ends with them; there is nothing to read (pick embedded or redis to keep it)")
    if chosen == REDIS:
        return _read_redis(conf, spec=spec, component=component, task=task)
    path = embedded_path(where, topology=spec.name, component=component, task=task)
    looked = f"{path.parent}/ (the embedded store, in {why})"
    if not path.exists():  # opening it would make it
        return TaskState(component, task, str(path), -1, {}, looked, missing=f"no {path}")
    try:
        txid, items = _load(conf, spec=spec, component=component, task=task)
    except sqlite3.Error as exc:
        raise SquallError(f"cannot read the state of {component!r} task {task} from {path}: {exc}") from None
    if txid < 0:
        return TaskState(component, task, str(path), txid, items, looked,
                         missing=f"{path} holds no checkpoint: the task started, its first commit is to come")
    return TaskState(component, task, str(path), txid, items, looked)


def _load(conf: dict[str, Any], *, spec: TopologySpec, component: str, task: int) -> tuple[int, dict[Any, Any]]:
    """The task's last commit, from the store ``conf`` picks (closed again)."""
    store = open_store(conf, topology=spec.name, component=component, task=task)
    try:
        return store.load()
    finally:
        store.close()


def _read_redis(conf: dict[str, Any], *, spec: TopologySpec, component: str, task: int) -> TaskState:
    url = conf.get(REDIS_URL_KEY) or os.environ.get(REDIS_URL_ENV)
    if not url:
        raise SquallError(f"config {PROVIDER_KEY} is {REDIS}, and the Redis URL is unknown here: set {REDIS_URL_KEY} "
                          f"in the topology's config or the environment variable {REDIS_URL_ENV} "
                          "(e.g. redis://localhost:6379/0)")
    try:
        import redis
    except ImportError:
        raise SquallError(f"config {PROVIDER_KEY} is {REDIS}: reading it needs the redis package "
                          "(pip install 'squall[redis]')") from None
    shown = _redacted(url)
    keys = redis_namespace(topology=spec.name, component=component, task=task)
    where = f"{shown} {keys}:state"
    looked = f"Redis at {shown} (from {REDIS_URL_KEY if conf.get(REDIS_URL_KEY) else '$' + REDIS_URL_ENV})"
    try:
        txid, items = _load(conf, spec=spec, component=component, task=task)
    except (redis.RedisError, ValueError) as exc:
        raise SquallError(f"cannot read the state of {component!r} task {task} from Redis at {shown}: {exc}") from None
    if txid < 0:
        return TaskState(component, task, where, txid, items, looked, missing=f"no key {keys}:txid")
    return TaskState(component, task, where, txid, items, looked)


def _redacted(url: str) -> str:
    """``url`` without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def summed(states: list[TaskState]) -> dict[Any, Any]:
    """The items of ``states`` merged, the values of a key that several hold added up (numbers only)."""
    total: dict[Any, Any] = {}
    for s in states:
        for key, value in s.items.items():
            if not _number(value):
                raise SquallError(f"--sum adds numbers, and {s.component} task {s.task} holds {type(value).__name__} "
                                  f"{_text(value)} at key {_text(key)}: leave out --sum")
            total[key] = total.get(key, 0) + value
    return total


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _by_component(states: list[TaskState]) -> dict[str, list[TaskState]]:
    out: dict[str, list[TaskState]] = {}
    for s in states:
        out.setdefault(s.component, []).append(s)
    return out


def _document(spec: TopologySpec, states: list[TaskState], *, add: bool) -> dict[str, Any]:
    if add:
        return {"topology": spec.name, "components": [
            {"component": c, "tasks": [s.task for s in group], "txids": [s.txid for s in group],
             "state": _jsonable(_sorted(summed(group)))} for c, group in _by_component(states).items()]}
    return {"topology": spec.name, "tasks": [
        {"component": s.component, "task": s.task, "txid": s.txid, "where": s.where,
         "state": _jsonable(_sorted(s.items))} for s in states]}


def _print_tasks(states: list[TaskState]) -> None:
    for i, s in enumerate(states):
        if i:
            print()
        print(f"{s.component} task {s.task} (txid {s.txid}): {len(s.items)} key(s) in {s.where}")
        _table(s.items)


def _print_sums(states: list[TaskState]) -> None:
    for i, (component, group) in enumerate(_by_component(states).items()):
        total = summed(group)
        if i:
            print()
        print(f"{component} tasks {', '.join(str(s.task) for s in group)} added up "
              f"(txid {', '.join(str(s.txid) for s in group)}): {len(total)} key(s)")
        _table(total)


def _sorted(items: dict[Any, Any]) -> dict[Any, Any]:
    """``items`` by key (keys of one type sort together: a state may mix str, int and bytes)."""
    return dict(sorted(items.items(), key=lambda kv: (type(kv[0]).__name__, kv[0])))


def _table(items: dict[Any, Any]) -> None:
    rows = [(_text(k), _text(v)) for k, v in _sorted(items).items()]
    width = max([len("KEY"), *(len(k) for k, _ in rows)])
    for key, value in [("KEY", "VALUE"), *rows]:
        print(f"  {key.ljust(width)}  {value}")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(_jsonable(value), ensure_ascii=False)


def _jsonable(value: Any) -> Any:
    """``value`` as JSON holds it: bytes as text (undecodable bytes as \\xNN escapes), keys as strings."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, dict):
        return {(k.decode("utf-8", "backslashreplace") if isinstance(k, bytes) else k): _jsonable(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value
