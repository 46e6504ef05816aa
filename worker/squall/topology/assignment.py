"""Which process runs what: a pure function of the spec, in three steps, with no user code imported.

    layout(spec)                   task ids (Storm's numbering) and executors
    assign(layout)                 executors onto workers, acker tasks onto acker processes
    assignment.wiring(role, i)     one process's tasks, the peers it sends to, the peers that send to it

Every worker, every acker, ``squall run`` and the operator compute the same answer without talking
to each other::

    >>> from squall.topology.spec import TopologySpec
    >>> spec = TopologySpec.from_dict({"name": "wc", "workers": 2, "spouts": [
    ...     {"name": "words", "className": "m:Words"}], "bolts": [
    ...     {"name": "count", "className": "m:Count", "parallelism": 2, "inputs": [{"component": "words"}]}]})
    >>> lay = layout(spec)
    >>> lay.component_tasks
    {'count': (1, 2), 'words': (3,), '__acker': (4, 5)}
    >>> w0 = assign(lay).wiring("worker", 0)
    >>> w0.executors, sorted(w0.owner.items())
    ((ExecutorPlan(component='count', tasks=(1,)), ExecutorPlan(component='words', tasks=(3,))), \
[(2, 'worker-1'), (4, 'acker-0'), (5, 'acker-1')])
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from squall.acker.table import MAX_TASK
from squall.contract import ACKER, WORKER, process_name
from squall.errors import TopologyError
from squall.system import ACKER_COMPONENT, CHECKPOINT_COMPONENT
from squall.topology.spec import TopologySpec


@dataclass(frozen=True)
class ExecutorPlan:
    """One executor: a component and the contiguous task ids it runs."""

    component: str
    tasks: tuple[int, ...]

    @property
    def id(self) -> str:
        return f"{self.component}[{self.tasks[0]}-{self.tasks[-1]}]"


def structural_errors(spec: TopologySpec) -> list[str]:
    """What is wrong with the topology's structure, found without importing any user code."""
    errors = []
    seen: set[str] = set()
    for comp in spec.components():
        if comp.name in seen:
            errors.append(f"component {comp.name!r} is defined twice; give each spout and bolt a unique name")
        seen.add(comp.name)
        if comp.tasks is not None and comp.tasks < comp.parallelism:
            errors.append(f"component {comp.name!r}: tasks ({comp.tasks}) is less than parallelism "
                          f"({comp.parallelism}); set tasks >= parallelism or leave it out")
    components = sum(c.num_tasks for c in spec.components())
    tasks = components + spec.num_ackers
    if tasks > MAX_TASK:
        ackers = ("ackers (one per worker unless set)" if spec.ackers is None else "ackers")
        errors.append(f"the topology has {tasks:,} tasks ({components:,} of its components, {spec.num_ackers:,} "
                      f"acker(s)); at most {MAX_TASK:,} are supported (ackers keep task ids in 16 bits); lower "
                      + ("the components' parallelism or tasks" if components >= spec.num_ackers else ackers))
    for bolt in spec.bolts:
        subscribed: dict[tuple[str, str], int] = {}
        for i, inp in enumerate(bolt.inputs):
            if inp.component not in seen:
                errors.append(f"bolt {bolt.name!r} inputs[{i}]: unknown component {inp.component!r} "
                              f"(components: {', '.join(sorted(seen))})")
            # twice, it would be given every tuple of the stream twice (Storm keeps one grouping per stream)
            first = subscribed.setdefault((inp.component, inp.stream), i)
            if first != i:
                errors.append(f"bolt {bolt.name!r} inputs[{i}]: stream {inp.stream!r} of {inp.component!r} is "
                              f"subscribed to already, by inputs[{first}]; keep one of the two groupings")
    return errors


def invalid(spec: TopologySpec, errors: list[str]) -> TopologyError:
    """The one error that lists every problem found in a topology."""
    return TopologyError(f"topology {spec.name!r} is invalid:\n  " + "\n  ".join(errors))


@dataclass(frozen=True)
class Layout:
    """Task ids and executors. ``component_tasks`` includes the acker tasks (``__acker``)."""

    component_tasks: dict[str, tuple[int, ...]]
    executors: tuple[ExecutorPlan, ...]
    acker_tasks: tuple[int, ...]
    spouts: frozenset[str]
    workers: int

    @cached_property
    def task_component(self) -> dict[int, str]:
        return {task: comp for comp, tasks in self.component_tasks.items() for task in tasks}

    @cached_property
    def spout_tasks(self) -> tuple[int, ...]:
        """Every spout task of the topology, in id order."""
        return tuple(sorted(t for c in self.spouts for t in self.component_tasks[c]))


def acker_shares(ackers: int, spout_tasks: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    """Spout task → the ackers (indices ``root % ackers``) it draws its trees' roots for, so that an
    acker's verdicts go to the workers of its spout tasks only. With at least as many spout tasks as
    ackers, spout task i (in id order) has acker i mod n; with fewer, every acker j with j mod (spout
    tasks) = i. Either way every acker has a spout task. With no ackers (``ackers: 0``), none."""
    s = len(spout_tasks)
    if not ackers:
        return dict.fromkeys(spout_tasks, ())
    return {task: (i % ackers,) if s >= ackers else tuple(j for j in range(ackers) if j % s == i)
            for i, task in enumerate(spout_tasks)}


def layout(spec: TopologySpec) -> Layout:
    """Number the tasks as Storm does (components in name order, consecutive ids from 1, then the acker
    tasks) and split each component's tasks into ``parallelism`` executors.

    Raises :class:`TopologyError` when the structure is invalid (see :func:`structural_errors`).
    """
    errors = structural_errors(spec)
    if errors:
        raise invalid(spec, errors)
    component_tasks: dict[str, tuple[int, ...]] = {}
    executors: list[ExecutorPlan] = []
    next_id = 1
    for comp in sorted(spec.components(), key=lambda c: c.name):
        ids = component_tasks[comp.name] = tuple(range(next_id, next_id + comp.num_tasks))
        next_id += comp.num_tasks
        executors += [ExecutorPlan(comp.name, chunk) for chunk in _split(ids, comp.parallelism)]
    spouts = {s.name for s in spec.spouts}
    if spec.checkpointing:  # after the user's components: their task ids are the same with or without it
        component_tasks[CHECKPOINT_COMPONENT] = (next_id,)
        executors.append(ExecutorPlan(CHECKPOINT_COMPONENT, (next_id,)))
        spouts.add(CHECKPOINT_COMPONENT)
        next_id += 1
    acker_tasks = component_tasks[ACKER_COMPONENT] = tuple(range(next_id, next_id + spec.num_ackers))
    return Layout(component_tasks=component_tasks, executors=tuple(executors), acker_tasks=acker_tasks,
                  spouts=frozenset(spouts), workers=spec.workers)


def _split(tasks: tuple[int, ...], parts: int) -> list[tuple[int, ...]]:
    """Split tasks into ``parts`` contiguous chunks whose sizes differ by at most one (larger first)."""
    size, extra = divmod(len(tasks), parts)
    chunks, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        chunks.append(tasks[start:end])
        start = end
    return chunks


@dataclass(frozen=True)
class Wiring:
    """One process's share: what it runs, where it sends, who streams to it."""

    name: str
    executors: tuple[ExecutorPlan, ...]
    spout_tasks: frozenset[int]
    bolt_tasks: frozenset[int]
    acker_tasks: tuple[int, ...]
    #: every task this process sends to and does not run → the process that runs it
    owner: dict[int, str]
    #: the processes that keep streams open to this one
    senders: frozenset[str]
    #: which processes of ``owner`` are acker processes (their control lane carries acker messages)
    ackers: frozenset[str]
    #: acker task → the worker this one sends its acker messages through (:attr:`Assignment.acker_homes`)
    acker_via: dict[int, str]
    #: the acker tasks whose messages other workers send through this one
    forwards: frozenset[int]

    @property
    def local_tasks(self) -> frozenset[int]:
        return self.spout_tasks | self.bolt_tasks | frozenset(self.acker_tasks)


@dataclass(frozen=True)
class Assignment:
    """``executors[i]``: what worker i runs; ``acker_tasks[j]``: what acker process j runs."""

    layout: Layout
    executors: tuple[tuple[ExecutorPlan, ...], ...]
    acker_tasks: tuple[tuple[int, ...], ...]

    @property
    def workers(self) -> int:
        return len(self.executors)

    @property
    def ackers(self) -> int:
        return len(self.acker_tasks)

    @cached_property
    def acker_homes(self) -> dict[int, str]:
        """Acker task → its home: the one worker that runs every spout task drawing roots for it, where
        there is one. Other workers send that acker's messages to its home with their tuples, and the
        home forwards them, folded with its own: a worker then streams to its home ackers only, not
        to every acker (between N workers and N ackers, N acker links instead of N²; each link's frames
        cost both processes far more than what they carry, docs/performance.md). If the home dies, so
        have the spouts of every tree those messages belong to."""
        owner, ackers = self.task_owner(), self.layout.acker_tasks
        workers: dict[int, set[str]] = {}
        for task, share in acker_shares(len(ackers), self.layout.spout_tasks).items():
            for j in share:
                workers.setdefault(ackers[j], set()).add(owner[task])
        return {acker: next(iter(ws)) for acker, ws in workers.items() if len(ws) == 1}

    def task_owner(self) -> dict[int, str]:
        """task id → the name of the process that runs it (``worker-0``, ``acker-1``)."""
        owner: dict[int, str] = {}
        for i, execs in enumerate(self.executors):
            for ex in execs:
                owner.update(dict.fromkeys(ex.tasks, process_name(WORKER, i)))
        for j, tasks in enumerate(self.acker_tasks):
            owner.update(dict.fromkeys(tasks, process_name(ACKER, j)))
        return owner

    def wiring(self, role: str, index: int) -> Wiring:
        """What process ``index`` of ``role`` runs and whom it talks to."""
        count = self.workers if role == WORKER else self.ackers
        if role not in (WORKER, ACKER) or not 0 <= index < count:
            raise ValueError(f"no {role} {index}: the topology has {count} {role}(s)")
        name = process_name(role, index)
        spouts, components = self.layout.spouts, self.layout.task_component
        executors = self.executors[index] if role == WORKER else ()
        acker_tasks = self.acker_tasks[index] if role == ACKER else ()
        spout_tasks = frozenset(t for ex in executors if ex.component in spouts for t in ex.tasks)
        bolt_tasks = frozenset(t for ex in executors if ex.component not in spouts for t in ex.tasks)
        owner = {t: p for t, p in self.task_owner().items() if p != name}
        if role == ACKER:  # an acker only ever talks to the spouts' workers, with their verdicts
            owner = {t: p for t, p in owner.items() if components[t] in spouts}
        # Every other worker streams to us (bolt input, acker messages); the ackers do too when we
        # run spouts (their verdicts).
        acker_names = {process_name(ACKER, j) for j in range(self.ackers)}
        senders = {process_name(WORKER, i) for i in range(self.workers)} - {name}
        if spout_tasks:
            senders |= acker_names
        ackers = frozenset(p for p in owner.values() if p in acker_names)
        homes = self.acker_homes if role == WORKER else {}
        return Wiring(name=name, executors=executors, spout_tasks=spout_tasks, bolt_tasks=bolt_tasks,
                      acker_tasks=acker_tasks, owner=owner, senders=frozenset(senders), ackers=ackers,
                      acker_via={a: home for a, home in homes.items() if home != name},
                      forwards=frozenset(a for a, home in homes.items() if home == name))


def assign(layout: Layout) -> Assignment:
    """Deal executors round-robin over the workers in layout order (Storm's even scheduler), so each
    worker gets a mix of components; acker task j goes to acker process j."""
    per_worker: list[list[ExecutorPlan]] = [[] for _ in range(layout.workers)]
    for i, ex in enumerate(layout.executors):
        per_worker[i % layout.workers].append(ex)
    return Assignment(layout=layout, executors=tuple(tuple(w) for w in per_worker),
                      acker_tasks=tuple((t,) for t in layout.acker_tasks))


def check_state_kept(running: TopologySpec, new: TopologySpec) -> None:
    """Raise :class:`TopologyError` if moving from ``running`` to ``new`` (a rebalance) would change the
    tasks of a bolt that is stateful in both: its state is kept per task, by task id (a store per task),
    and a fields grouping sends each key to one task by the task count, so neither may change (Storm
    refuses it too). Task ids are numbered over the components in name order, so a task count changed
    in a component named before the bolt moves the bolt's ids as well."""
    before, after = layout(running).component_tasks, layout(new).component_tasks
    stateful = {b.name for b in running.bolts if b.stateful} & {b.name for b in new.bolts if b.stateful}
    if running.exactly_once and new.exactly_once:  # exactly once, a spout task keeps its positions as its state
        stateful |= {s.name for s in running.spouts} & {s.name for s in new.spouts}
    spouts = {s.name for s in running.spouts}

    def kind(name: str) -> str:
        return "exactly-once spout" if name in spouts else "stateful bolt"

    problems = []
    for name in sorted(stateful):
        was, now = before[name], after[name]
        if len(was) != len(now):
            problems.append(f"{kind(name)} {name!r} runs {len(was)} task(s) and the new spec gives it {len(now)}: "
                            f"its state is kept per task, and a fields grouping sends each key to the task its "
                            f"count picks, so its task count cannot change; set its tasks to {len(was)} (its "
                            "parallelism, the executors, may still change, up to that)")
        elif was != now:
            user = {c for c in set(before) | set(after) if c < name and not c.startswith("__")}  # numbered first
            moved = sorted(c for c in user if c in before and c in after and len(before[c]) != len(after[c]))
            added = sorted(c for c in user if (c in before) != (c in after))
            why = "; ".join(part for part in (
                f"the task count of {', '.join(map(repr, moved))} changed" if moved else "",
                f"{', '.join(map(repr, added))} came or went" if added else "") if part)
            problems.append(f"the tasks of {kind(name)} {name!r} would be numbered {now[0]}-{now[-1]} instead of "
                            f"{was[0]}-{was[-1]}: tasks are numbered over the components in name order, and before "
                            f"it {why}; its state is kept per task id, so keep the components named before it "
                            "as they are (set their tasks)")
    if problems:
        raise TopologyError(f"topology {new.name!r} cannot be rebalanced to this spec:\n  " + "\n  ".join(problems))
