#pragma once
// The number of members of an aggregate (a kernel's Params), for the generated translation
// unit's check that the runtime's config table names every one of them: a member the table
// misses would otherwise be value-initialized (zero) without a word.
#include "common/constants.cuh"

namespace attnjit::detail {

// Converts to anything; only ever named in unevaluated brace-initializations.
struct AnyMember {
  template <class T>
  __host__ __device__ constexpr operator T() const;
};

// The most AnyMember initializers Params{…} accepts = its member count (flat aggregates:
// brace elision into a nested aggregate would count that aggregate's members).
template <class T, class... Seen>
ATTNJIT_PLAN int member_count() {
  if constexpr (requires { T{Seen{}..., AnyMember{}}; })
    return member_count<T, Seen..., AnyMember>();
  else
    return static_cast<int>(sizeof...(Seen));
}

}  // namespace attnjit::detail
