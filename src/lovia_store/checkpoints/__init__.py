"""Run checkpoints: the Checkpointer contract, its SQL and in-memory stores, and run leases."""
