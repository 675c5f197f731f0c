"""`python -m watchdog` runs the command line."""

from watchdog.cli.main import run

run()
