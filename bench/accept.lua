-- wrk script of `make bench` (bench/accept_http.py). BENCH_MODE=accept: every request is a
-- POST /api/v1/notifications with an Idempotency-Key and a body of its own (no replays), sent with
-- the tokens of BENCH_TOKENS (comma-separated; several: their clients in turn, each request the
-- next one's). Any mode: one line "BENCH {json}" with the totals and latency percentiles
-- (microseconds) at the end, which the bench reads.

local mode = os.getenv("BENCH_MODE") or "get"
local tokens = {}
for token in string.gmatch(os.getenv("BENCH_TOKENS") or "", "[^,]+") do
  table.insert(tokens, "Bearer " .. token)
end
local prefix = os.getenv("BENCH_KEY_PREFIX") or "wrk"
local threads = {}
local counter = 0

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_number", #threads)
end

if mode == "accept" then
  if #tokens == 0 then
    error("BENCH_TOKENS is not set")
  end
  local headers = {["Content-Type"] = "application/json"}

  function request()
    counter = counter + 1
    local key = string.format("%s-%d-%d", prefix, thread_number, counter)
    headers["Idempotency-Key"] = key
    headers["Authorization"] = tokens[(counter + thread_number) % #tokens + 1]
    local body = string.format(
      '{"user_id":"u%d-%d","subject":"Bench","message":"Hello, request %s.","to":"u%d.%d@example.com"}',
      thread_number, counter, key, thread_number, counter
    )
    return wrk.format("POST", nil, headers, body)
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests":%d,"duration_us":%d,"p50_us":%.0f,"p90_us":%.0f,"p99_us":%.0f,"max_us":%.0f,' ..
      '"connect_errors":%d,"read_errors":%d,"write_errors":%d,"status_errors":%d,"timeouts":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, e.connect, e.read, e.write, e.status, e.timeout
  ))
end
