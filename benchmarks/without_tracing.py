"""``python -m benchmarks.without_tracing run_jobs ...``: ``manage.py`` as if the tracing
extra were not installed (``import opentelemetry`` fails), to measure what having it costs."""

import sys

sys.modules["opentelemetry"] = None  # type: ignore[assignment]

if __name__ == "__main__":
    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", *sys.argv[1:]])
