"""The reports: text and JSON, the HTML triage page, its charts, history and files.

What the page shows: docs/operations.md#the-triage-page; the JSON:
docs/spec.md#6-the-report-json---format-json-schema_version-1.
"""
