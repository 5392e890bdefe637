#pragma once
// mla_decode's host internals shared by its files: the checked sizes of a call and the
// argument checks (args.cpp), and the tuned choices (tuning.cpp). The plan and the
// launches (launch.cpp) read both.
#include <cuda.h>

#include <cstdint>

#include "attnjit/ops/mla_decode.hpp"
#include "jit/kernel_table.hpp"
#include "mla_decode/layout.cuh"

namespace attnjit::mla_tuning {

// What the tuning database holds for one shape bucket on the current device.
struct Choice {
  bool found = false;
  MlaDecodeConfig config;
  int num_splits = 0;  // 0: the tuned candidate left the split count to the heuristic
};

// Looked up once per (device, bucket, database generation); never throws (no database,
// no GPU or an unusable entry give found = false).
Choice lookup(DType dtype, int64_t b, int64_t q_len, int64_t h, int64_t page, int64_t max_len);

}  // namespace attnjit::mla_tuning

namespace attnjit::mla_detail {

inline constexpr int kMaxSplits = 256;
inline constexpr int kMaxBatch = 32768;  // grid y of a balanced run: batch + SM slots < 65536

// Host-visible sizes of a call whose arguments passed check_args. Ragged: q_len is the
// max_q_len bound.
struct Sizes {
  bool ragged = false;
  int64_t b = 0, q_len = 0, h = 0, total_q = 0, num_pages = 0, page_size = 0, max_pages = 0;
};

// Every host-visible rule of `a` under config `c`, before anything touches the GPU; errors
// name the argument.
Sizes check_args(const MlaDecodeArgs& a, const MlaDecodeConfig& c);

// Every rule of a plan's shape (errors name "shape.<field>") and of the config against it.
void check_shape(const MlaDecodeShape& s, const MlaDecodeConfig& c);

// A call of sizes `s` is one `plan` was made for; errors name the argument.
void check_matches_plan(const Sizes& s, const MlaDecodePlan& plan);

// The block table [b, max_pages] and cache_lens [b] (both i32) against s.b and s.page_size;
// sets s.max_pages. Shared with mla_decode_fp8, whose table and lengths follow the same rules.
void check_table(const TensorView& block_table, const TensorView& cache_lens, Sizes& s);

// out [b, q_len, h, 512] (ragged [total_q, h, 512]) of out_dtype (out_type names it in the
// message) and the optional lse [b, h, q_len] (ragged [h, total_q]) f32. Both MLA ops.
void check_outputs(const TensorView& out, const TensorView& lse, DType out_dtype,
                   const char* out_type, const Sizes& s);

// Checked mode (ATTNJIT_CHECK=1): runs the validation kernel, synchronizes, and names the
// first bad device-resident value. Never on the hot path.
void device_check(const MlaDecodeArgs& a, const MlaDecodeConfig& c, const Sizes& s, Arch arch,
                  CUstream stream);


// ---- the split-KV machinery (launch.cpp), shared with mla_decode_fp8 --------------------

// Row tiles of block_m packed rows (64; mla_decode_fp8's narrow kernel: 8..32), and the
// pieces the GPU runs at once (one CTA per SM).
int64_t row_tiles(int64_t q_len, int64_t num_heads, int block_m = 64);
int sm_slots(const MlaDecodeShape& s, int sm_count, int block_m = 64);

// A balanced plan's bounds (pieces, partial slots, cut sequences, CTAs) and the workspace
// regions they size; block_n: the keys per tile the schedule counts.
struct BalancedLayout {
  layout::mla_decode::BalanceBounds bound;
  layout::mla_decode::BalancedWorkspace ws;
};
BalancedLayout balanced_layout(const MlaDecodeShape& s, int slots, int invariant_tiles, int block_n);

// The step's balanced schedule kernel (mla_decode_schedule's work). packable: the main
// kernel walks several pieces per CTA, so one-row-tile shapes may be packed (balance.cuh);
// otherwise every CTA gets at most one piece.
void launch_balance(const MlaDecodeShape& shape, int slots, int invariant_tiles, int block_n,
                    bool packable, const int* cache_lens, Workspace workspace, CUstream stream);

// Where a run's partials and schedule live in the workspace.
struct SplitRun {
  bool balanced = false, combine = false;
  int splits = 1;
  float* part_out = nullptr;
  float* part_lse = nullptr;
  const layout::mla_decode::WorkItem* items = nullptr;
  const layout::mla_decode::WorkCounts* counts = nullptr;
  const layout::mla_decode::SplitSeq* split_seqs = nullptr;
  const int* cta_first = nullptr;
  int64_t ctas_bound = 0, cuts_bound = 0;  // balanced: the main grid's y, the combine's cuts
};
SplitRun split_run(const MlaDecodeShape& shape, bool balanced, int splits, int sm_slots,
                   int invariant_tiles, int block_n, const Sizes& s, Workspace workspace);

// The combine kernel after a main kernel that wrote partials (programmatic dependent launch).
// sink: [h] f32 attention sink applied while merging (mla_decode_sparse), or null.
// out_scale: e4m3 out with σ per 128 columns (MlaDecodeArgs::out_scale), or null.
void launch_combine(const jit::Kernel& combine, const SplitRun& r, void* out, float* lse,
                    const layout::mla_decode::QRows& q_rows, const Sizes& s, CUstream stream,
                    const float* sink = nullptr, float* out_scale = nullptr);

}  // namespace attnjit::mla_detail
