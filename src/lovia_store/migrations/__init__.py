"""Alembic scripts; shipped inside the package so an installed wheel can migrate."""
