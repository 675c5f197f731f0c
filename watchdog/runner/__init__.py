"""The runner: one evaluation (settings + store -> Report), and the rule files of `test-checks`.

Its steps: docs/architecture.md#one-evaluation-end-to-end.
"""
