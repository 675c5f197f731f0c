// Emit events as log records through the OpenTelemetry JS SDK's own OTLP/HTTP log exporter, as a
// Node agent does: `node send.mjs <url>/v1/logs json|proto events.json [token]`, with OTEL_JS_DIR
// the directory `make node` installed the SDK into. Each event is {name, ts: [seconds, nanos],
// severity, attributes}. Prints {"exports", "failed"} and exits 0 when every export succeeded.
// tests/ingest/test_js_sdk.py drives it.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const require = createRequire(join(process.env.OTEL_JS_DIR, "package.json"));
const { LoggerProvider, BatchLogRecordProcessor } = require("@opentelemetry/sdk-logs");
const { resourceFromAttributes } = require("@opentelemetry/resources");
const { OTLPLogExporter: JsonExporter } = require("@opentelemetry/exporter-logs-otlp-http");
const { OTLPLogExporter: ProtoExporter } = require("@opentelemetry/exporter-logs-otlp-proto");

const [url, encoding, eventsFile, token] = process.argv.slice(2);
const Exporter = encoding === "proto" ? ProtoExporter : JsonExporter;
const headers = token ? { Authorization: `Bearer ${token}` } : undefined;
const inner = new Exporter({ url, headers });
const results = [];
const exporter = {
  export(records, done) {
    inner.export(records, (result) => {
      results.push(result.code);
      done(result);
    });
  },
  forceFlush: () => inner.forceFlush(),
  shutdown: () => inner.shutdown(),
};
const provider = new LoggerProvider({
  resource: resourceFromAttributes({ "service.name": "agent" }),
  processors: [new BatchLogRecordProcessor({ exporter, maxExportBatchSize: 64 })],
});
const logger = provider.getLogger("memory", "1.0");
for (const event of JSON.parse(readFileSync(eventsFile, "utf8"))) {
  const failed = event.severity === "ERROR";
  logger.emit({
    eventName: event.name,
    body: event.name,
    timestamp: event.ts,
    severityNumber: failed ? 17 : 9,
    severityText: event.severity,
    attributes: event.attributes,
  });
}
await provider.forceFlush();
await provider.shutdown();
const failed = results.filter((code) => code !== 0).length;
console.log(JSON.stringify({ exports: results.length, failed }));
process.exit(results.length > 0 && failed === 0 ? 0 : 1);
