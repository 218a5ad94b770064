"""A tiny host service that keeps its own tables next to lovia-store's in one database."""
