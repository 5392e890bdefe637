// Plans one shape of each op on the host and precompiles its kernel for sm_90a into a
// kernel cache, through the installed public API only. No GPU or driver needed: this is
// what an engine's build or deployment step does before its serving processes start.
//
//   attnjit_consumer <cache dir>
#include <attnjit/attnjit.hpp>

#include <cstdio>
#include <string>

namespace {

void report(const char* op, const std::string& config, const attnjit::PrecompiledKernel& k) {
  std::printf("%-14s %s key %.12s, %d registers, %d spill bytes, %zu B cubin, %.0f ms: %s\n", op,
              k.cache_hit ? "cache hit" : "compiled ", k.key.c_str(), k.registers, k.spill_bytes,
              k.cubin_bytes, k.ms, config.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <cache dir>\n", argv[0]);
    return 2;
  }
  const std::string cache_dir = argv[1];
  const attnjit::Arch arch = attnjit::kSm90a;
  try {
    // tma_copy: a 16k x 8k bf16 copy.
    const attnjit::TmaCopyShape copy{attnjit::DType::kBF16, 16384, 8192};
    const attnjit::TmaCopyConfig copy_config = attnjit::tma_copy_selected_config(copy);
    report("tma_copy", copy_config.describe(),
           attnjit::precompile("tma_copy", copy_config.to_json(), arch, cache_dir));

    // mla_decode: DeepSeek decode, 128 heads, one new token, 64-token pages, up to 8k keys.
    attnjit::MlaDecodeShape mla;
    mla.batch = 64;
    mla.q_len = 1;
    mla.num_heads = 128;
    mla.page_size = 64;
    mla.max_pages = 128;
    const attnjit::MlaDecodeConfig mla_config = attnjit::mla_decode_selected_config(mla);
    report("mla_decode", mla_config.describe(),
           attnjit::precompile("mla_decode", mla_config.to_json(), arch, cache_dir));

    // mla_decode_fp8: the same decode over an fp8 cache (640-byte rows, per-token scales).
    const attnjit::MlaDecodeFp8Config fp8_config = attnjit::mla_decode_fp8_default_config(128, 1, 64);
    report("mla_decode_fp8", fp8_config.describe(),
           attnjit::precompile("mla_decode_fp8", fp8_config.to_json(), arch, cache_dir));

    // mla_decode_branch_fp8: the branch's fp8 Q absorption for a step of 64 tokens, 128 heads.
    const attnjit::MlaBranchProjConfig branch_config = attnjit::mla_branch_proj_default_config(128, 64, 128);
    report("mla_decode_branch_fp8", branch_config.describe(),
           attnjit::precompile("mla_decode_branch_fp8", branch_config.to_json(), arch, cache_dir));

    // mha_fwd: causal prefill, head dim 128, 4k tokens per sequence, GQA 32/8.
    attnjit::MhaFwdShape mha;
    mha.features.mask = attnjit::MaskKind::kCausal;
    mha.batch = 2;
    mha.max_seqlen_q = mha.max_seqlen_k = 4096;
    mha.total_q = mha.batch * mha.max_seqlen_q;
    mha.h_q = 32;
    mha.h_kv = 8;
    const attnjit::MhaFwdConfig mha_config = attnjit::mha_fwd_selected_config(mha);
    report("mha_fwd", mha_config.describe(),
           attnjit::precompile("mha_fwd", mha_config.to_json(), arch, cache_dir));

    // merge_states: cascade attention's prefix and suffix states, 32 heads of 128.
    const attnjit::MergeStatesShape merge{attnjit::DType::kBF16, 8192, 32, 128};
    const attnjit::MergeStatesConfig merge_config = attnjit::merge_states_selected_config(merge);
    report("merge_states", merge_config.describe(),
           attnjit::precompile("merge_states", merge_config.to_json(), arch, cache_dir));
  } catch (const attnjit::Error& e) {
    std::fprintf(stderr, "attnjit_consumer: %s\n", e.what());
    return 1;
  }
  return 0;
}
