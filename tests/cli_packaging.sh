#!/usr/bin/env bash
# The deployment files in packaging/ against the built executable:
#  - nucleus.service passes `systemd-analyze verify` (when systemd-analyze is
#    there), and its ExecStart, expanded with the example configuration
#    nucleus.env as systemd expands it, starts a server that answers
#    /health/ready and stops cleanly on SIGTERM within TimeoutStopSec;
#  - the Containerfile's runtime stage installs a Debian package for every
#    shared library the executable needs (no container engine is needed).
# Arguments: $1 nucleus binary, $2 shared assets, $3 scratch directory.
set -uo pipefail
nucleus=$(readlink -f "$1") tmp=$3/cli_packaging
PATH=$PATH:/usr/sbin:/sbin
src=$(cd "$(dirname "$0")/.." && pwd)
unit=$src/packaging/nucleus.service env_file=$src/packaging/nucleus.env
rm -rf "$tmp" && mkdir -p "$tmp"
unset http_proxy HTTP_PROXY all_proxy ALL_PROXY
. "$(dirname "$0")/cli_lib.sh"
server_pid=

trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null' EXIT

# The unit, with ExecStart pointing at the built executable.
sed "s|/usr/local/bin/nucleus|$nucleus|" "$unit" >"$tmp/nucleus.service"
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify "$tmp/nucleus.service" >"$tmp/verify.log" 2>&1; rc=$?
  check "systemd-analyze verify (rc=$rc: $(cat "$tmp/verify.log"))" test "$rc" -eq 0 -a ! -s "$tmp/verify.log"
else
  echo "note: systemd-analyze is not installed; the unit file was not verified"
fi

# The example configuration, as systemd reads it (KEY=VALUE lines), with the
# model and port of this test.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
declare -A conf
while IFS= read -r line; do
  [[ "$line" =~ ^([A-Z_]+)=(.*)$ ]] && conf[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
done <"$env_file"
check "nucleus.env sets the variables ExecStart uses" \
  test -n "${conf[NUCLEUS_MODEL]:-}" -a -n "${conf[NUCLEUS_HOST]:-}" -a -n "${conf[NUCLEUS_PORT]:-}"
conf[NUCLEUS_MODEL]=$src/models/stories260K.gguf
conf[NUCLEUS_PORT]=$port
# ExecStart: ${VAR} is one argument, $VAR is split at white space.
exec_line=$(sed -n 's/^ExecStart=//p' "$tmp/nucleus.service")
argv=()
for word in $exec_line; do
  if [[ "$word" =~ ^\$\{([A-Z_]+)\}$ ]]; then
    argv+=("${conf[${BASH_REMATCH[1]}]}")
  elif [[ "$word" =~ ^\$([A-Z_]+)$ ]]; then
    read -ra split <<<"${conf[${BASH_REMATCH[1]}]}"
    argv+=("${split[@]}")
  else
    argv+=("$word")
  fi
done
echo "ExecStart: ${argv[*]}"
"${argv[@]}" -t 1 2>"$tmp/server.log" &
server_pid=$!
for _ in $(seq 200); do
  grep -q "listening on" "$tmp/server.log" && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
check "the unit's command starts a server ($(head -c 400 "$tmp/server.log"))" grep -q "listening on http://127.0.0.1:$port" "$tmp/server.log"
check "it is ready" bash -c "curl -fsS http://127.0.0.1:$port/health/ready | grep -q '\"status\":\"ready\"'"
stop_s=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)$/\1/p' "$tmp/nucleus.service")
t0=$(date +%s%N)
kill -TERM "$server_pid"
ready_during_drain=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health/ready")
wait "$server_pid"; rc=$?
server_pid=
took_ms=$((($(date +%s%N) - t0) / 1000000))
check "SIGTERM: not ready while draining (got $ready_during_drain)" test "$ready_during_drain" = 503
check "SIGTERM: exit 0 (rc=$rc)" test "$rc" -eq 0
check "SIGTERM: stopped in $took_ms ms, within TimeoutStopSec=${stop_s}" \
  test "$took_ms" -lt "$((${stop_s:-0} * 1000))"

# The Containerfile's runtime packages provide every library the executable
# links (as Debian names them; the C library comes with the base image).
runtime=$(awk '/^FROM /{stage++} stage==2' "$src/packaging/Containerfile" | tr -s ' \\\n' '\n')
for lib in $(objdump -p "$nucleus" | awk '/NEEDED/{print $2}'); do
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
  pkg=$(dpkg -S "$path" 2>/dev/null | head -1 | cut -d: -f1)
  [ -z "$pkg" ] && pkg=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -1 | cut -d: -f1)
  case $pkg in libc6 | libasan* | libubsan*) continue ;; esac  # base image; sanitizer builds
  check "the Containerfile installs $pkg (for $lib)" grep -qx "$pkg" <<<"$runtime"
done
check "the build context leaves out build directories" grep -qx '/build\*/' "$src/.containerignore"

check_report
