-- wrk script for bench/farm: requests drawn at random from a list file (the argument after
-- "--"), one per line: "METHOD PATH KEY [BODY_FILE]".  Compiles carry X-Coil-Key, as libcoil's
-- do.  Each thread draws with its own fixed seed, so both configurations see the same mix.
-- done() prints one line: "RESULT requests/s p50_ms p99_ms non2xx requests".
local reqs = {}
local counter = 0

function setup(thread)
	counter = counter + 1
	thread:set("tid", counter)
end

function init(args)
	local f = assert(io.open(args[1]))
	for line in f:lines() do
		local method, path, key, body_file = line:match("^(%S+) (%S+) (%S+) ?(%S*)$")
		local body = nil
		local headers = { ["X-Coil-Key"] = key }
		if body_file ~= "" then
			local b = assert(io.open(body_file))
			body = b:read("*a")
			b:close()
			headers["Content-Type"] = "application/json"
		end
		reqs[#reqs + 1] = wrk.format(method, path, headers, body)
	end
	f:close()
	math.randomseed(1000 + (tid or 0))
end

function request()
	return reqs[math.random(#reqs)]
end

function done(summary, latency, requests)
	local non2xx = summary.errors.status + summary.errors.connect + summary.errors.read +
		summary.errors.write + summary.errors.timeout
	io.write(string.format("RESULT %.1f %.3f %.3f %d %d\n", summary.requests / (summary.duration / 1e6),
		latency:percentile(50) / 1000, latency:percentile(99) / 1000, non2xx, summary.requests))
end
