// tests/bench/peer-node/peer.js - the Node.js peer of tests/bench/run: an Idempotency-Key sidecar
// as a Node.js team might write one in front of the same upstream, on the same Redis, so that its
// CPU per request sits beside the proxy's and nginx's in the bench's main table. It is a
// yardstick, not a product: what it does is the common shape of such sidecars.
//
//   POST with Idempotency-Key: claim the key in Redis (SET NX PX, 24 h) with a fingerprint of
//     the request (SHA-256 of method, path and body); the winner forwards the request to the
//     upstream, stores the answer (status, headers, body; SET PX) and answers; a retry of a
//     finished key gets the stored answer with `Idempotent-Replayed: true`; a retry while the
//     first is in progress polls every 10 ms for up to 5 s, then answers 409; a key reused with
//     another request answers 409 too (as the proxy does). An upstream failure releases the
//     claim and answers 502.
//   anything else: forwarded as is.
//
// Usage: node peer.js LISTEN_PORT UPSTREAM_PORT REDIS_URL   (127.0.0.1 only)
// Needs @redis/client (tests/bench/peer-node/package-lock.json: `npm ci` here); the rest is
// node's standard library.
'use strict';
const http = require('node:http');
const crypto = require('node:crypto');
const { createClient } = require('@redis/client');

const [listenPort, upstreamPort, redisUrl] = process.argv.slice(2);
if (!listenPort || !upstreamPort || !redisUrl) {
  console.error('usage: node peer.js LISTEN_PORT UPSTREAM_PORT REDIS_URL');
  process.exit(2);
}

const TTL_MS = 24 * 3600 * 1000;
const POLL_MS = 10;
const WAIT_MS = 5000;
const PREFIX = 'peer:';
// hop-by-hop fields (RFC 9110 7.6.1) and the length, which node sets from the body it sends
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade',
  'proxy-connection', 'content-length']);

const redis = createClient({ url: redisUrl });
redis.on('error', (e) => console.error(`redis: ${e.message}`));
const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });

function endToEnd(headers) {
  const out = {};
  for (const [k, v] of Object.entries(headers)) if (!HOP.has(k)) out[k] = v;
  return out;
}

// The upstream's answer to (req, body) as {status, headers, body (Buffer)}.
function forward(req, body) {
  return new Promise((resolve, reject) => {
    const up = http.request({ host: '127.0.0.1', port: upstreamPort, method: req.method,
      path: req.url, headers: { ...endToEnd(req.headers), 'content-length': body.length }, agent },
    (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: endToEnd(res.headers),
        body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    up.on('error', reject);
    up.end(body);
  });
}

function answer(res, status, headers, body) {
  res.writeHead(status, { ...headers, 'content-length': body.length });
  res.end(body);
}

function problem(res, status, title) {
  answer(res, status, { 'content-type': 'application/problem+json' },
    Buffer.from(JSON.stringify({ title, status })));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The stored state of a key that another request claimed first: the finished record, or null
// when it is still in progress after WAIT_MS (or vanished: the first request failed).
async function waitForRecord(key) {
  for (let waited = 0; ; waited += POLL_MS) {
    const raw = await redis.get(key);
    if (raw === null) return null;
    const rec = JSON.parse(raw);
    if (rec.state === 'done' || waited >= WAIT_MS) return rec;
    await sleep(POLL_MS);
  }
}

async function idempotent(req, res, idemKey, body) {
  const key = PREFIX + idemKey;
  const fp = crypto.createHash('sha256').update(`${req.method} ${req.url}\n`).update(body)
    .digest('hex');
  const won = await redis.set(key, JSON.stringify({ state: 'in_progress', fp }),
    { NX: true, PX: TTL_MS });
  if (won === null) {
    const rec = await waitForRecord(key);
    if (rec === null || rec.state !== 'done') {
      problem(res, 409, 'a request with this Idempotency-Key is in progress');
    } else if (rec.fp !== fp) {
      problem(res, 409, 'this Idempotency-Key was used with another request');
    } else {
      answer(res, rec.status, { ...rec.headers, 'idempotent-replayed': 'true' },
        Buffer.from(rec.body, 'base64'));
    }
    return;
  }
  let r;
  try {
    r = await forward(req, body);
  } catch (e) {
    await redis.del(key);
    problem(res, 502, `upstream: ${e.message}`);
    return;
  }
  await redis.set(key, JSON.stringify({ state: 'done', fp, status: r.status, headers: r.headers,
    body: r.body.toString('base64') }), { PX: TTL_MS });
  answer(res, r.status, r.headers, r.body);
}

async function handle(req, res, body) {
  const idemKey = req.headers['idempotency-key'];
  try {
    if (req.method === 'POST' && idemKey) {
      await idempotent(req, res, idemKey, body);
    } else {
      const r = await forward(req, body);
      answer(res, r.status, r.headers, r.body);
    }
  } catch (e) {
    if (!res.headersSent) problem(res, 502, e.message);
    else res.destroy();
  }
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => handle(req, res, Buffer.concat(chunks)));
});
server.keepAliveTimeout = 60 * 1000;

redis.connect().then(() => {
  server.listen(Number(listenPort), '127.0.0.1', () => console.log(`peer listening on ${listenPort}`));
}, (e) => {
  console.error(`redis: ${e.message}`);
  process.exit(1);
});
