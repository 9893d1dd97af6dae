# cli_lib.sh - what the command-line tests share; source it after `set -uo pipefail`.
#   check DESCRIPTION COMMAND...   runs COMMAND; counts a failure (with
#                                   DESCRIPTION) when it exits non-zero
#   check_report                    prints the counts; its status is the verdict
fail=0 n=0

check() {
  local what=$1
  shift
  n=$((n + 1))
  if ! "$@"; then
    echo "FAIL: $what"
    fail=$((fail + 1))
  fi
}

check_report() {
  echo "$((n - fail)) passed, $fail failed"
  [ "$fail" -eq 0 ]
}
