"""A small, provider-agnostic run loop that carries the storage semantics."""
