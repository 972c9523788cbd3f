"""Objects a stored task path may name that are not tasks of the backend. The worker must
refuse them without calling anything: each call would leave an Effect row."""

from .models import Effect


def plain_function(*args: object, **kwargs: object) -> None:
    Effect.objects.create(key="lookalikes.plain_function was called")


class Callable:
    def __call__(self, *args: object, **kwargs: object) -> None:
        Effect.objects.create(key="lookalikes.Callable was called")


instance = Callable()


def __getattr__(name: str) -> object:
    Effect.objects.create(key=f"lookalikes.__getattr__({name}) was called")
    raise AttributeError(name)
