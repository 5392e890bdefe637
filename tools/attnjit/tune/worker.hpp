#pragma once
// The worker side of a sweep: `attnjit tune-worker --device N` (and the tests' own worker
// binary, which adds test-only kernel families). It reads one JSON request per line on
// stdin and answers one JSON line on stdout:
//
//   {"cmd":"setup","op":OP,"shape":{...},"reference":{candidate},"warmup":W,"iters":N}
//      → {"status":"ok","ms":...}   inputs built, the reference candidate run and kept
//   {"cmd":"run","candidate":{...}}
//      → {"status":"ok","us":median} | {"status":"mismatch","error":...}
//        | {"status":"launch_failed","error":...} | {"status":"fault","error":...}
//
// An answer with "restart": true means the worker exits after it: any driver error may
// have left the CUDA context unusable (an illegal address or a trap is sticky), and a
// faulted context is never reused. Nothing but answers is written to stdout.
//
// What it measures is the op's harness problem (harness/problem.hpp): the shape's inputs
// built once with copies that keep L2 cold, each candidate planned and checked against the
// reference candidate's output before it is timed.
#include <vector>

#include "harness/problem.hpp"

namespace attnjit::tune {

// Serves requests until stdin closes (0) or a driver error (3). The database is switched
// off in the worker (ATTNJIT_TUNING_DB=off), so a candidate leaving a choice to the op
// (num_splits = 0) gets the built-in heuristic, never an earlier sweep's answer.
// `kinds`: harness::problems(), plus test-only families in the tests' worker.
int worker_main(int device, const std::vector<harness::ProblemKind>& kinds);

}  // namespace attnjit::tune
