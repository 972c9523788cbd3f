"""Admin for jobs: list, filters, actions (retry, cancel, run now), job page, dashboard."""
