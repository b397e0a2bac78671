#include "kintsugi/model/rotary_table.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kintsugi {

namespace {

// Llama 3.1's scaling: wavelengths shorter than original / high_freq_factor keep their
// frequency, those longer than original / low_freq_factor are divided by the factor, and the
// ones between blend the two by where the wavelength falls.
void llama3(const ModelConfig& c, double original, RotaryTable& t) {
  const double low_wavelength = original / c.rope_low_freq_factor;
  const double high_wavelength = original / c.rope_high_freq_factor;
  for (double& f : t.inv_freq) {
    const double wavelength = 2 * std::numbers::pi / f;
    if (wavelength < high_wavelength) continue;
    if (wavelength > low_wavelength) {
      f /= c.rope_factor;
      continue;
    }
    const double smooth = (original / wavelength - c.rope_low_freq_factor) /
                          (c.rope_high_freq_factor - c.rope_low_freq_factor);
    f = (1 - smooth) * f / c.rope_factor + smooth * f;
  }
}

// YaRN (Peng et al. 2023, as Hugging Face computes it): the dimension that turns r times over
// the original context is hd ln(original / (2 pi r)) / (2 ln theta); dimensions below the one
// for beta_fast keep their frequency, those above the one for beta_slow are divided by the
// factor, with a linear ramp between (the bounds rounded outwards).
void yarn(const ModelConfig& c, double original, RotaryTable& t) {
  const double hd = static_cast<double>(c.head_dim());
  auto dimension = [&](double rotations) {
    return hd * std::log(original / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(c.rope_theta));
  };
  const double low = std::max(std::floor(dimension(c.rope_beta_fast)), 0.0);
  double high = std::min(std::ceil(dimension(c.rope_beta_slow)), hd - 1);
  if (high == low) high += 0.001;  // no division by zero
  for (std::size_t i = 0; i < t.inv_freq.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double f = t.inv_freq[i];
    t.inv_freq[i] = f / c.rope_factor * ramp + f * (1 - ramp);
  }
  t.scale = c.rope_attention_factor > 0   ? c.rope_attention_factor
            : c.rope_factor > 1 ? 0.1 * std::log(c.rope_factor) + 1
                                : 1.0;
}

}  // namespace

RotaryTable rotary_table(const ModelConfig& c) {
  RotaryTable t = RotaryTable::plain(c.rope_theta, c.head_dim());
  const double original = static_cast<double>(
      c.rope_original_context > 0 ? c.rope_original_context : c.seq_len);
  switch (c.rope_scaling) {
    case RopeScaling::none: break;
    case RopeScaling::linear:
      for (double& f : t.inv_freq) f /= c.rope_factor;
      break;
    case RopeScaling::llama3: llama3(c, original, t); break;
    case RopeScaling::yarn: yarn(c, original, t); break;
  }
  return t;
}

}  // namespace kintsugi
