#pragma once
// Warpgroups (4 consecutive warps, 128 threads): the unit that issues wgmma and the unit
// setmaxnreg acts on. Index helpers, register budgets, and the wgmma ordering primitives
// (fence / commit / wait) plus the compiler-level operand fence.
//
// The life of one batch of wgmma, as every Hopper kernel here writes it:
//
//   wgmma_fence_operands(acc);   // compiler: finish all earlier reads/writes of acc
//   wgmma_fence();               // hardware: order those register accesses before the MMAs
//   wgmma_ss<...>(acc, ...);     // one or more wgmma.mma_async (same accumulator shape)
//   wgmma_commit();              // close the batch as one wgmma-group
//   wgmma_wait<0>();             // block until at most 0 groups are still in flight
//   wgmma_fence_operands(acc);   // compiler: no read of acc floats above the wait
#include "common/arch.cuh"

namespace attnjit {

// ---- indices -----------------------------------------------------------------------

// Warpgroup index of this thread, made warp-uniform so role branches do not diverge.
ATTNJIT_DEVICE int warpgroup_id_uniform() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);
}

// 0..127 inside the warpgroup: the "thread" of the wgmma fragment layouts.
ATTNJIT_DEVICE int thread_in_warpgroup() {
  return static_cast<int>(threadIdx.x) % kWarpgroupThreads;
}

// 0..3: which 16-row slice of a 64-row wgmma tile this warp holds.
ATTNJIT_DEVICE int warp_in_warpgroup() { return (static_cast<int>(threadIdx.x) / kWarpSize) % 4; }

// ---- register budgets (setmaxnreg) -------------------------------------------------
// Executed by all threads of a warpgroup (.sync.aligned); moves the warpgroup's per-thread
// register limit. Producers shrink (dec) so consumers can grow (inc) within the SM's 64K
// registers. ptxas honours it only when the kernel has a register cap at entry
// (__launch_bounds__(threads, 1), with the 1) and each warpgroup role is one branch of a
// single if/else; otherwise it warns (C7508) and ignores it. The entry budget must fit all
// warpgroups at once (e.g. 3 warpgroups x 128 threads x 168 registers <= 64K); then, e.g.,
// dealloc<24> in the producer and alloc<240> in two consumers. kRegs: multiple of 8 in
// [24, 256].

template <int kRegs>
ATTNJIT_DEVICE void warpgroup_reg_alloc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256,
                "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

template <int kRegs>
ATTNJIT_DEVICE void warpgroup_reg_dealloc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256,
                "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// ---- wgmma ordering ----------------------------------------------------------------

// wgmma.fence: orders this warpgroup's earlier register accesses (accumulators, A
// fragments) and shared-memory writes before the wgmma.mma_async that follow. Needed before
// the first wgmma of a batch and after any ordinary access to registers a wgmma uses;
// back-to-back wgmma of one accumulator shape need none between them.
ATTNJIT_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

// Closes all wgmma issued since the previous commit into one group.
ATTNJIT_DEVICE void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// Waits until at most kPending committed groups are still running. Accumulators and A
// fragments of the groups that finished may then be read or reused.
template <int kPending>
ATTNJIT_DEVICE void wgmma_wait() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group takes 0..7");
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Compiler-only fence on one register: the empty asm "reads and writes" x, so the
// optimizer cannot move other accesses of x across it (e.g. hoist an accumulator read
// above wgmma_wait, or sink an initialization below wgmma_fence). Emits no instruction.
ATTNJIT_DEVICE void wgmma_fence_operand(float& x) { asm volatile("" : "+f"(x)::"memory"); }
ATTNJIT_DEVICE void wgmma_fence_operand(u32& x) { asm volatile("" : "+r"(x)::"memory"); }

// Whole fragments: float acc[N/2] accumulators, u32 a[4] register A operands.
template <class T, int kCount>
ATTNJIT_DEVICE void wgmma_fence_operands(T (&frag)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) wgmma_fence_operand(frag[i]);
}

}  // namespace attnjit
