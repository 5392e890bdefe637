#pragma once
// REQUIRE_ERROR(expr, kind, "substring"): expr throws attnjit::Error of `kind` whose
// message contains every given substring (works on Catch2 v2 and v3).
#include <string>

#include "attnjit/error.hpp"
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
