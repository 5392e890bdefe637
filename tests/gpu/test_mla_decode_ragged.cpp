// mla_decode on the GPU with ragged q ([total_q, h, 576] + row offsets, per-sequence q_len):
// every sequence judged against the float64 reference of that sequence alone, rows of no
// sequence keeping their poison, and a CUDA-graph replay with new offsets and lengths. The
// cases, data and judgement are in mla_decode_cases.hpp.
#include <vector>

#include "gpu/mla_decode_cases.hpp"
#include "support/catch.hpp"
#include "support/gpu.hpp"

using namespace attnjit;
using namespace attnjit::test::mla_gpu;
using test::DeviceBuffer;
using test::MlaComparison;
using test::MlaProblem;
using test::MlaReference;

namespace {

// A ragged call over padded data whose q_len is the bound: sequence i keeps its first
// q_lens[i] tokens (0 allowed), packed back to back into q [total_q, h, 576]; the rows after
// the last sequence belong to none. Each sequence is judged against the float64 reference
// of that sequence alone (its own q_len sets its causal rule); out and lse rows of no
// sequence must keep their poison. The device buffers are fixed at construction, so one
// call can be captured in a CUDA graph and replayed after set() packs new offsets.
class RaggedCall {
 public:
  RaggedCall(const MlaData& d, int total_q, int num_splits, const MlaDecodeConfig& cfg)
      : d_(d), total_q_(total_q) {
    const MlaCase& c = d.spec();
    const int b = c.batch(), h = c.heads;
    q_d_ = DeviceBuffer(static_cast<size_t>(total_q) * q_row() * 2);
    off_d_ = DeviceBuffer((static_cast<size_t>(b) + 1) * 4);
    out_d_ = DeviceBuffer(static_cast<size_t>(total_q) * o_row() * 2);
    lse_d_ = DeviceBuffer(static_cast<size_t>(h) * total_q * 4);
    a_.q = TensorView::contiguous(q_d_.data(), c.dtype, {total_q, h, test::kMlaQkDim});
    a_.q_offsets = TensorView::contiguous(off_d_.data(), DType::kI32, {b + 1});
    a_.max_q_len = c.q_len;
    a_.kv_cache = TensorView::contiguous(d.cache_buffer().data(), c.dtype,
                                         {d.num_pages(), c.page_size, test::kMlaQkDim});
    a_.block_table = TensorView::contiguous(d.table_buffer().data(), DType::kI32, {b, d.max_pages()});
    a_.cache_lens = TensorView::contiguous(d.lens_buffer().data(), DType::kI32, {b});
    a_.out = TensorView::contiguous(out_d_.data(), c.dtype, {total_q, h, test::kMlaVDim});
    a_.lse = TensorView::contiguous(lse_d_.data(), DType::kF32, {h, total_q});
    a_.softmax_scale = static_cast<float>(c.scale);
    MlaDecodeShape shape = mla_decode_shape(a_);
    shape.num_splits = num_splits;
    plan_ = mla_decode_plan(shape, &cfg);
    splits_ = plan_.num_splits;
    workspace_ = DeviceBuffer(plan_.workspace_bytes);
  }

  // One step: the schedule and the run, on `stream` (capturable: no compile, load or
  // allocation).
  void run(CUstream stream) const {
    const Workspace ws{workspace_.bytes() ? workspace_.data() : nullptr, workspace_.bytes()};
    mla_decode_schedule(plan_, a_, ws, stream);
    mla_decode(a_, plan_, ws, stream);
  }

  // Packs the first q_lens[i] tokens of each sequence (from the data's current values),
  // uploads q and the offsets, and poisons out, lse and the workspace.
  void set(const std::vector<int>& q_lens) {
    const int b = d_.spec().batch();
    REQUIRE(q_lens.size() == static_cast<size_t>(b));
    q_lens_ = q_lens;
    offsets_.assign(static_cast<size_t>(b) + 1, 0);
    for (int i = 0; i < b; ++i) offsets_[i + 1] = offsets_[i] + q_lens[static_cast<size_t>(i)];
    REQUIRE(offsets_.back() <= total_q_);
    std::vector<uint16_t> q(static_cast<size_t>(total_q_) * q_row(), 0x3C00);  // no sequence's
    for (int i = 0; i < b; ++i)
      for (int t = 0; t < q_lens[static_cast<size_t>(i)]; ++t) {
        const std::vector<uint16_t> bits = d_.token_bits(i, t);
        std::copy(bits.begin(), bits.end(), q.begin() + (offsets_[i] + t) * q_row());
      }
    q_d_.upload(q);
    off_d_.upload(offsets_);
    out_d_.fill_byte(0xFF);
    lse_d_.fill_byte(0xFF);
    if (workspace_.bytes() > 0) workspace_.fill_byte(0xFF);
  }

  const MlaDecodeArgs& args() const { return a_; }
  int splits() const { return splits_; }

  // Judges every sequence of the last set() and the untouched rows past offsets[b].
  void judge_all(const std::string& label) const {
    const MlaCase& c = d_.spec();
    const int h = c.heads;
    INFO(label << " q_lens [" << fmt::format("{}", fmt::join(q_lens_, ",")) << "] splits " << splits_);
    const auto out_bits = out_d_.download_as<uint16_t>(out_d_.bytes() / 2);
    const auto lse_all = lse_d_.download_as<float>(lse_d_.bytes() / 4);
    const auto lse_bits = lse_d_.download_as<uint32_t>(lse_d_.bytes() / 4);
    for (int i = 0; i < c.batch(); ++i) {
      const int ql = q_lens_[static_cast<size_t>(i)];
      if (ql == 0) continue;  // owns no row of q or out
      const MlaProblem p = d_.sequence_problem(i, ql);
      RunResult r;
      r.splits = splits_;
      r.out.resize(static_cast<size_t>(ql) * o_row());
      for (size_t k = 0; k < r.out.size(); ++k)
        r.out[k] = from_bits(out_bits[offsets_[i] * o_row() + k], c.dtype);
      r.lse.resize(static_cast<size_t>(h) * ql);  // [1, h, q_len] from [h, total_q]
      for (int hh = 0; hh < h; ++hh)
        for (int t = 0; t < ql; ++t)
          r.lse[static_cast<size_t>(hh) * ql + t] =
              lse_all[static_cast<size_t>(hh) * total_q_ + offsets_[i] + t];
      const int len = d_.lens()[static_cast<size_t>(i)];
      // L = 0 leaves every row of the sequence empty: only the structural checks apply.
      const bool some_keys = test::mla_visible_keys(len, ql, ql - 1) > 0;
      judge(p, test::mla_reference(p), r,
            fmt::format("{} ragged seq {} of {}: q_len {} L {}", label, i, c.describe(), ql, len),
            some_keys);
    }
    // Rows past offsets[b] belong to no sequence: untouched.
    int64_t touched = 0;
    for (size_t k = static_cast<size_t>(offsets_.back()) * o_row(); k < out_bits.size(); ++k)
      touched += out_bits[k] != 0xFFFF;
    for (int hh = 0; hh < h; ++hh)
      for (int t = offsets_.back(); t < total_q_; ++t)
        touched += lse_bits[static_cast<size_t>(hh) * total_q_ + t] != 0xFFFFFFFFu;
    CHECK(touched == 0);
  }

 private:
  size_t q_row() const { return static_cast<size_t>(d_.spec().heads) * test::kMlaQkDim; }
  size_t o_row() const { return static_cast<size_t>(d_.spec().heads) * test::kMlaVDim; }

  const MlaData& d_;
  int total_q_ = 0, splits_ = 0;
  MlaDecodeArgs a_;
  MlaDecodePlan plan_;
  std::vector<int> q_lens_;
  std::vector<int32_t> offsets_;
  DeviceBuffer q_d_, off_d_, out_d_, lse_d_, workspace_;
};

// One synchronous ragged call with `tail` rows after the last sequence.
void check_ragged(const MlaCase& c, const std::vector<int>& q_lens, int num_splits,
                  const MlaDecodeConfig& cfg, int tail = 2) {
  REQUIRE(q_lens.size() == c.lens.size());
  MlaData d(c);
  int rows = tail;
  for (int ql : q_lens) rows += ql;
  RaggedCall call(d, rows, num_splits, cfg);
  call.set(q_lens);
  call.run(nullptr);
  test::synchronize();
  call.judge_all("sync");
}

}  // namespace

TEST_CASE("mla_decode with ragged q: per-sequence q_len, [total_q, h] rows, [h, total_q] lse",
          "[gpu][mla_decode][ragged]") {
  if (!test::gpu_or_skip()) return;
  struct Shape {
    int heads, bound;
    MlaSchedule schedule;
  };
  const std::vector<Shape> shapes = {{16, 8, MlaSchedule::kSeesaw},  {128, 8, MlaSchedule::kSeesaw},
                                     {64, 2, MlaSchedule::kSeesaw},  {128, 1, MlaSchedule::kSeesaw},
                                     {32, 8, MlaSchedule::kSoftmaxWarpgroup}};
  std::vector<MlaCase> cases;
  std::vector<MlaDecodeConfig> configs;
  for (const Shape& sh : shapes) {
    MlaCase c;
    c.heads = sh.heads;
    c.q_len = sh.bound;
    // Lengths: none, 1, shorter than the longest q_len (leading queries see nothing),
    // partial pages, a longer random one.
    c.lens = {0, 1, 3, 64, 130, rand_in(300, 1500), rand_in(1500, 3000)};
    cases.push_back(c);
    MlaDecodeConfig cfg = config_for(c);
    cfg.schedule = sh.schedule;
    configs.push_back(cfg);
  }
  prepare_all(configs);
  for (size_t k = 0; k < cases.size(); ++k) {
    const MlaCase& c = cases[k];
    const int bound = c.q_len;
    // Per-sequence q_len: the bound, 1, 0 (a sequence with no query this step), and random.
    std::vector<int> q_lens(c.lens.size());
    for (size_t i = 0; i < q_lens.size(); ++i) q_lens[i] = rand_in(0, bound);
    q_lens[0] = bound;
    q_lens[2] = bound;  // L = 3 < q_len for bounds over 3
    q_lens[3] = 0;
    q_lens[4] = 1;
    check_ragged(c, q_lens, 1, configs[k]);
    check_ragged(c, q_lens, 3, configs[k]);  // partials and the combine in the ragged layout
    check_ragged(c, q_lens, 0, configs[k], 0);  // balanced schedule, no tail rows
  }
}

TEST_CASE("mla_decode with ragged q replays from a CUDA graph with new offsets and lengths",
          "[gpu][mla_decode][ragged][graph]") {
  if (!test::gpu_or_skip()) return;
  const driver::Api& api = driver::api();
  MlaCase c;
  c.heads = 64;
  c.q_len = 4;  // the bound
  c.lens = {1500, 1500, 1500, 1500, 1500};  // capacity; replays draw lengths within it
  c.spare_pages = 8;
  const MlaDecodeConfig cfg = config_for(c);
  MlaData d(c);
  // Planned in the constructor, before the capture: nothing may compile, load or allocate
  // inside it. Every q_lens set below fits; heuristic split.
  RaggedCall call(d, c.batch() * c.q_len, 0, cfg);
  call.set({4, 4, 4, 4, 4});

  CUstream stream;
  ATTNJIT_CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  ATTNJIT_CU(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  call.run(stream);
  CUgraph graph;
  ATTNJIT_CU(cuStreamEndCapture, stream, &graph);
  CUgraphExec exec;
  ATTNJIT_CU(cuGraphInstantiate, &exec, graph, 0);

  struct Round {
    std::vector<int> lens, q_lens;
  };
  const std::vector<Round> rounds = {
      {{1500, 3, 700, 1, 64}, {4, 4, 4, 4, 4}},
      {{2, 1500, 0, 999, 130}, {1, 0, 3, 4, 2}},  // fewer rows: the tail must stay untouched
      {{rand_in(0, 1500), rand_in(0, 1500), 1500, 5, rand_in(0, 1500)},
       {rand_in(0, 4), 4, rand_in(0, 4), 1, rand_in(0, 4)}},
  };
  for (size_t k = 0; k < rounds.size(); ++k) {
    d.refill(rounds[k].lens);  // new lengths, table and values in the same device buffers
    call.set(rounds[k].q_lens);
    ATTNJIT_CU(cuGraphLaunch, exec, stream);
    ATTNJIT_CU(cuStreamSynchronize, stream);
    call.judge_all(fmt::format("graph replay {}", k));
  }
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  api.cuStreamDestroy(stream);
}
