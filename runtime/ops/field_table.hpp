#pragma once
// A config struct's fields, declared once. Each op lists its config's fields in one table
// (name, member, kind, rule, default, doc); everything else is derived from that table:
//
//   JSON out (canonical order) and in (unknown keys and wrong types refused, naming the
//   field), describe(), the `attnjit list` rows, each field's own rule in validate(), the
//   kernel's device Params (the generated translation unit declares it: one member per
//   template field, in table order) and its designated initializers, the in-process binary
//   key, and the field names the tuner accepts in a search space.
//
// A template field is a member of the generated Params (the kernel reads it as P.<name>; a
// name the kernel uses but the table lacks fails to compile): it is in the key and the
// generated source. A launch field is read by the host launch only: it changes the JSON,
// never the source, the in-process key or the disk key.
//
// A public config's table is its .def file (runtime/include/attnjit/ops/<op>_config.def),
// one ATTNJIT_FIELD row per field; the public header expands the rows into the struct's
// members (ATTNJIT_CONFIG_MEMBER) and the op's config.cpp into its ConfigTable
// (ATTNJIT_CONFIG_ROW). Adding a plain compile-time field: its row, its use in the kernel
// (P.<name>; the device Params is generated from the rows), a test.
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/types.hpp"
#include "jit/kernel_source.hpp"
#include "jit/kernel_table.hpp"

namespace attnjit::ops {

enum class FieldKind : uint8_t {
  kTemplate,  // a device Params member: key, JSON and generated source
  kLaunch,    // host launch only: JSON only
};

// One row of `attnjit list` (and what the tuner and the field-walk tests read).
struct FieldSpec {
  std::string name;
  FieldKind kind = FieldKind::kTemplate;
  std::string allowed;        // human-readable rule, e.g. "16..256, multiple of 16"
  std::string default_value;  // as JSON text (or the rule that derives it)
  std::string doc;
  std::vector<nlohmann::json> examples;  // values the field's own rule admits
  std::optional<nlohmann::json> outside;  // a well-typed value the rule rejects, if any
};

// ---- value vocabulary -------------------------------------------------------------------

// An enum's spellings: its JSON/text name and the device enumerator the generated source
// names. Specialized next to each enum (the device enums keep the enumerator names).
template <class E>
struct Spelled {
  E value;
  std::string_view name;  // "causal"
  std::string_view cxx;   // "attnjit::mha_fwd::Mask::kCausal"
};
template <class E>
struct EnumSpelling;  // static constexpr std::array<Spelled<E>, N> kAll;

template <>
struct EnumSpelling<DType> {
  static constexpr std::array<Spelled<DType>, 7> kAll{{
      {DType::kBF16, "bf16", "attnjit::DType::kBF16"},
      {DType::kF16, "f16", "attnjit::DType::kF16"},
      {DType::kF32, "f32", "attnjit::DType::kF32"},
      {DType::kE4M3, "e4m3", "attnjit::DType::kE4M3"},
      {DType::kE5M2, "e5m2", "attnjit::DType::kE5M2"},
      {DType::kI32, "i32", "attnjit::DType::kI32"},
      {DType::kU8, "u8", "attnjit::DType::kU8"},
  }};
};
template <>
struct EnumSpelling<Swizzle> {
  static constexpr std::array<Spelled<Swizzle>, 4> kAll{{
      {Swizzle::kNone, "none", "attnjit::Swizzle::kNone"},
      {Swizzle::k32B, "32B", "attnjit::Swizzle::k32B"},
      {Swizzle::k64B, "64B", "attnjit::Swizzle::k64B"},
      {Swizzle::k128B, "128B", "attnjit::Swizzle::k128B"},
  }};
};

// The name of an enumerator (empty for a value outside the enum).
template <class E>
constexpr std::string_view enum_name(E v) {
  for (const Spelled<E>& s : EnumSpelling<E>::kAll)
    if (s.value == v) return s.name;
  return {};
}

// How a field type reads and writes JSON, spells itself in C++ and packs into a key.
template <class T, class = void>
struct Codec;

template <>
struct Codec<int> {
  static nlohmann::json json(int v) { return v; }
  static std::optional<int> read(const nlohmann::json& j) {
    if (!j.is_number_integer()) return std::nullopt;
    const int64_t v = j.get<int64_t>();
    if (v < INT32_MIN || v > INT32_MAX) return std::nullopt;
    return static_cast<int>(v);
  }
  static std::string expected() { return "an integer"; }
  static std::string cxx(int v) { return std::to_string(v); }
  static std::string cxx_type() { return "int"; }
  static std::string text(int v) { return std::to_string(v); }
  static int32_t word(int v) { return v; }
};

template <>
struct Codec<bool> {
  static nlohmann::json json(bool v) { return v; }
  static std::optional<bool> read(const nlohmann::json& j) {
    if (!j.is_boolean()) return std::nullopt;
    return j.get<bool>();
  }
  static std::string expected() { return "true or false"; }
  static std::string cxx(bool v) { return v ? "true" : "false"; }
  static std::string cxx_type() { return "bool"; }
  static std::string text(bool v) { return v ? "true" : "false"; }
  static int32_t word(bool v) { return v ? 1 : 0; }
};

template <class E>
struct Codec<E, std::enable_if_t<std::is_enum_v<E>>> {
  static nlohmann::json json(E v) { return std::string(enum_name(v)); }
  static std::optional<E> read(const nlohmann::json& j) {
    if (!j.is_string()) return std::nullopt;
    for (const Spelled<E>& s : EnumSpelling<E>::kAll)
      if (s.name == j.get<std::string>()) return s.value;
    return std::nullopt;
  }
  static std::string expected() {
    std::string names;
    for (const Spelled<E>& s : EnumSpelling<E>::kAll)
      names += fmt::format("{}{}", names.empty() ? "" : ", ", s.name);
    return "one of " + names;
  }
  static std::string cxx(E v) {
    for (const Spelled<E>& s : EnumSpelling<E>::kAll)
      if (s.value == v) return std::string(s.cxx);
    return "?";
  }
  // The device enum: the enumerators' spelling without their last component.
  static std::string cxx_type() {
    const std::string_view e = EnumSpelling<E>::kAll[0].cxx;
    return std::string(e.substr(0, e.rfind("::")));
  }
  static std::string text(E v) {
    const std::string_view n = enum_name(v);
    return n.empty() ? fmt::format("<invalid {}>", static_cast<int>(v)) : std::string(n);
  }
  static int32_t word(E v) { return static_cast<int32_t>(v); }
};

// ---- a field's own rule -----------------------------------------------------------------

// The values a field admits on its own; rules between fields (register and shared-memory
// budgets, layout consistency) stay in the config's validate(), and `note` names them for
// `attnjit list`.
template <class T>
struct Rule {
  std::vector<T> values;  // non-empty: one of these
  int lo = 0, hi = 0;     // ints without `values`: lo..hi
  int step = 1;           // ... a multiple of step
  bool pow2 = false;      // ... a power of two
  std::string note = {};  // cross-field rules, appended to the text

  bool admits(const T& v) const {
    if (!values.empty()) {
      for (const T& a : values)
        if (a == v) return true;
      return false;
    }
    if constexpr (std::is_same_v<T, int>) {
      if (v < lo || v > hi || v % step != 0) return false;
      return !pow2 || (v > 0 && (v & (v - 1)) == 0);
    } else {
      return true;
    }
  }

  std::string text() const {
    std::string s;
    if (!values.empty()) {
      for (const T& v : values) s += fmt::format("{}{}", s.empty() ? "" : ", ", Codec<T>::text(v));
    } else if constexpr (std::is_same_v<T, int>) {
      s = fmt::format("{}..{}", lo, hi);
      if (step > 1) s += fmt::format(", multiple of {}", step);
      if (pow2) s += ", power of 2";
    }
    return note.empty() ? s : s + "; " + note;
  }

  // Values the rule admits (all listed ones; a range's two ends and a middle one).
  std::vector<T> examples() const {
    if (!values.empty()) return values;
    std::vector<T> out;
    if constexpr (std::is_same_v<T, int>) {
      for (int v : {lo, (lo + hi) / 2, hi}) {
        int x = v;
        while (x <= hi && !admits(x)) ++x;
        if (x <= hi && (out.empty() || out.back() != x)) out.push_back(x);
      }
    } else if constexpr (std::is_same_v<T, bool>) {
      out = {false, true};
    }
    return out;
  }

  // A well-typed value the rule rejects, if the type has one.
  std::optional<T> outside() const {
    if constexpr (std::is_same_v<T, int>) {
      int top = hi;
      for (const T& v : values) top = std::max(top, v);
      return top + 1;
    } else if constexpr (std::is_enum_v<T>) {
      for (const Spelled<T>& s : EnumSpelling<T>::kAll)
        if (!admits(s.value)) return s.value;
      return std::nullopt;
    } else {
      for (bool b : {false, true})
        if (!admits(b)) return b;
      return std::nullopt;
    }
  }
};

template <class T>
Rule<T> one_of(std::vector<T> values, std::string note = {}) {
  return Rule<T>{.values = std::move(values), .note = std::move(note)};
}
inline Rule<int> int_range(int lo, int hi, int step = 1, std::string note = {}) {
  return Rule<int>{.lo = lo, .hi = hi, .step = step, .note = std::move(note)};
}
inline Rule<int> pow2_range(int lo, int hi, std::string note = {}) {
  return Rule<int>{.lo = lo, .hi = hi, .pow2 = true, .note = std::move(note)};
}
inline Rule<bool> any_bool(std::string note = {}) {
  return Rule<bool>{.values = {false, true}, .note = std::move(note)};
}

// ---- a field ----------------------------------------------------------------------------

template <class C, class T>
struct Field {
  using value_type = T;
  std::string_view name;  // JSON key, device Params member, `attnjit list` row
  T C::*member;
  FieldKind kind;
  Rule<T> rule;
  std::string_view doc;
  // describe(): a fmt pattern of the value's text ("d{}"; a pattern without {} is a flag
  // such as "ragged"); shown when the value differs from the default, or always.
  std::string_view brief = {};
  bool brief_always = false;
  // The default when the JSON omits the field, from the fields read before it (e.g.
  // head_dim_v from head_dim); empty: the struct's default member value.
  std::function<T(const C&)> derived_default = {};
  std::string_view derived_default_text = {};
};

// The helpers a .def row's rule may name unqualified (config.cpp: `using namespace
// ops::rules;` where it expands the rows).
namespace rules {
using ops::any_bool;
using ops::int_range;
using ops::one_of;
using ops::pow2_range;
}  // namespace rules

// A .def row as a ConfigTable constructor argument (each row brings its leading comma:
// `ConfigTable{"op" ROWS}`): ATTNJIT_FIELD(type, member, default, kind, rule, doc, extras...)
// where kind is Template or Launch and extras are Field's optional designated initializers
// (.brief, .brief_always, .derived_default, .derived_default_text).
#define ATTNJIT_CONFIG_ROW(Config, T_, member_, default_, kind_, rule_, doc_, ...)           \
  , ::attnjit::ops::Field<Config, T_> {                                                     \
    .name = #member_, .member = &Config::member_, .kind = ::attnjit::ops::FieldKind::k##kind_, \
    .rule = rule_, .doc = doc_, __VA_ARGS__                                                  \
  }

// ---- the table --------------------------------------------------------------------------

inline constexpr int kMaxKeyFields = static_cast<int>(sizeof(jit::KernelKey::words) / sizeof(int32_t));

template <class C, class... T>
class ConfigTable {
 public:
  using config_type = C;

  explicit ConfigTable(std::string_view op, Field<C, T>... fields)
      : op_(op), fields_(std::move(fields)...) {}

  std::string_view op() const { return op_; }

  template <class Fn>
  void each(Fn&& fn) const {
    std::apply([&](const auto&... f) { (fn(f), ...); }, fields_);
  }

  static_assert(sizeof...(T) <= kMaxKeyFields, "a config has at most 16 fields (the key's words)");

  int template_fields() const {
    int n = 0;
    each([&](const auto& f) { n += f.kind == FieldKind::kTemplate; });
    return n;
  }

  // Canonical JSON: every field, in table order.
  nlohmann::ordered_json to_json(const C& c) const {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    each([&](const auto& f) { j[std::string(f.name)] = Codec<field_type<decltype(f)>>::json(c.*f.member); });
    return j;
  }

  // Reads names and types only (no rules): a missing field takes its default; an unknown
  // field or a wrongly typed value throws naming the field.
  C from_json(const nlohmann::json& j) const {
    if (!j.is_object()) fail_config(std::string(op_) + " config", fmt::format("must be a JSON object, got {}", j.dump()));
    for (auto it = j.begin(); it != j.end(); ++it) {
      bool known = false;
      each([&](const auto& f) { known = known || f.name == it.key(); });
      if (!known) fail_config(where(it.key()), fmt::format("unknown field (fields: {})", names()));
    }
    C c{};
    each([&](const auto& f) {
      using V = field_type<decltype(f)>;
      const auto it = j.find(std::string(f.name));
      if (it == j.end()) {
        if (f.derived_default) c.*f.member = f.derived_default(c);
        return;
      }
      const std::optional<V> v = Codec<V>::read(*it);
      if (!v) fail_config(where(f.name), fmt::format("must be {}, got {}", Codec<V>::expected(), it->dump()));
      c.*f.member = *v;
    });
    return c;
  }

  C from_json_text(std::string_view text) const {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail_config(std::string(op_) + " config", fmt::format("invalid JSON: {}", e.what()));
    }
    return from_json(j);
  }

  // Each field's own rule; the first broken one throws naming the field.
  void check_rules(const C& c) const {
    each([&](const auto& f) {
      using V = field_type<decltype(f)>;
      if (!f.rule.admits(c.*f.member))
        fail_config(where(f.name), fmt::format("must be {}, got {}", f.rule.text(), Codec<V>::text(c.*f.member)));
    });
  }

  std::string describe(const C& c) const {
    const C d{};
    std::string s;
    each([&](const auto& f) {
      using V = field_type<decltype(f)>;
      if (f.brief.empty() || (!f.brief_always && c.*f.member == d.*f.member)) return;
      s += fmt::format("{}{}", s.empty() ? "" : " ", fmt::format(fmt::runtime(f.brief), Codec<V>::text(c.*f.member)));
    });
    return s;
  }

  // The device Params' members and designated initializers, in table order.
  std::vector<jit::TemplateArg> template_args(const C& c) const {
    std::vector<jit::TemplateArg> args;
    each([&](const auto& f) {
      using V = field_type<decltype(f)>;
      if (f.kind == FieldKind::kTemplate)
        args.push_back({std::string(f.name), Codec<V>::cxx(c.*f.member), Codec<V>::cxx_type()});
    });
    return args;
  }

  // The in-process key: one 32-bit word per template field, in table order.
  jit::KernelKey key(uint32_t op_id, Arch arch, const C& c) const {
    std::array<int32_t, kMaxKeyFields> w{};
    int n = 0;
    each([&](const auto& f) {
      if (f.kind == FieldKind::kTemplate) w[static_cast<size_t>(n++)] = Codec<field_type<decltype(f)>>::word(c.*f.member);
    });
    return jit::make_key(op_id, arch, w);
  }

  std::vector<FieldSpec> specs() const {
    const C d{};
    std::vector<FieldSpec> out;
    each([&](const auto& f) {
      using V = field_type<decltype(f)>;
      FieldSpec s;
      s.name = std::string(f.name);
      s.kind = f.kind;
      s.allowed = f.rule.text();
      s.default_value = f.derived_default ? std::string(f.derived_default_text)
                                          : Codec<V>::json(d.*f.member).dump();
      s.doc = std::string(f.doc);
      for (const V& v : f.rule.examples()) s.examples.push_back(Codec<V>::json(v));
      if (const std::optional<V> o = f.rule.outside()) s.outside = Codec<V>::json(*o);
      out.push_back(std::move(s));
    });
    return out;
  }

  std::string where(std::string_view field) const {
    return fmt::format("{} config field '{}'", op_, field);
  }

 private:
  template <class F>
  using field_type = typename std::remove_cvref_t<F>::value_type;

  std::string names() const {
    std::string s;
    each([&](const auto& f) { s += fmt::format("{}{}", s.empty() ? "" : ", ", f.name); });
    return s;
  }

  std::string_view op_;
  std::tuple<Field<C, T>...> fields_;
};

// ---- kernel recipes ---------------------------------------------------------------------

// Where a config's kernel lives.
struct KernelEntry {
  std::string_view op;      // registry name, e.g. "mha_fwd"
  std::string_view header;  // under kernel_templates/
  std::string_view kernel;  // qualified template name (`template <auto P>`)
};

// The recipe of config `c`: the table's template fields as the generated Params (members
// and initializers) and its canonical JSON in the TU's header comment.
template <class C, class... T>
jit::KernelRecipe table_recipe(const ConfigTable<C, T...>& table, const C& c, const KernelEntry& entry,
                               Arch arch, unsigned dynamic_smem_bytes) {
  jit::KernelRecipe r;
  r.source.op = std::string(entry.op);
  r.source.header = std::string(entry.header);
  r.source.kernel = std::string(entry.kernel);
  r.source.args = table.template_args(c);
  r.source.config_json = table.to_json(c).dump();
  r.options.arch = arch;
  r.dynamic_smem_bytes = dynamic_smem_bytes;
  return r;
}

// The loaded kernel of config `c` on `arch`: the table's key, and on a miss the config's
// validate() and `recipe(c, arch)` (compiled once, single-flight).
template <class C, class... T, class Recipe>
const jit::Kernel& table_kernel(const ConfigTable<C, T...>& table, uint32_t op_id, const C& c, Arch arch,
                                Recipe&& recipe) {
  return jit::get_kernel(table.key(op_id, arch, c), [&] {
    c.validate();
    return recipe(c, arch);
  });
}

}  // namespace attnjit::ops
