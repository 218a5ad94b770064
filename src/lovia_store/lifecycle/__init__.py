"""The data's whole life: copy a deployment between databases, export and import,
retention, statistics. Each operation is a library call first; the command line
(``lovia-store copy|export|import|prune|stats``) is a thin layer over it.
"""
