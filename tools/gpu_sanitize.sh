#!/usr/bin/env bash
# compute-sanitizer (memcheck, initcheck, synccheck, racecheck) over the GPU tests that run
# every shipped kernel at small sizes: each op's main kernel, its schedule, combine and
# check kernels, the seesaw hand-off reproduction, and both ops on hostile device values in
# unchecked mode (drill 10: memcheck shows they stay in bounds). Each (tool, test) pair gets
# a time limit; a pair that runs past it is reported as such, never as clean. A pair with reports
# passes only when tools/sanitizer_check.py finds every one in tools/sanitizer_known.txt
# (racecheck's known limits, each explained in docs/sanitizers.md).
#   tools/gpu_sanitize.sh TEST_BINARY OUT_DIR [PAIR_TIMEOUT_S]
set -uo pipefail
bin="$1" out="$2" limit="${3:-120}"
mkdir -p "$out"
export ATTNJIT_REQUIRE_GPU=1
tests=(
  "tma_copy replays from a CUDA graph after its plan"
  "mla_decode lse is optional and does not change out"
  "mla_decode with the softmax-warpgroup schedule"
  "mla_decode checked mode names the first bad offset, length or table entry"
  "seesaw hand-offs: a delayed writer is seen after the barrier"
  "merge_states in place equals out of place bit for bit"
  "merge_states replays from a CUDA graph with new states"
  "mha_fwd lse is optional and does not change out"
  "mha_fwd softcap, ALiBi and sinks (±inf included)"
  "mha_fwd persistent launch"
  "mha_fwd checked mode names the first bad offset, length or table entry"
  "mla_decode unchecked: hostile lengths, table entries and offsets stay in bounds"
  "mla_decode_sparse replays from a CUDA graph with new indices"
  "mla_decode_sparse checked mode names the first bad index or length"
  "mla_prefill_sparse replays from a CUDA graph with new indices"
  "mla_prefill_sparse: one plan serves every token count"
  "mla_prefill_sparse checked mode names the first bad index or length"
  "mla_prefill_sparse: every length 0 gives out 0, lse and max logit -inf"
  "mla_prefill_sparse's softmax_wg schedule matches float64"
  "mla_decode_branch_fp8's rope stage: q bit for bit, hostile positions write nothing"
  "mla_decode_branch_fp8 replays from a CUDA graph with new activations"
  "mla_decode_branch_fp8's projection: one small call per tile shape"
  "mla_decode_branch_fp8 (sparse) replays from a CUDA graph with new indices"
  "mha_fwd unchecked: hostile lengths, table entries and offsets stay in bounds"
  "mla_decode_fp8's three-tensor form equals the 640-byte form bit for bit"
  "mla_decode_fp8 replays from a CUDA graph with new lengths and values"
  "mla_fp8_quantize matches its host reference bit for bit (every grouping and form)"
  "mla_decode_fp8's fp8 wgmma kernel matches float64"
  "mla_decode_fp8's seesaw kernel matches float64"
  "mla_decode_fp8's narrow kernel matches float64"
  "mla_decode_fp8's narrow kernel with f32 promotion every k32 step matches float64"
  "mla_decode_fp8's widening kernel matches float64"
)
status=0
: >"$out/sanitize.txt"
for tool in memcheck initcheck synccheck racecheck; do
  for t in "${tests[@]}"; do
    log="$out/$tool-$(echo "$t" | tr -c 'a-zA-Z0-9' '_' | cut -c1-60).log"
    start=$(date +%s)
    # Catch2 reads a comma as "or" between test specs: escape the names' commas.
    timeout -s KILL "$limit" compute-sanitizer --tool "$tool" --error-exitcode 99 \
      "$bin" "${t//,/\\,}" >"$log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
    known=""
    [ $rc = 99 ] && known=$(python3 "$(dirname "$0")/sanitizer_check.py" "$log") && rc=0 && \
      summary="$summary; known only: $(echo "$known" | grep -c known:) group(s)"
    case $rc in
      0) verdict="clean" ;;
      137|124) verdict="TIMED OUT after ${limit} s"; status=1 ;;
      *) verdict="FAILED rc=$rc"; status=1 ;;
    esac
    printf '%-9s %-75s %-22s %4ss  %s\n' "$tool" "$t" "$verdict" "$(( $(date +%s) - start ))" \
      "$summary" | tee -a "$out/sanitize.txt"
    [ -n "$known" ] && echo "$known" | sed 's/^/    /' >>"$out/sanitize.txt"
    # One file back per run: the first reports of each failing pair, then its log removed.
    if [ $rc != 0 ]; then
      { echo "=== $tool: $t"; head -60 "$log"; } >>"$out/failures.txt"
    fi
    rm -f "$log"
  done
done
exit $status
