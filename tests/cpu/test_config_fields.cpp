// The config tables (runtime/ops/field_table.hpp), walked field by field for every op of the
// registry and the test-only tune_probe family: a template field changes the key, the JSON
// and the generated source; a launch field changes the JSON only; every field's rule rejects
// a value outside it, naming the field. A synthetic config covers the launch kind, which no
// shipped op has yet.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "jit/kernel_source.hpp"
#include "ops/field_table.hpp"
#include "ops/registry.hpp"
#include "support/catch.hpp"
#include "support/errors.hpp"
#include "support/tune_probe.hpp"

using attnjit::ErrorKind;
using attnjit::ops::ConfigForms;
using attnjit::ops::FieldKind;
using attnjit::ops::OpSpec;
using nlohmann::json;

namespace {

std::string source_of(const ConfigForms& f) {
  attnjit::jit::KernelSource s;
  s.kernel = "k";
  s.params_type = "P";
  s.args = f.args;
  return attnjit::jit::instantiation_expression(s);
}

// Each field of `op` set to each value its rule admits, on each config of the default set.
void walk_fields(const OpSpec& op) {
  REQUIRE(op.forms);
  REQUIRE(!op.fields.empty());
  const std::vector<json> bases = op.default_set();
  REQUIRE(!bases.empty());
  int template_fields = 0;
  for (const auto& field : op.fields) {
    INFO(fmt::format("{} field '{}'", op.name, field.name));
    REQUIRE(!field.examples.empty());
    template_fields += field.kind == FieldKind::kTemplate;
    int changed = 0;
    for (const json& base : bases) {
      const ConfigForms b = op.forms(base);
      CHECK(b.json == base);  // the default set is canonical: every field, nothing else
      for (const json& value : field.examples) {
        if (base.at(field.name) == value) continue;
        json other = base;
        other[field.name] = value;
        const ConfigForms o = op.forms(other);
        ++changed;
        CHECK(o.json != b.json);
        CHECK(o.json.at(field.name) == value);
        if (field.kind == FieldKind::kTemplate) {
          CHECK(!(o.key == b.key));
          CHECK(source_of(o) != source_of(b));
        } else {
          CHECK(o.key == b.key);
          CHECK(source_of(o) == source_of(b));
        }
      }
    }
    CHECK((changed > 0) == (field.examples.size() > 1));
    // The rule: a well-typed value outside it is refused, naming the field.
    const std::string quoted = fmt::format("'{}'", field.name);
    if (field.outside) {
      json bad = bases.front();
      bad[field.name] = *field.outside;
      REQUIRE_ERROR(op.canonicalize(bad), ErrorKind::kUnsupportedConfig, quoted.c_str());
    }
    // A wrong type is refused by name before any rule.
    json wrong = bases.front();
    wrong[field.name] = json::array({1});
    REQUIRE_ERROR(op.canonicalize(wrong), ErrorKind::kUnsupportedConfig, quoted.c_str());
  }
  // The generated source names every template field (and the TU checks Params' member
  // count against it).
  CHECK(static_cast<int>(op.forms(bases.front()).args.size()) == template_fields);
  json unknown = bases.front();
  unknown["no_such_field"] = 1;
  REQUIRE_ERROR(op.canonicalize(unknown), ErrorKind::kUnsupportedConfig, "'no_such_field'",
                "unknown field");
}

}  // namespace

TEST_CASE("every field of every op's config table drives key, JSON and source", "[config][fields]") {
  for (const OpSpec& op : attnjit::ops::registry()) {
    SECTION(op.name) { walk_fields(op); }
  }
  SECTION("tune_probe") { walk_fields(attnjit::test::tune_probe_op()); }
}

TEST_CASE("the generated source declares the kernel's Params from the table", "[config][fields]") {
  for (const char* name : {"mha_fwd", "mla_decode", "tma_copy"}) {
    INFO(name);
    const OpSpec& op = attnjit::ops::find_op(name);
    const attnjit::jit::KernelRecipe r = op.recipe(op.default_set().front(), attnjit::kSm90a);
    CHECK(r.source.params_type.empty());  // declared by the TU, never hand-written
    const std::string tu = attnjit::jit::translation_unit(r.source);
    // One member per template field, in table order, of the type its codec names.
    std::string members = "struct Params {\n";
    for (const auto& a : r.source.args) members += fmt::format("  {} {};\n", a.type, a.field);
    members += "};\n";
    CHECK(tu.find(members) != std::string::npos);
    CHECK(tu.find(fmt::format("{}<attnjit_generated::Params{{.", r.source.kernel)) != std::string::npos);
    // Every template field of the table is a member; the launch fields are not.
    int template_fields = 0;
    for (const auto& f : op.fields) template_fields += f.kind == FieldKind::kTemplate;
    CHECK(static_cast<int>(r.source.args.size()) == template_fields);
  }
  // An enum's device type is its enumerators' scope.
  const auto mha = attnjit::ops::find_op("mha_fwd").recipe(
      attnjit::ops::find_op("mha_fwd").default_set().front(), attnjit::kSm90a);
  bool saw_mask = false;
  for (const auto& a : mha.source.args)
    if (a.field == "mask") {
      saw_mask = true;
      CHECK(a.type == "attnjit::mha_fwd::Mask");
      CHECK(a.value.rfind("attnjit::mha_fwd::Mask::k", 0) == 0);
    }
  CHECK(saw_mask);
}

namespace {

// A config with one field of each kind, as a new op would declare it.
struct Synthetic {
  int tile = 64;
  bool flag = false;
  int grid_hint = 0;  // launch-only: read by the host launch, not the kernel
  void validate() const;
};

const auto& synthetic_table() {
  using attnjit::ops::Field;
  static const attnjit::ops::ConfigTable t{
      "synthetic",
      Field<Synthetic, int>{"tile", &Synthetic::tile, FieldKind::kTemplate,
                            attnjit::ops::one_of<int>({64, 128}), "tile", "t{}", true},
      Field<Synthetic, bool>{"flag", &Synthetic::flag, FieldKind::kTemplate, attnjit::ops::any_bool(),
                             "flag", "flag"},
      Field<Synthetic, int>{"grid_hint", &Synthetic::grid_hint, FieldKind::kLaunch,
                            attnjit::ops::int_range(0, 8), "CTAs per SM hint", "g{}"},
  };
  return t;
}

void Synthetic::validate() const { synthetic_table().check_rules(*this); }

}  // namespace

TEST_CASE("a launch field changes the JSON only; a template field the key and source too", "[config][fields]") {
  OpSpec op;
  op.name = "synthetic";
  op.id = 999;
  op.default_set = [] { return std::vector<json>{json::parse(synthetic_table().to_json({}).dump())}; };
  attnjit::ops::bind_config<Synthetic>(op, synthetic_table(), [](const Synthetic&, attnjit::Arch) {
    return attnjit::jit::KernelRecipe{};
  });
  walk_fields(op);
  // JSON: canonical order, defaults filled in, describe from the briefs.
  CHECK(synthetic_table().to_json({}).dump() == R"({"tile":64,"flag":false,"grid_hint":0})");
  CHECK(synthetic_table().describe({128, true, 3}) == "t128 flag g3");
  CHECK(synthetic_table().from_json(json::parse(R"({"flag":true})")).tile == 64);
  // list rows: rule text, default, kind.
  const auto specs = synthetic_table().specs();
  REQUIRE(specs.size() == 3);
  CHECK(specs[0].allowed == "64, 128");
  CHECK(specs[2].allowed == "0..8");
  CHECK(specs[2].default_value == "0");
  CHECK(specs[2].kind == FieldKind::kLaunch);
}
