// A webhook receiver that verifies every delivery with the standardwebhooks package
// (its default 5-minute tolerance), the way a receiver behind a signing inbox would.
//
// Usage: node verify_receiver.js PORT LOG_FILE REFUSE_FIRST
//   env SIGN_SECRET: the whsec_ secret the proxy signs with (delivery.sign.secret).
// Each POST appends one JSON line to LOG_FILE: the arrival time t (unix seconds), the
// event (Idempotency-Key), whether the signature verified (and the library's error
// if not), the status answered and every header (names lowercased). A delivery that
// does not verify gets 401; the first REFUSE_FIRST verified attempts of each event
// get 500 (a receiver that is failing), the rest 204. After the last refusal it stops
// listening (a receiver that went down), so no retry reaches it until it is started again.
"use strict";
const fs = require("fs");
const http = require("http");
const { Webhook } = require("standardwebhooks");

const [port, logFile, refuseFirst] = process.argv.slice(2);
const wh = new Webhook(process.env.SIGN_SECRET);
const seen = new Map();
let refused = 0;

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const t = Date.now() / 1000;
    const body = Buffer.concat(chunks).toString("utf8");
    let verified = false, error = null;
    try {
      wh.verify(body, req.headers);
      verified = true;
    } catch (e) {
      error = String(e.message || e);
    }
    const event = req.headers["idempotency-key"] || null;
    let status = 401;
    if (verified) {
      const n = (seen.get(event) || 0) + 1;
      seen.set(event, n);
      status = n <= Number(refuseFirst) ? 500 : 204;
    }
    fs.appendFileSync(logFile, JSON.stringify({ t, event, verified, error, status,
                                                headers: req.headers, body }) + "\n");
    const down = status === 500 && ++refused >= Number(refuseFirst);
    res.writeHead(status, down ? { "Content-Length": "0", "Connection": "close" }
                               : { "Content-Length": "0" });
    res.end();
    if (down)
      server.close();
  });
});
server.listen(Number(port), "127.0.0.1");
