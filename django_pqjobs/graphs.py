"""Jobs that depend on each other, enqueued together: ``JobGraph`` and ``chain()``.

``enqueue_job(..., depends_on=[ids])`` makes one job wait for jobs that already exist. A
graph names its jobs, so they can depend on each other before any has an id; it is
checked (unknown names, cycles) before anything is enqueued, then enqueued in dependency
order in one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .conf import conf
from .enqueue import deadlock_retried, enqueue_job
from .errors import InvalidJobOption
from .statuses import DependencyPolicy

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .enqueue import JobOptions

__all__ = ["JobGraph", "chain"]


@dataclass
class _Node:
    job_type: str
    payload: Any
    depends_on: list[str | int]
    options: dict[str, Any] = field(default_factory=dict)


class JobGraph:
    """Jobs named by you, each depending on others of the graph (by name) or on existing
    jobs (by id)::

        graph = JobGraph()
        graph.add("fetch", "feeds.fetch", {"url": url})
        graph.add("parse", "feeds.parse", depends_on=["fetch"])
        graph.add("index", "search.index", depends_on=["parse", 1234])
        ids = graph.enqueue()  # {"fetch": 10, "parse": 11, "index": 12}
    """

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {}

    def add(
        self,
        name: str,
        job_type: str,
        payload: Any = None,
        *,
        depends_on: Iterable[str | int] = (),
        **options: Unpack[JobOptions],
    ) -> str:
        """Add a job named ``name``; takes the options of :func:`~django_pqjobs.enqueue_job`
        (``on_dependency_failure`` included). Returns ``name``."""
        if not isinstance(name, str) or not name:
            raise InvalidJobOption(f"a graph job's name must be non-empty text, got {name!r:.120}")
        if name in self._nodes:
            raise InvalidJobOption(f"the graph already has a job named {name!r:.120}")
        if isinstance(depends_on, (str, bytes)):
            raise InvalidJobOption(
                f"graph job {name!r:.120}: depends_on must be a list of names or ids, "
                f"got {depends_on!r:.120}"
            )
        self._nodes[name] = _Node(job_type, payload, list(depends_on), dict(options))
        return name

    def order(self) -> list[str]:
        """The names in an order that puts every job after its dependencies; refuses
        unknown names and cycles (naming one)."""
        for name, node in self._nodes.items():
            for wanted in node.depends_on:
                if isinstance(wanted, str) and wanted not in self._nodes:
                    raise InvalidJobOption(
                        f"graph job {name!r:.120} depends on {wanted!r:.120}, which the graph "
                        "does not have"
                    )
        done: list[str] = []
        state: dict[str, str] = {}  # "visiting" | "done"
        for start in self._nodes:
            if start in state:
                continue
            # Depth first without recursion: a chain of 100,000 jobs must not hit the
            # recursion limit.
            path: list[str] = [start]
            pending: list[Iterator[str]] = [iter(self._names_of(start))]
            state[start] = "visiting"
            while path:
                dep = next(pending[-1], None)
                if dep is None:
                    finished = path.pop()
                    pending.pop()
                    state[finished] = "done"
                    done.append(finished)
                elif state.get(dep) == "visiting":
                    cycle = [*path[path.index(dep) :], dep]
                    raise InvalidJobOption(
                        "the graph has a dependency cycle: "
                        + " -> ".join(repr(n)[:60] for n in cycle)
                    )
                elif dep not in state:
                    state[dep] = "visiting"
                    path.append(dep)
                    pending.append(iter(self._names_of(dep)))
        return done

    def _names_of(self, name: str) -> list[str]:
        return [d for d in self._nodes[name].depends_on if isinstance(d, str)]

    def enqueue(self, *, using: str | None = None) -> dict[str, int]:
        """Enqueue every job in one transaction (a savepoint inside yours); return the id
        of each by name."""
        order = self.order()

        def attempt() -> dict[str, int]:
            ids: dict[str, int] = {}
            for name in order:
                node = self._nodes[name]
                deps = [ids[d] if isinstance(d, str) else d for d in node.depends_on]
                ids[name] = enqueue_job(
                    node.job_type, node.payload, depends_on=deps, using=using, **node.options
                )
            return ids

        # jobs of several keys in one transaction: a deadlock's victim starts the graph again
        ids = deadlock_retried(using or conf.DATABASE, attempt)
        return {name: ids[name] for name in self._nodes}


def chain(
    steps: Sequence[tuple[str, Any]],
    *,
    on_dependency_failure: DependencyPolicy | None = None,
    using: str | None = None,
) -> list[int]:
    """Enqueue ``(job_type, payload)`` steps that run one after another: each waits for
    the one before it (and is cancelled if it fails, unless ``on_dependency_failure`` is
    ``"run"``). Returns the ids in order."""
    graph = JobGraph()
    names: list[str] = []
    for n, step in enumerate(steps):
        if not isinstance(step, tuple) or len(step) != 2:
            raise InvalidJobOption(
                f"chain() step {n} must be a (job_type, payload) pair, got {step!r:.120}"
            )
        job_type, payload = step
        depends = [names[-1]] if names else []
        options: dict[str, Any] = {}
        if depends and on_dependency_failure is not None:
            options["on_dependency_failure"] = on_dependency_failure
        names.append(graph.add(str(n), job_type, payload, depends_on=depends, **options))
    ids = graph.enqueue(using=using)
    return [ids[name] for name in names]
