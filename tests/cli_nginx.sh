#!/usr/bin/env bash
# Two `nucleus serve` replicas behind nginx with the configuration shipped in
# packaging/nginx/nucleus.conf (ports changed), all on 127.0.0.1: a bounded
# stream of requests (streamed and plain completions, GET /v1/models, several
# at once) goes through nginx while one replica is killed part-way
# (tests/nginx/loadtest.mjs); nothing nginx could retry may be lost, and
# streams must pass through unbuffered. Prints requests sent, answered,
# failed and lost, and p50/p99 latency. Also: nginx -t accepts the shipped
# file, readiness through nginx, and the drain of a replica on SIGTERM
# (--drain-delay) loses nothing either.
# nginx comes from scripts/setup.sh --deps; without it the test is skipped.
# Arguments: $1 nucleus binary, $2 shared assets, $3 scratch directory.
set -uo pipefail
nucleus=$1 tmp=$3/cli_nginx
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
PATH=$PATH:/usr/sbin:/sbin
if ! command -v nginx >/dev/null; then
  echo "SKIPPED: nginx is not installed (scripts/setup.sh --deps installs it)"
  exit 77
fi
if ! command -v node >/dev/null; then
  echo "FAIL: the nginx test needs node (>= 20) for its client" >&2
  exit 1
fi
rm -rf "$tmp" && mkdir -p "$tmp"
unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY all_proxy ALL_PROXY
STEP_MS=10
. "$(dirname "$0")/cli_lib.sh"
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
}
trap cleanup EXIT
trap 'exit 1' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_replica NAME [options...]: starts `nucleus serve` on a free port;
# sets $replica_pid and $replica_port.
start_replica() {
  local name=$1; shift
  "$nucleus" serve -m "$src/models/stories260K.gguf" --host 127.0.0.1 --port 0 -t 1 \
    --parallel 4 --test-step-delay-ms "$STEP_MS" --quiet "$@" 2>"$tmp/$name.log" &
  replica_pid=$!
  pids+=("$replica_pid")
  replica_port=
  for _ in $(seq 300); do
    replica_port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/$name.log")
    [ -n "$replica_port" ] && return 0
    kill -0 "$replica_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL: replica $name did not start: $(cat "$tmp/$name.log")"
  exit 1
}

# start_nginx PORT_A PORT_B: nginx with the shipped configuration on a free
# port, with its own prefix, pid file, logs and temp directories in $tmp;
# sets $nginx_port and $nginx_pid.
start_nginx() {
  nginx_port=$(free_port)
  local conf=$tmp/nginx/nucleus.conf
  mkdir -p "$tmp/nginx/temp"
  sed -e "s/127\.0\.0\.1:8080;/127.0.0.1:$nginx_port;/" -e "s/127\.0\.0\.1:8081 /127.0.0.1:$1 /" \
      -e "s/127\.0\.0\.1:8082 /127.0.0.1:$2 /" "$src/packaging/nginx/nucleus.conf" >"$conf"
  check "the shipped configuration names the ports the test replaces" \
    grep -q "127.0.0.1:$nginx_port;.*" "$conf"
  check "both replicas are in the upstream" bash -c "grep -q '127.0.0.1:$1 ' '$conf' && grep -q '127.0.0.1:$2 ' '$conf'"
  local user=""
  [ "$(id -u)" -eq 0 ] && user="user root;"  # the workers may then use $tmp as they find it
  cat >"$tmp/nginx/nginx.conf" <<EOF
$user
daemon off;
worker_processes 1;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
events { worker_connections 512; }
http {
    log_format timing '\$remote_addr "\$request" \$status up=\$upstream_addr ups=\$upstream_status '
                      'rt=\$request_time urt=\$upstream_response_time id=\$http_x_client_request';
    access_log $tmp/nginx/access.log timing;
    client_body_temp_path $tmp/nginx/temp/body;
    proxy_temp_path $tmp/nginx/temp/proxy;
    fastcgi_temp_path $tmp/nginx/temp/fastcgi;
    uwsgi_temp_path $tmp/nginx/temp/uwsgi;
    scgi_temp_path $tmp/nginx/temp/scgi;
    include $conf;
}
EOF
  nginx -t -p "$tmp/nginx" -e "$tmp/nginx/error.log" -c "$tmp/nginx/nginx.conf" >"$tmp/nginx/test.log" 2>&1
  check "nginx -t accepts the configuration ($(tr '\n' ' ' <"$tmp/nginx/test.log"))" \
    grep -q "syntax is ok" "$tmp/nginx/test.log"
  nginx -p "$tmp/nginx" -e "$tmp/nginx/error.log" -c "$tmp/nginx/nginx.conf" 2>>"$tmp/nginx/error.log" &
  nginx_pid=$!
  pids+=("$nginx_pid")
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$nginx_port/health" && return 0
    sleep 0.1
  done
  echo "FAIL: nginx did not start: $(cat "$tmp/nginx/error.log")"
  exit 1
}

start_replica a
pid_a=$replica_pid port_a=$replica_port
disown "$pid_a"  # it is killed on purpose: no job-control notice
start_replica b --drain-delay 2
pid_b=$replica_pid port_b=$replica_port
start_nginx "$port_a" "$port_b"
base=http://127.0.0.1:$nginx_port
echo "replicas on ports $port_a (a) and $port_b (b), nginx on $nginx_port"

# Readiness and liveness pass through; /metrics is each replica's own.
check "GET /health/ready through nginx" \
  bash -c "curl -fsS '$base/health/ready' | grep -q '\"status\":\"ready\"'"
check "nginx does not serve one replica's /metrics as the fleet's" \
  test "$(curl -s -o /dev/null -w '%{http_code}' "$base/metrics")" = 404

# The run: one replica killed part-way.
node "$here/nginx/loadtest.mjs" --url "$base" \
  --kill-pid "$pid_a" --kill-addr "127.0.0.1:$port_a" --step-ms "$STEP_MS" \
  --requests 120 --concurrency 6 --tokens 24 --kill-after 40 --json "$tmp/report.json" \
  | tee "$tmp/loadtest.out"
rc=${PIPESTATUS[0]}
check "load test with a replica killed (see above)" test "$rc" -eq 0
check "replica a is dead" bash -c "! kill -0 $pid_a 2>/dev/null"

# Per-replica counters: replica b counted exactly the completions it
# answered (the killed replica's counters died with it; a fleet's totals are
# the sum over the replicas Prometheus scrapes).
answered_b=$(node -e 'const r = require(process.argv[1]).report; console.log(r.completions_by_replica[process.argv[2]] ?? 0)' \
  "$tmp/report.json" "127.0.0.1:$port_b")
jobs_b=$(curl -s "http://127.0.0.1:$port_b/metrics" | sed -n 's/^nucleus_generation_requests_total \([0-9]*\)$/\1/p')
check "replica b's nucleus_generation_requests_total ($jobs_b) = completions it answered ($answered_b)" \
  test "${jobs_b:-x}" = "$answered_b"

# A graceful drain loses nothing: start a new replica c, let nginx use it,
# then SIGTERM replica b (--drain-delay 2) while requests continue.
start_replica c
pid_c=$replica_pid port_c=$replica_port
sed -i "s/127\.0\.0\.1:$port_a /127.0.0.1:$port_c /" "$tmp/nginx/nucleus.conf"
kill -HUP "$nginx_pid"  # reload: a and its failure history leave, c joins
sleep 1
node -e '
const [base, pid] = [process.argv[1], Number(process.argv[2])];
const body = JSON.stringify({ prompt: "Once upon a time", max_tokens: 16, temperature: 0 });
let sent = 0, ok = 0, bad = [];
const one = async () => {
  const r = await fetch(base + "/v1/completions", { method: "POST", body, headers: { "content-type": "application/json" } })
    .catch((e) => ({ status: 0, text: async () => String(e) }));
  sent++;
  if (r.status === 200) ok++; else bad.push(`${r.status} ${await r.text()}`.slice(0, 200));
};
(async () => {
  const t0 = Date.now();
  let signalled = false;
  while (Date.now() - t0 < 6000) {
    if (!signalled && Date.now() - t0 > 1000) { process.kill(pid, "SIGTERM"); signalled = true; }
    await Promise.all([one(), one(), one()]);
  }
  console.log(`drain: sent ${sent}, answered ${ok}, failed ${bad.length}`);
  for (const b of bad.slice(0, 5)) console.log("  " + b);
  process.exit(bad.length ? 1 : 0);
})();' "$base" "$pid_b" | tee "$tmp/drain.out"
check "SIGTERM of a replica behind nginx (drain) loses no request" test "${PIPESTATUS[0]}" -eq 0
for _ in $(seq 100); do kill -0 "$pid_b" 2>/dev/null || break; sleep 0.1; done
wait "$pid_b"; rc=$?
check "the drained replica exited 0 (rc=$rc)" test "$rc" -eq 0

check_report
