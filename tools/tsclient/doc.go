// Package tsclient holds what a TypeScript shell team does with
// configs/schema: generate types with json-schema-to-typescript (gen.mjs,
// every $defs entry a type), type-check a client of every op, event and
// hub frame against them (client.ts, tsc strict), and compile the schemas
// with ajv in strict mode, validating the daemon's golden lines
// (check.mjs). Its Go test runs the three with the pinned npm packages of
// package-lock.json; make test runs it, and it needs node and npm.
package tsclient
