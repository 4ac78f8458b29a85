"""`python -m kvplan`."""

from kvplan.cli import run

run()
