#include "kintsugi/plan/value_list.hpp"

#include <algorithm>
#include <charconv>

#include "kintsugi/core/error.hpp"

namespace kintsugi {

namespace {

// Above this many values a range is a typo (8:64000000), not a search space.
constexpr std::size_t kMaxValues = 100000;

std::int64_t whole(const std::string& text, const std::string& flag, const std::string& item) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size())
    fail("{} {}: `{}` is not a whole number (a value, a list 8,16 or a range 8:64, 8:64:8, "
         "8:64:x2)",
         flag, item, text);
  return value;
}

}  // namespace

std::vector<std::int64_t> parse_values(const std::string& text, const std::string& flag,
                                       std::int64_t minimum) {
  std::vector<std::int64_t> out;
  auto add = [&](std::int64_t v, const std::string& item) {
    if (v < minimum) fail("{} {}: {} is below the least value, {}", flag, item, v, minimum);
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    if (out.size() > kMaxValues) fail("{} {}: more than {} values", flag, item, kMaxValues);
  };
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    const std::size_t c1 = item.find(':');
    if (c1 == std::string::npos) {
      add(whole(item, flag, item), item);
      continue;
    }
    const std::size_t c2 = item.find(':', c1 + 1);
    const std::int64_t a = whole(item.substr(0, c1), flag, item);
    const std::int64_t b = whole(
        item.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1), flag, item);
    if (b < a) fail("{} {}: the range ends before it starts", flag, item);
    std::string step = c2 == std::string::npos ? "1" : item.substr(c2 + 1);
    if (!step.empty() && step[0] == 'x') {
      const std::int64_t f = whole(step.substr(1), flag, item);
      if (f < 2) fail("{} {}: a factor must be at least 2", flag, item);
      if (a < 1) fail("{} {}: a geometric range starts at 1 or more", flag, item);
      for (std::int64_t v = a; v <= b; v *= f) {
        add(v, item);
        if (v > b / f) break;  // the next would pass b (and could overflow)
      }
    } else {
      const std::int64_t s = whole(step, flag, item);
      if (s < 1) fail("{} {}: a step must be at least 1", flag, item);
      for (std::int64_t v = a; v <= b; v += s) {
        add(v, item);
        if (v > b - s) break;
      }
    }
  }
  return out;
}

}  // namespace kintsugi
