#!/usr/bin/env bash
# The layers' walls hold: a file of the tokenizer layer cannot include the
# model layer's header, and code linked with only the tokenizer layer cannot
# call the forward pass, while the same probes within reach do build. The
# eval layer (text metrics) sees only base: no tokenizer header, no forward
# pass. (The
# normal build links every layer with only the layers below it:
# src/CMakeLists.txt, nu_layer_check_*.)
#   layering.sh BUILD_DIR
set -u
build=$1
fail=0
probe() { # probe TARGET expect(ok|fail) PATTERN-of-the-failure
    local out
    out=$(cmake --build "$build" --target "$1" 2>&1)
    local rc=$?
    if [ "$2" = ok ]; then
        if [ $rc -ne 0 ]; then echo "FAIL: $1 should build:"; echo "$out" | tail -5; fail=1; fi
    else
        if [ $rc -eq 0 ]; then echo "FAIL: $1 built, but the layering should refuse it"; fail=1
        elif ! grep -q "$3" <<<"$out"; then echo "FAIL: $1 failed for another reason:"; echo "$out" | tail -5; fail=1
        fi
    fi
}
probe nu_probe_own_include ok
probe nu_probe_upward_include fail "model.h: No such file"
probe nu_probe_own_call ok
probe nu_probe_upward_call fail "undefined reference to .nu_decode"
probe nu_probe_eval_own_include ok
probe nu_probe_eval_upward_include fail "tokenizer.h: No such file"
probe nu_probe_eval_own_call ok
probe nu_probe_eval_upward_call fail "undefined reference to .nu_decode"
[ $fail -eq 0 ] && echo "layering: 8 probes as expected"
exit $fail
