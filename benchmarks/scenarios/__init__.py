"""One module per scenario of the performance issue; each returns a list of Results."""
