#!/usr/bin/env bash
# `nucleus pull` against a small imitation of the Hugging Face resolve
# endpoint on 127.0.0.1 (HEAD -> 302 with X-Linked-Size / X-Linked-ETag, GET
# -> 302 to a file URL that honours Range): the download lands in the cache
# with the right SHA-256, and a second pull with the server gone is served
# from the cache, as is `generate -m hf:...`.
# Arguments: $1 nucleus binary, $2 shared assets, $3 scratch directory.
set -uo pipefail
nucleus=$1 shared=$2 tmp=$3/cli_pull
model=$shared/models/stories260K.gguf
ref=hf:ggml-org/models/tinyllamas/stories260K.gguf
want_sha=270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d
rm -rf "$tmp" && mkdir -p "$tmp"
unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY all_proxy ALL_PROXY HF_TOKEN
export no_proxy=127.0.0.1 NO_PROXY=127.0.0.1
export NUCLEUS_CACHE=$tmp/cache
. "$(dirname "$0")/cli_lib.sh"
server_pid=

stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    server_pid=
  fi
}
trap stop_server EXIT

cat >"$tmp/server.py" <<'PY'
# A one-file imitation of https://huggingface.co/ORG/REPO/resolve/REV/PATH.
import hashlib, http.server, os, sys

data = open(sys.argv[1], 'rb').read()
sha = hashlib.sha256(data).hexdigest()
RESOLVE = '/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf'
BLOB = '/blobs/stories260K.gguf'

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args):
        pass

    def reply(self, code, headers, body, head):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header('Content-Length', str(len(body)))
        self.send_header('Connection', 'close')
        self.end_headers()
        if not head:
            self.wfile.write(body)
        self.close_connection = True

    def answer(self, head):
        if self.path == RESOLVE and head:
            self.reply(302, [('Location', BLOB), ('X-Linked-Size', str(len(data))),
                             ('X-Linked-ETag', '"%s"' % sha)], b'', head)
        elif self.path == RESOLVE:
            self.reply(302, [('Location', BLOB)], b'', head)
        elif self.path == BLOB:
            start, headers = 0, []
            r = self.headers.get('Range', '')
            if r.startswith('bytes='):
                start = int(r[6:].split('-')[0])
                headers.append(('Content-Range', 'bytes %d-%d/%d' % (start, len(data) - 1, len(data))))
            self.reply(206 if start else 200, headers, data[start:], head)
        else:
            self.reply(404, [], b'Entry not found', head)

    def do_HEAD(self):
        self.answer(True)

    def do_GET(self):
        self.answer(False)

server = http.server.HTTPServer(('127.0.0.1', 0), Handler)
with open(sys.argv[2] + '.tmp', 'w') as f:
    f.write(str(server.server_address[1]))
os.rename(sys.argv[2] + '.tmp', sys.argv[2])
server.serve_forever()
PY

# Help and argument errors need no server.
check "pull --help" bash -c '"$0" pull --help | grep -q "usage: nucleus pull"' "$nucleus"
out=$("$nucleus" pull "hf:org/repo/../x.gguf" 2>&1); rc=$?
check "bad reference is refused" test "$rc" -ne 0 -a "$rc" -lt 128
check "bad reference message" grep -q "^nucleus: invalid model reference" <<<"$out"
out=$("$nucleus" pull "$model" 2>&1); rc=$?
check "a path is not a reference" test "$rc" -ne 0 -a "$rc" -lt 128
check "a path message" grep -q "^nucleus: .*not a model reference" <<<"$out"

# Start the server (bounded by timeout) and wait for its port.
timeout 120 python3 "$tmp/server.py" "$model" "$tmp/port" &
server_pid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
port=$(cat "$tmp/port" 2>/dev/null)
check "server started" test -n "$port"
export NUCLEUS_HF_ENDPOINT=http://127.0.0.1:${port:-9}

# Download: the path on stdout holds the right bytes; progress on stderr.
path=$(timeout 120 "$nucleus" pull "$ref" 2>"$tmp/err1"); rc=$?
check "pull succeeds (rc=$rc, $(tr '\r\n' '  ' <"$tmp/err1"))" test "$rc" -eq 0
check "path is in the cache" test "${path#"$NUCLEUS_CACHE"/}" != "$path"
check "downloaded file's sha256" test "$(sha256sum "$path" 2>/dev/null | cut -d' ' -f1)" = "$want_sha"
check "progress reached 100%" grep -q "100%" "$tmp/err1"

# A file the server does not have: a clear error naming the 404.
out=$(timeout 120 "$nucleus" pull "hf:ggml-org/models/missing.gguf" 2>&1); rc=$?
check "missing file fails" test "$rc" -ne 0 -a "$rc" -lt 128
check "missing file message names 404" grep -q "^nucleus: .*404" <<<"$out"

# With the server gone the cache answers, without any network access.
stop_server
path2=$(timeout 60 "$nucleus" pull "$ref" 2>"$tmp/err2"); rc=$?
check "cached pull succeeds (rc=$rc, $(cat "$tmp/err2"))" test "$rc" -eq 0
check "cached pull prints the same path" test "$path2" = "$path"
check "cached pull says so" grep -q "already in the cache" "$tmp/err2"

# Not cached and no server: a network error, not a crash.
out=$(NUCLEUS_CACHE=$tmp/empty timeout 60 "$nucleus" pull "$ref" 2>&1); rc=$?
check "offline pull of an uncached model fails" test "$rc" -ne 0 -a "$rc" -lt 128
check "offline message" grep -q "^nucleus: cannot download" <<<"$out"
check "offline message says what to do" grep -q "local .gguf file.*NUCLEUS_HF_ENDPOINT.*$tmp/empty" <<<"$out"
check "offline pull leaves nothing in the cache ($(find "$tmp/empty" -mindepth 1 2>/dev/null | head -3))" \
  test -z "$(find "$tmp/empty" -mindepth 1 2>/dev/null)"

# Any command's -m takes the reference (served from the cache).
text=$(timeout 120 "$nucleus" generate -m "$ref" -p "Once upon a time" -n 8 --temp 0 2>"$tmp/err3"); rc=$?
check "generate -m $ref (rc=$rc, $(head -c 300 "$tmp/err3"))" test "$rc" -eq 0
check "generate prints text" test -n "$(tr -d '[:space:]' <<<"$text")"

check_report
