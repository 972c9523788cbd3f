"""``manage.py set_fair_weight``: how many turns a fair key takes for each turn of the others."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ... import fairness
from ...options import FAIR_WEIGHT_MAX
from ...printable import printable
from ._arguments import add_by, who
from ._base import PQJobsCommand, iso


class Command(PQJobsCommand):
    help = (
        "Set the weight of a fair key (@job(fair_key=...)): among due jobs of equal priority, "
        "its jobs take that many turns for each turn of a key weighing 1 (keys without a "
        "weight weigh 1). It applies to the key's jobs enqueued from now on. --clear puts it "
        "back to 1. With --list, or nothing, list the weights set and the fair keys with the "
        "most jobs waiting."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "key", nargs="?", default=None, help="the fair key, as jobs carry it (tenant:7)"
        )
        parser.add_argument(
            "weight", nargs="?", type=int, default=None, help=f"turns (1-{FAIR_WEIGHT_MAX})"
        )
        parser.add_argument(
            "--clear", action="store_true", help="remove the key's weight: it weighs 1 again"
        )
        parser.add_argument(
            "--list",
            action="store_true",
            help="list the weights set, and the fair keys with the most jobs waiting",
        )
        add_by(parser, "weight")

    def handle(self, *args: Any, **options: Any) -> None:
        alias = self.alias(options)
        key, weight, clear = options["key"], options["weight"], options["clear"]
        if options["list"] or (key is None and not clear):
            if key is not None or clear:
                raise CommandError("--list takes no key, weight or --clear")
            self._list(alias)
            return
        if key is None:
            raise CommandError("--clear needs the key whose weight it removes")
        if weight is not None and clear:
            raise CommandError("give a weight or --clear, not both")
        if weight is None and not clear:
            raise CommandError(
                f"give the weight of {printable(key)} (1-{FAIR_WEIGHT_MAX}) or --clear"
            )
        try:
            fairness.set_fair_weight(key, weight, by=who(options), using=alias)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if clear:
            self.summary(f"fair key {printable(key)}: cleared, it weighs 1")
        else:
            self.summary(
                f"fair key {printable(key)}: weight {weight}, for its jobs enqueued from now on"
            )

    def _list(self, alias: str) -> None:
        found = fairness.weights(alias)
        for row in found:
            by = f" by {printable(row.set_by)}" if row.set_by else ""
            self.summary(f"{printable(row.key)}: weight {row.weight} (set {iso(row.set_at)}{by})")
        if not found:
            self.summary("no weight is set: every fair key weighs 1")
        busiest = fairness.fair_keys(fairness.SHOWN_KEYS, using=alias)
        if busiest:
            self.summary(f"fair keys with the most jobs waiting (top {fairness.SHOWN_KEYS}):")
        for key in busiest:
            oldest = "-" if key.oldest_wait is None else f"{key.oldest_wait:.0f} s"
            self.summary(
                f"  {printable(key.key)}: {key.waiting} waiting, {key.running} running, "
                f"oldest due waited {oldest}, weight {key.weight}"
            )
