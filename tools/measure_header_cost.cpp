// Measures what toolkit/attnjit headers cost an NVRTC compile (median of 5, sm_90a).
// Not part of the build; run from the repo root:
//   g++ -O1 tools/measure_header_cost.cpp -I$CUDA_HOME/include -L$CUDA_HOME/lib64 -lnvrtc \\
//       -Wl,-rpath,$CUDA_HOME/lib64 -o /tmp/hdr && /tmp/hdr
#include <nvrtc.h>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <vector>
#include <string>
#include <algorithm>
#include <fstream>
#include <sstream>
static std::string rd(const char* p){std::ifstream f(p); std::stringstream s; s<<f.rdbuf(); return s.str();}
int main(){
  const char* names[] = {"common/arch.cuh","common/types.cuh","common/tensor_map.cuh","common/mbarrier.cuh","common/tma.cuh","common/warpgroup.cuh","common/wgmma.cuh","common/fence.cuh","tma_copy/tma_copy.cuh"};
  std::vector<std::string> texts; std::vector<const char*> hp, hn;
  for (auto n: names){ texts.push_back(rd((std::string("kernel_templates/")+n).c_str())); }
  for (size_t i=0;i<texts.size();++i){hp.push_back(texts[i].c_str()); hn.push_back(names[i]);}
  std::string inst = "namespace g { inline constexpr auto e = &attnjit::tma_copy::kernel<attnjit::tma_copy::Params{.dtype = attnjit::DType::kBF16, .block_m = 128, .block_n = 128, .stages = 4, .swizzle = attnjit::Swizzle::kNone}>; }\n";
  struct V{const char* label; std::string pre;} vs[] = {
    {"tma_copy alone", ""},
    {"+ cuda_bf16.h", "#include <cuda_bf16.h>\n"},
    {"+ cuda_bf16.h + cuda_fp8.h", "#include <cuda_bf16.h>\n#include <cuda_fp8.h>\n"},
    {"+ common/wgmma.cuh", "#include \"common/wgmma.cuh\"\n"},
    {"+ <cuda/ptx> (CCCL)", "#include <cuda/ptx>\n"},
  };
  const char* env = std::getenv("CUDA_HOME");
  const std::string cuda = env ? env : "/usr/local/cuda";
  const std::string inc = "-I" + cuda + "/include", cccl = "-I" + cuda + "/include/cccl";
  const char* opts[] = {"--gpu-architecture=sm_90a", "-std=c++20", "--ptxas-options=--verbose",
                        inc.c_str(), cccl.c_str()};
  for (auto& v: vs){
    std::vector<double> t;
    for (int r=0;r<5;++r){
      std::string src = v.pre + "#include \"tma_copy/tma_copy.cuh\"\n" + inst;
      auto t0=std::chrono::steady_clock::now();
      nvrtcProgram p; nvrtcCreateProgram(&p, src.c_str(), "x.cu", hp.size(), hp.data(), hn.data());
      auto rc = nvrtcCompileProgram(p, 5, opts);
      size_t n; nvrtcGetCUBINSize(p,&n);
      nvrtcDestroyProgram(&p);
      t.push_back(std::chrono::duration<double,std::milli>(std::chrono::steady_clock::now()-t0).count());
      if (rc) { printf("fail %s\n", v.label); break; }
    }
    std::sort(t.begin(), t.end());
    printf("%-32s median %6.1f ms\n", v.label, t[t.size()/2]);
  }
}
