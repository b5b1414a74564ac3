// stripe_call.js - one call through Stripe's real Node SDK, for tests/integration/test_clients.py.
//
//   NODE_PATH=<cache>/node_modules node stripe_call.js '{"port": P, "key": K, "params": {...}}'
//
// Creates a PaymentIntent against http://127.0.0.1:P with idempotency key K
// (maxNetworkRetries 2, the SDK's own retry rules) and prints one JSON line:
// {"resolved": true, "id": ...} when the SDK's promise resolved, or
// {"resolved": false, "name", "type", "code", "statusCode", "shouldRetry",
// "contentType", "retryAfter", "recordIdHeader", "recordId"} when it rejected
// (the last three: the Retry-After and Idempotency-Record-Id headers, and the
// error object's record_id member, as the SDK hands them to the application).
// Exits 0 either way; non-zero only if the script itself broke.
'use strict';

const Stripe = require('stripe');

async function main() {
  const args = JSON.parse(process.argv[2]);
  const stripe = new Stripe('sk_test_x', {
    host: '127.0.0.1',
    port: args.port,
    protocol: 'http',
    maxNetworkRetries: args.maxNetworkRetries === undefined ? 2 : args.maxNetworkRetries,
    telemetry: false,
  });
  let out;
  const t0 = Date.now();
  try {
    const intent = await stripe.paymentIntents.create(args.params, {idempotencyKey: args.key});
    out = {resolved: true, id: intent.id === undefined ? null : intent.id};
  } catch (err) {
    const headers = err.headers || {};
    out = {
      resolved: false,
      name: err.constructor.name,
      type: err.type === undefined ? null : err.type,
      rawType: err.raw && err.raw.type !== undefined ? err.raw.type : null,
      code: err.code === undefined ? null : err.code,
      statusCode: err.statusCode === undefined ? null : err.statusCode,
      shouldRetry: headers['stripe-should-retry'] === undefined ? null : headers['stripe-should-retry'],
      contentType: headers['content-type'] === undefined ? null : headers['content-type'],
      retryAfter: headers['retry-after'] === undefined ? null : headers['retry-after'],
      recordIdHeader: headers['idempotency-record-id'] === undefined
        ? null : headers['idempotency-record-id'],
      recordId: err.raw && err.raw.record_id !== undefined ? err.raw.record_id : null,
      message: String(err.message),
    };
  }
  out.ms = Date.now() - t0;
  // exit now: the SDK's keep-alive agent would hold the process until the proxy closes it
  process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(2);
});
