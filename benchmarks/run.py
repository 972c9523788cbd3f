"""Run the performance scenarios and print a table (see benchmarks/README.md).

DATABASE_URL=postgres://... python benchmarks/run.py [--quick] [--only drain,latency]
    [--finished 100000,1000000] [--history 100000]
    (--finished: the sizes of flow_enqueue and enqueue_floors)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import ROOT, Result, setup_django, use_history

ORDER = [
    "baseline",
    "drain",
    "scale",
    "history",
    "processes",
    "enqueue",
    "enqueue_floors",
    "uniqueness",
    "sequences",
    "typed",
    "workflows",
    "fairness",
    "latency",
    "mixed",
    "metrics",
    "sustained",
    "memory",
    "flow",
    "flow_enqueue",
    "batches",
    "tasks",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter runs")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {ORDER}")
    parser.add_argument(
        "--finished",
        default="100000",
        help="flow_enqueue, enqueue_floors: comma-separated sizes of the analysed table of "
        "finished jobs",
    )
    parser.add_argument(
        "--history",
        type=int,
        default=100_000,
        help="done jobs kept in history partitions beside every scenario, loaded once and "
        "analysed (0: none; issue 42 measures beside 1000000)",
    )
    args = parser.parse_args()
    if args.history < 0:
        parser.error("--history takes a whole number >= 0")
    try:
        finished = [int(n) for n in args.finished.split(",") if n.strip()]
    except ValueError:
        parser.error(f"--finished takes whole numbers, e.g. 100000,1000000: {args.finished!r}")
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or ORDER
    unknown = set(chosen) - set(ORDER)
    if unknown:
        parser.error(f"unknown scenario(s) {sorted(unknown)}; choose from {ORDER}")
    setup_django()
    use_history(args.history)
    from benchmarks.scenarios import (
        baseline,
        batches,
        drain,
        enqueue,
        fairness,
        flow,
        history,
        latency,
        memory,
        metrics,
        mixed,
        processes,
        scale,
        sequences,
        sustained,
        tasks,
        typed,
        uniqueness,
        workflows,
    )

    modules = {
        "baseline": baseline,
        "drain": drain,
        "history": history,
        "enqueue": enqueue,
        "uniqueness": uniqueness,
        "sequences": sequences,
        "typed": typed,
        "workflows": workflows,
        "fairness": fairness,
        "latency": latency,
        "mixed": mixed,
        "processes": processes,
        "metrics": metrics,
        "sustained": sustained,
        "memory": memory,
        "flow": flow,
        "batches": batches,
        "tasks": tasks,
    }
    results: list[Result] = []
    for name in chosen:
        try:
            if name == "scale":
                empty = next((r.figure for r in results if r.scenario.startswith("drain")), None)
                results += scale.run(args.quick, empty)
            elif name == "flow_enqueue":
                for size in finished:
                    results += flow.run_enqueue(args.quick, size)
            elif name == "enqueue_floors":
                for size in finished:
                    results += enqueue.run_floors(args.quick, size)
            else:
                results += modules[name].run(args.quick)
        except Exception:  # one broken scenario must not cost the figures of the others
            traceback.print_exc()
            results.append(Result(name, 0, "-", "-", False, "the scenario failed (see above)"))
        print(f"... {name} done", file=sys.stderr)
    base = max((r.figure for r in results if r.scenario.startswith("baseline")), default=None)
    print(f"{'scenario':<58} {'figure':>10} {'unit':<10} {'target':<16} {'ok':<5} ratio")
    for r in results:
        ratio = f"{r.figure / base:.1%}" if base and r.unit == "jobs/s" else ""
        ok = "-" if r.passed is None else ("PASS" if r.passed else "FAIL")
        print(f"{r.scenario:<58} {r.figure:>10.1f} {r.unit:<10} {r.target:<16} {ok:<5} {ratio}")
        if r.notes:
            print(f"    {r.notes}")
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps([asdict(r) for r in results], indent=2, default=str))
    print(f"results written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
