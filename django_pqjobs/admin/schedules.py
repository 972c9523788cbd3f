"""Admin for recurring schedules."""
