// src/model/rope_freq.cpp — RoPE inverse frequencies as Hugging Face computes them (fp32):
// inv_freq[i] = 1 / theta^(float(2i)/HS), and for Llama-3 (rope_scaling type "llama3") the
// wavelength-dependent rescaling of transformers' _compute_llama3_parameters: long wavelengths
// divided by `factor`, short ones kept, the band between interpolated smoothly.
#include <cmath>
#include <numbers>

#include "sftdp/model.h"

namespace sftdp::model {

std::vector<float> rope_inv_freq(const config::ModelDims& d) {
  const int HS = d.head_size();
  std::vector<float> inv(HS / 2);
  const float theta = static_cast<float>(d.rope_theta);
  for (int i = 0; i < HS / 2; ++i)
    inv[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(HS));
  const auto& s = d.rope_scaling;
  if (!s.llama3) return inv;
  const double old_len = s.original_max_positions;
  const double low_wavelen = old_len / s.low_freq_factor, high_wavelen = old_len / s.high_freq_factor;
  for (auto& f : inv) {
    const double wavelen = 2 * std::numbers::pi / f;
    const float scaled = wavelen > low_wavelen ? static_cast<float>(f / s.factor) : f;
    if (wavelen < high_wavelen || wavelen > low_wavelen) {
      f = scaled;
      continue;
    }
    const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    f = static_cast<float>((1 - smooth) * scaled / s.factor + smooth * scaled);
  }
  return inv;
}

}  // namespace sftdp::model
