// validate.js - checks constrained-generation outputs against their JSON
// Schemas with ajv (draft 2020-12) and ajv-formats, validators nucleus did
// not write.
//
// usage: node validate.js CASES.json
//   CASES.json: [{"name": "...", "schema": {...} | null, "outputs": ["...", ...]}, ...]
//   A null schema means "any JSON object".
// Prints one line per invalid output and a summary; exits 1 if any output
// does not parse or does not validate.
"use strict";
const fs = require("fs");
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats").default;

function main() {
  if (process.argv.length !== 3) {
    console.error("usage: node validate.js CASES.json");
    process.exit(2);
  }
  const cases = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  // strict, except for the type checks that flag legal schemas (a "required" in an
  // allOf branch without its own "type")
  const ajv = new Ajv2020({ allErrors: true, strict: true, strictTypes: false, strictTuples: false });
  addFormats(ajv);
  let total = 0, bad = 0;
  for (const c of cases) {
    const schema = c.schema === null ? { type: "object" } : c.schema;
    const check = ajv.compile(schema);
    for (const text of c.outputs) {
      total++;
      let value;
      try {
        value = JSON.parse(text);
      } catch (e) {
        bad++;
        console.log(`${c.name}: does not parse (${e.message}): ${JSON.stringify(text)}`);
        continue;
      }
      if (!check(value)) {
        bad++;
        console.log(`${c.name}: invalid ${JSON.stringify(text)}: ${ajv.errorsText(check.errors)}`);
      }
    }
  }
  console.log(`ajv: ${total} outputs in ${cases.length} schemas, ${total - bad} valid, ${bad} invalid`);
  process.exit(bad === 0 && total > 0 ? 0 : 1);
}

main();
