#pragma once
// A layout search's pins ("what about tp 4, pp 2?"): a field of the record (by its name,
// core/parallel_layout_json.hpp) -> the values a layout may take there, as field_text writes
// them; a field not pinned takes every value. One check serves every field, so a new dimension
// is pinned without an edit here or in the planner (docs/planner.md, "Pins").
#include <map>
#include <string>
#include <vector>

#include "kintsugi/core/parallel_layout.hpp"

namespace kintsugi {

class LayoutPins {
 public:
  // The value that stands for every value of a field but its default (a pinned "any" grid).
  static constexpr const char* kAny = "any";

  // Pins `field` to `values` (field_text's form, or kAny); pinning it again replaces them.
  void pin(const std::string& field, std::vector<std::string> values);
  bool pinned(const std::string& field) const { return values_.contains(field); }
  // Whether a layout whose `field` reads `text` passes: not pinned, listed, or not the default
  // where kAny is listed.
  bool allows(const std::string& field, const std::string& text) const;
  // Whether `text` is listed by value (not only through kAny).
  bool lists(const std::string& field, const std::string& text) const;
  // Every pinned field of `layout` allowed.
  bool allows(const ParallelLayout& layout) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
};

}  // namespace kintsugi
