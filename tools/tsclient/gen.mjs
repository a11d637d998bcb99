// Generates TypeScript types from the wire schemas with
// json-schema-to-typescript, one file per schema, every $defs entry a
// type of its own.
import { compileFromFile } from "json-schema-to-typescript";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
const [schemaDir, outDir] = process.argv.slice(2);
mkdirSync(outDir, { recursive: true });
for (const name of ["control-request", "control-answer", "control-event", "hub-up", "hub-down"]) {
  const ts = await compileFromFile(join(schemaDir, `${name}.schema.json`), {
    cwd: schemaDir,
    unreachableDefinitions: true,
    additionalProperties: false,
    bannerComment: `// Generated from configs/schema/${name}.schema.json by json-schema-to-typescript.`,
  });
  writeFileSync(join(outDir, `${name}.ts`), ts);
}
