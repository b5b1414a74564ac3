// svix_sign.js - sign a webhook delivery with Svix's real library, for
// tests/integration/test_clients.py.
//
//   NODE_PATH=<cache>/node_modules node svix_sign.js SECRET MSG_ID UNIX_SECONDS < body
//
// Prints the svix-signature header value ("v1,<base64>") that
// new Webhook(SECRET).sign(MSG_ID, date, body) makes.
'use strict';

const {Webhook} = require('svix');

const [secret, msgId, seconds] = process.argv.slice(2);
const chunks = [];
process.stdin.on('data', (c) => chunks.push(c));
process.stdin.on('end', () => {
  const payload = Buffer.concat(chunks).toString('utf8');
  const date = new Date(Number(seconds) * 1000);
  process.stdout.write(new Webhook(secret).sign(msgId, date, payload) + '\n');
});
