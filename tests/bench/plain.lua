-- POST /v1/payments without Idempotency-Key: the pass-through (unprotected) path.
-- One fixed request, built once (wrk reuses it), so large bodies cost wrk nothing per request.
dofile((os.getenv("BENCH_DIR") or ".") .. "/common.lua")
wrk.method = "POST"
wrk.path = "/v1/payments"
wrk.headers["Content-Type"] = "application/json"
wrk.body = bench_body(1)
