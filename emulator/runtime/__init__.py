"""Execution on Ray: runner actors, the runner pool, the server actor, and connecting to a cluster."""
