#include "kintsugi/core/layout_pins.hpp"

#include <algorithm>

#include "kintsugi/core/parallel_layout_json.hpp"

namespace kintsugi {

void LayoutPins::pin(const std::string& field, std::vector<std::string> values) {
  field_text(ParallelLayout{}, field);  // a field of the record, else an Error naming it
  values_[field] = std::move(values);
}

bool LayoutPins::lists(const std::string& field, const std::string& text) const {
  const auto it = values_.find(field);
  return it != values_.end() && std::find(it->second.begin(), it->second.end(), text) !=
                                    it->second.end();
}

bool LayoutPins::allows(const std::string& field, const std::string& text) const {
  if (!pinned(field) || lists(field, text)) return true;
  return lists(field, kAny) && text != field_text(ParallelLayout{}, field);
}

bool LayoutPins::allows(const ParallelLayout& layout) const {
  return std::all_of(values_.begin(), values_.end(), [&](const auto& pin) {
    return allows(pin.first, field_text(layout, pin.first));
  });
}

}  // namespace kintsugi
