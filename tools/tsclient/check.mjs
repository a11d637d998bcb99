// Compiles every wire schema with ajv in strict mode, as a shell team's
// client would (draft 2020-12, formats, the request's discriminator), and
// validates the daemon's golden lines against them: each argument after
// the schema directory is a control golden file (.jsonl) or a hub golden
// frame (up_*.json, down_*.json).
// It prints one line per problem and exits 1 if there is any.
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { readFileSync } from "node:fs";
import { basename } from "node:path";

const [schemaDir, ...golden] = process.argv.slice(2);
const ajv = new Ajv2020({ strict: true, allErrors: true, discriminator: true });
addFormats(ajv);
const names = ["control-request", "control-answer", "control-event", "hub-up", "hub-down"];
let problems = 0;
for (const n of names) ajv.addSchema(JSON.parse(readFileSync(`${schemaDir}/${n}.schema.json`, "utf8")));
const v = {};
for (const n of names) {
  try {
    v[n] = ajv.getSchema(`https://octosup.invalid/${n}.schema.json`);
  } catch (e) {
    console.log(`${n}: ${e.message}`);
    problems++;
  }
}
if (problems) process.exit(1);

// A request with an unknown op gets one error, not one per op.
v["control-request"]({ id: 1, op: "stat" });
if (v["control-request"].errors?.length !== 1) {
  console.log(`a request of an unknown op got ${v["control-request"].errors?.length} errors, want 1`);
  problems++;
}
for (const file of golden) {
  const name = basename(file);
  if (name.endsWith(".json")) {
    // a hub golden frame: up_*.json or down_*.json, one frame
    const schema = name.startsWith("up_") ? "hub-up" : "hub-down";
    if (!v[schema](JSON.parse(readFileSync(file, "utf8")))) {
      console.log(`${name}: ${schema}: ${ajv.errorsText(v[schema].errors)}`);
      problems++;
    }
    continue;
  }
  // a control golden file: "> " requests (some deliberately malformed,
  // which the Go tests hold), "< " answers and events
  for (const [i, line] of readFileSync(file, "utf8").split("\n").entries()) {
    if (!line.startsWith("< ")) continue;
    const msg = JSON.parse(line.slice(2));
    const schema = "event" in msg ? "control-event" : "control-answer";
    if (!v[schema](msg)) {
      console.log(`${name}:${i + 1}: ${schema}: ${ajv.errorsText(v[schema].errors)}`);
      problems++;
    }
  }
}
process.exit(problems ? 1 : 0);
