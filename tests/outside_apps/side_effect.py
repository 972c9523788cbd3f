"""Not in any installed app: a stored task path into this module must never import it. An
import leaves an Effect row."""

from tests.testapp.models import Effect

Effect.objects.create(key="outside_apps.side_effect was imported")


def run() -> None:
    Effect.objects.create(key="outside_apps.side_effect.run was called")
