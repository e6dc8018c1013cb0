"""`python -m reconciler` is the `reconciler` command."""

from reconciler.cli import app

app(prog_name="reconciler")
