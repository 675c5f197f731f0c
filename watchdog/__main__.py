"""`python -m watchdog` runs the command line."""

from watchdog.cli import run

run()
