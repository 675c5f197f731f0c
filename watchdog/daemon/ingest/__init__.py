"""The daemon as an OTLP/HTTP receiver: logs and traces in, the exporter's tables out.

`otlp` decodes a request and maps its records to rows (`values`: attribute
values as the exporter writes them), `spool` keeps what was accepted until
it is in the store, `loader` inserts it (in a child process), `receiver` is
the HTTP side, `service` ties them to the daemon. Start at
docs/start-without-clickhouse.md; the design is in docs/architecture.md.
"""
