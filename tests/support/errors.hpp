#pragma once
// REQUIRE_ERROR(expr, kind, "substring"): expr throws attnjit::Error of `kind` whose
// message contains every given substring (works on Catch2 v2 and v3).
// REQUIRE_REFUSED(expr, kind, "substring"): the same, and expr attempted no kernel launch
// (jit::launch_count). The argument tests call ops with made-up device addresses: on a GPU
// machine a rule that let one through would launch on it, and there a driver error does
// not stand in for the check.
#include <cstdint>
#include <string>

#include "attnjit/error.hpp"
#include "jit/launch_count.hpp"
#include "support/catch.hpp"

#define REQUIRE_ERROR(expr, error_kind, ...)                                                  \
  do {                                                                                        \
    bool threw_ = false;                                                                      \
    try {                                                                                     \
      (void)(expr);                                                                           \
    } catch (const ::attnjit::Error& e_) {                                                    \
      threw_ = true;                                                                          \
      const std::string msg_ = e_.what();                                                     \
      INFO("message: " << msg_);                                                              \
      CHECK(e_.kind() == (error_kind));                                                       \
      for (const char* sub_ : {__VA_ARGS__}) {                                                \
        INFO("expected substring: " << sub_);                                                 \
        CHECK(msg_.find(sub_) != std::string::npos);                                          \
      }                                                                                       \
    }                                                                                         \
    if (!threw_) FAIL("expected attnjit::Error from " #expr);                                 \
  } while (0)

#define REQUIRE_REFUSED(expr, error_kind, ...)                                                \
  do {                                                                                        \
    const uint64_t launches_ = ::attnjit::jit::launch_count();                                \
    REQUIRE_ERROR(expr, error_kind, __VA_ARGS__);                                             \
    INFO("kernel launches attempted by " #expr);                                              \
    CHECK(::attnjit::jit::launch_count() == launches_);                                       \
  } while (0)
