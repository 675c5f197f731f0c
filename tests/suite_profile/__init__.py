"""Where the suite's CPU goes, by process: see `__main__.py` and docs/development.md."""
