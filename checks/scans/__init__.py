"""The shared scans the check kinds add to: session (`session`, read from the events or the
session state), window (`window`), which judges which (`plans`), bound parameters (`binder`);
docs/architecture.md#a-check-kind-one-module.
"""
