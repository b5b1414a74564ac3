// validate_openapi.js - docs/openapi.yaml checked by real validators, and real answers checked
// against it, for tests/integration/test_openapi.py.
//
//   NODE_PATH=<cache>/node_modules node validate_openapi.js FILE [ANSWERS.json]
//
// 1. @apidevtools/swagger-parser parses FILE, resolves every $ref and validates the document
//    against the OpenAPI 3.1 JSON Schema (which leaves the Schema Objects to step 2);
// 2. ajv (JSON Schema 2020-12, the dialect of OpenAPI 3.1) compiles every Schema Object in
//    strict mode: an unknown or misspelt keyword, or a malformed schema, fails;
// 3. every example (of a parameter, a header or a media type) validates against its schema;
// 4. with ANSWERS, a JSON array of the proxy's real answers
//    [{"response": NAME, "status": N, "content_type": T, "headers": {name: value}, "body": {...}}]:
//    each validates against components.responses[NAME]: the body against the schema of its
//    content type, with no member the schema does not name; the status among the ones the
//    problem schema allows (and the problem's own `status` equal to it); every required header
//    present, and every header the response describes valid under its schema.
// Prints one line per failure and exits 1; prints "ok ..." lines and exits 0; exits 2 when
// FILE or ANSWERS cannot be read or a package is missing.
'use strict';

const fs = require('fs');

let SwaggerParser;
let Ajv2020;
try { // a missing package is exit 2, never read as an invalid document
  SwaggerParser = require('@apidevtools/swagger-parser');
  Ajv2020 = require('ajv/dist/2020');
} catch (err) {
  console.error(`validate_openapi.js: ${err.message} (NODE_PATH: the locked packages)`);
  process.exit(2);
}

// OpenAPI's own keywords of a Schema Object (3.1 section 4.8.24), beside JSON Schema's
const OPENAPI_SCHEMA_KEYWORDS = ['discriminator', 'xml', 'externalDocs', 'example'];
const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

function newAjv() {
  const ajv = new Ajv2020({
    strict: true, strictTypes: false, strictRequired: false, allErrors: true,
    validateFormats: false,
  });
  ajv.addVocabulary(OPENAPI_SCHEMA_KEYWORDS);
  return ajv;
}

// Every place of the (dereferenced) document that holds a Schema Object or an example:
// [{where, schema, examples: [values]}].
function schemaSites(api) {
  const sites = [];
  const add = (where, holder) => {
    if (!holder || typeof holder !== 'object' || holder.schema === undefined)
      return;
    const examples = [];
    if (holder.example !== undefined)
      examples.push(holder.example);
    for (const ex of Object.values(holder.examples || {}))
      if (ex && ex.value !== undefined)
        examples.push(ex.value);
    sites.push({where, schema: holder.schema, examples});
  };
  const response = (where, r) => {
    for (const [name, h] of Object.entries((r && r.headers) || {}))
      add(`${where}.headers.${name}`, h);
    for (const [type, m] of Object.entries((r && r.content) || {}))
      add(`${where}.content.${type}`, m);
  };
  const components = api.components || {};
  for (const [name, s] of Object.entries(components.schemas || {}))
    sites.push({where: `components.schemas.${name}`, schema: s, examples: []});
  for (const [name, p] of Object.entries(components.parameters || {}))
    add(`components.parameters.${name}`, p);
  for (const [name, h] of Object.entries(components.headers || {}))
    add(`components.headers.${name}`, h);
  for (const [name, r] of Object.entries(components.responses || {}))
    response(`components.responses.${name}`, r);
  for (const [path, item] of Object.entries(api.paths || {})) {
    for (const method of METHODS) {
      const op = item[method];
      if (!op)
        continue;
      const where = `paths.${path}.${method}`;
      (op.parameters || []).forEach((p, i) => add(`${where}.parameters[${i}]`, p));
      for (const [type, m] of Object.entries((op.requestBody && op.requestBody.content) || {}))
        add(`${where}.requestBody.content.${type}`, m);
      for (const [status, r] of Object.entries(op.responses || {}))
        response(`${where}.responses.${status}`, r);
    }
  }
  return sites;
}

function ajvErrors(ajv, errors) {
  return ajv.errorsText(errors, {separator: '; ', dataVar: 'value'});
}

// The property names a schema allows at its top level, through allOf/anyOf/oneOf.
function declared(schema) {
  const names = new Set(Object.keys((schema && schema.properties) || {}));
  for (const k of ['allOf', 'anyOf', 'oneOf'])
    for (const sub of (schema && schema[k]) || [])
      for (const n of declared(sub))
        names.add(n);
  return names;
}

// The subschemas of property `name` in schema, through allOf/anyOf/oneOf.
function subschemas(schema, name) {
  const out = [];
  if (schema && schema.properties && schema.properties[name])
    out.push(schema.properties[name]);
  for (const k of ['allOf', 'anyOf', 'oneOf'])
    for (const sub of (schema && schema[k]) || [])
      out.push(...subschemas(sub, name));
  return out;
}

// Members of value (at path) that no schema of schemas names.
function undeclared(value, schemas, path) {
  const found = [];
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    return found;
  const names = new Set();
  for (const s of schemas)
    for (const n of declared(s))
      names.add(n);
  for (const [k, v] of Object.entries(value)) {
    if (!names.has(k)) {
      found.push(`${path}${k}`);
      continue;
    }
    const subs = [];
    for (const s of schemas)
      subs.push(...subschemas(s, k));
    found.push(...undeclared(v, subs, `${path}${k}.`));
  }
  return found;
}

// The statuses a problem schema allows: the const or enum of `status` in its allOf parts.
function allowedStatuses(schema) {
  let allowed = null;
  for (const s of subschemas(schema, 'status')) {
    const these = s.const !== undefined ? [s.const] : s.enum;
    if (these)
      allowed = allowed === null ? these : allowed.filter((x) => these.includes(x));
  }
  return allowed;
}

function headerValue(schema, text) {
  const type = schema && schema.type;
  if (type === 'boolean')
    return text === 'true' ? true : text === 'false' ? false : text;
  if (type === 'integer')
    return /^[0-9]+$/.test(text) ? Number(text) : text;
  return text;
}

function checkAnswers(ajv, api, answers, fail) {
  const responses = (api.components && api.components.responses) || {};
  answers.forEach((a, i) => {
    const where = `answer ${i} (${a.response}, ${a.status} ${a.content_type})`;
    const r = responses[a.response];
    if (!r) {
      fail(`${where}: components.responses has no ${a.response}`);
      return;
    }
    const type = String(a.content_type || '').split(';')[0].trim().toLowerCase();
    const media = r.content && r.content[type];
    if (!media) {
      fail(`${where}: the response describes no ${type} content`);
      return;
    }
    const validate = ajv.compile(media.schema);
    if (!validate(a.body))
      fail(`${where}: the body does not match its schema: ${ajvErrors(ajv, validate.errors)}`);
    for (const extra of undeclared(a.body, [media.schema], ''))
      fail(`${where}: the body has the member ${extra}, which the schema does not name`);
    const problem = r.content['application/problem+json'];
    const allowed = problem ? allowedStatuses(problem.schema) : null;
    if (allowed !== null && !allowed.includes(a.status))
      fail(`${where}: status ${a.status}, the response allows ${JSON.stringify(allowed)}`);
    if (type === 'application/problem+json' && a.body && a.body.status !== a.status)
      fail(`${where}: the problem says status ${a.body.status}`);
    const got = {};
    for (const [k, v] of Object.entries(a.headers || {}))
      got[k.toLowerCase()] = v;
    for (const [name, h] of Object.entries(r.headers || {})) {
      const text = got[name.toLowerCase()];
      if (text === undefined) {
        if (h.required)
          fail(`${where}: the required header ${name} is missing`);
        continue;
      }
      const check = ajv.compile(h.schema || {});
      if (!check(headerValue(h.schema, text)))
        fail(`${where}: header ${name}: ${JSON.stringify(text)}: ${ajvErrors(ajv, check.errors)}`);
    }
  });
}

async function main() {
  const [file, answersFile] = process.argv.slice(2);
  let failures = 0;
  const fail = (msg) => {
    failures++;
    console.log(`FAIL ${msg}`);
  };
  if (!file) {
    console.error('usage: validate_openapi.js FILE [ANSWERS.json]');
    process.exit(2);
  }
  let answers = null;
  try {
    fs.accessSync(file, fs.constants.R_OK);
    if (answersFile)
      answers = JSON.parse(fs.readFileSync(answersFile, 'utf8'));
  } catch (err) {
    console.error(`validate_openapi.js: ${err.message}`);
    process.exit(2);
  }
  // 1. the document, against the OpenAPI 3.1 schema, every $ref resolved
  try {
    await SwaggerParser.validate(file);
    console.log(`ok ${file}: a valid OpenAPI ${(await SwaggerParser.parse(file)).openapi} document`);
  } catch (err) {
    fail(`${file}: ${err.message}`);
    process.exit(1);
  }
  const api = await SwaggerParser.dereference(file);
  const ajv = newAjv();
  // 2. and 3. every Schema Object compiles strictly, and every example matches its schema
  let schemas = 0;
  let examples = 0;
  const broken = new Map(); // a schema's error -> the places that hold it (one line for all)
  for (const site of schemaSites(api)) {
    let validate;
    try {
      validate = ajv.compile(site.schema);
      schemas++;
    } catch (err) {
      if (!broken.has(err.message))
        broken.set(err.message, []);
      broken.get(err.message).push(`${site.where}.schema`);
      continue;
    }
    for (const ex of site.examples) {
      examples++;
      if (!validate(ex))
        fail(`${site.where}: the example ${JSON.stringify(ex)} does not match the schema: ` +
             ajvErrors(ajv, validate.errors));
    }
  }
  for (const [message, where] of broken)
    fail(`${where[0]}: ${message}` +
         (where.length > 1 ? ` (and ${where.length - 1} schemas that hold it)` : ''));
  if (failures === 0)
    console.log(`ok ${schemas} schemas compile (JSON Schema 2020-12, strict), ${examples} ` +
                'examples match them');
  // 4. the answers
  if (answers !== null) {
    const before = failures;
    checkAnswers(ajv, api, answers, fail);
    if (failures === before)
      console.log(`ok ${answers.length} answers match their responses`);
  }
  process.exit(failures === 0 ? 0 : 1);
}

main().catch((err) => {
  console.error(`validate_openapi.js: ${err.stack || err}`);
  process.exit(2);
});
