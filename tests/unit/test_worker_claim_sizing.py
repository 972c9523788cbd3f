"""How many jobs a worker claims at once (pure arithmetic on its recent job durations)."""

from django_pqjobs.worker.worker import Worker


def test_prefetch_follows_the_recent_job_duration():
    worker = Worker(concurrency=4, prefetch_max=100)
    assert worker._prefetch() == 0  # nothing known yet: claim only for free executors
    worker._average_job_seconds = 0.001
    assert worker._prefetch() == 100  # tiny jobs: claim ahead, capped
    worker._average_job_seconds = 0.01
    assert worker._prefetch() == 20
    worker._average_job_seconds = 2.0
    assert worker._prefetch() == 0  # long jobs: never hold them back from other workers
    assert Worker(concurrency=4, prefetch_max=0)._prefetch() == 0


def test_claims_are_made_in_half_capacity_batches():
    worker = Worker(concurrency=4, prefetch_max=500)
    assert worker._batch_size(free=504, capacity=504) == 252  # the other half comes next
    assert worker._batch_size(free=100, capacity=504) == 100
    assert worker._batch_size(free=4, capacity=4) == 4  # no prefetch: fill every executor
    assert worker._batch_size(free=3, capacity=6) == 3
