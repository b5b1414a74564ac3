-- GET /blob/10MiB: a 10 MiB file from the upstream nginx, on no route of the proxy (the
-- pass-through path: streamed both ways). tests/bench/run reports CPU time per MiB.
wrk.method = "GET"
wrk.path = "/blob/" .. (os.getenv("BENCH_DOWNLOAD_MIB") or "10") .. "MiB"
