-- wrk script: POST the graph in $COIL_GRAPH to /v1/compile (a cache hit
-- once the first request has compiled it).
local f = assert(io.open(os.getenv("COIL_GRAPH"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
wrk.headers["Content-Type"] = "application/json"
f:close()
