#include "kintsugi/core/parallel_layout_json.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <functional>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {

using nlohmann::json;

struct Field {
  std::string_view name;
  bool chosen;  // a planner chooses it
  std::function<json(const ParallelLayout&)> get;
  std::function<void(ParallelLayout&, const json&)> set;
};

// A member whose JSON is its own value (numbers, booleans, strings, lists).
template <class T>
Field plain(std::string_view name, bool chosen, T ParallelLayout::*member) {
  return {name, chosen, [member](const ParallelLayout& p) { return json(p.*member); },
          [member](ParallelLayout& p, const json& j) { p.*member = j.get<T>(); }};
}

const std::array<Field, 15>& fields() {
  static const std::array<Field, 15> table = {
      plain("tp", true, &ParallelLayout::tp),
      plain("pp", true, &ParallelLayout::pp),
      plain("dp", true, &ParallelLayout::dp),
      plain("order", false, &ParallelLayout::order),
      Field{"schedule", true,
            [](const ParallelLayout& p) { return json(std::string(name_of(p.schedule))); },
            [](ParallelLayout& p, const json& j) {
              p.schedule = parse_name<PipelineSchedule>(j.get<std::string>(), "parallel.schedule");
            }},
      plain("virtual_stages", true, &ParallelLayout::virtual_stages),
      plain("layers_per_stage", false, &ParallelLayout::layers_per_stage),
      Field{"zero", true, [](const ParallelLayout& p) { return json(stage_number(p.zero)); },
            [](ParallelLayout& p, const json& j) {
              p.zero = zero_stage(j.get<std::int64_t>(), "parallel.zero");
            }},
      plain("hsdp", true, &ParallelLayout::hsdp),
      plain("sequence_parallel", true, &ParallelLayout::sequence_parallel),
      // A planner tries it where pinned (plan/search.cpp).
      plain("cp", true, &ParallelLayout::cp),
      // A planner tries both where pinned (plan --cp-comm all_to_all,ring; refinements).
      Field{"cp_comm", true,
            [](const ParallelLayout& p) { return json(std::string(name_of(p.cp_comm))); },
            [](ParallelLayout& p, const json& j) {
              p.cp_comm = parse_name<CpComm>(j.get<std::string>(), "parallel.cp_comm");
            }},
      plain("tensor_grid", true, &ParallelLayout::tensor_grid),
      plain("tensor_grid_overlap", true, &ParallelLayout::tensor_grid_overlap),
      // A planner tries it for a mixture of experts (plan/search.cpp).
      plain("ep", true, &ParallelLayout::ep)};
  return table;
}

const Field& field_named(std::string_view name) {
  for (const Field& f : fields())
    if (f.name == name) return f;
  fail("parallel.{} is no layout field", name);
}

}  // namespace

json layout_json(const ParallelLayout& p) {
  json j = json::object();
  for (const Field& f : fields()) j[std::string(f.name)] = f.get(p);
  return j;
}

std::vector<std::string> layout_fields(bool chosen_only) {
  std::vector<std::string> out;
  for (const Field& f : fields())
    if (f.chosen || !chosen_only) out.emplace_back(f.name);
  return out;
}

std::string field_text(const ParallelLayout& layout, std::string_view field) {
  const json j = field_named(field).get(layout);
  return j.is_string() ? j.get<std::string>() : j.dump();
}

void set_field(ParallelLayout& layout, std::string_view field, const std::string& text) {
  const Field& f = field_named(field);
  // Numbers, booleans and lists are JSON; anything else is a name.
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || j.is_string()) j = text;
  try {
    f.set(layout, j);
  } catch (const json::exception&) {
    fail("parallel.{} = {} is not a value of its type (the default is {})", field, text,
         field_text(ParallelLayout{}, field));
  }
}

}  // namespace kintsugi
