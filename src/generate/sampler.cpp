// src/generate/sampler.cpp — the next token from a row of logits (sftdp/generate.h): greedy, or
// temperature, top-k and top-p (in transformers' order) and one draw from a seeded Mersenne Twister.
// The draw is the engine's 53 high bits as a double in [0, 1) (not std::uniform_real_distribution,
// whose algorithm the C++ standard leaves to each library): the same seed gives the same tokens
// with any standard library. Probabilities are summed in double.
#include <algorithm>
#include <cmath>
#include <string>

#include "sftdp/check.h"
#include "sftdp/generate.h"

namespace sftdp::generate {

void check_sampling(const Sampling& s) {
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature))
    throw UserError("--temperature: must be >= 0 (0 = greedy), got " + std::to_string(s.temperature));
  if (s.top_k < 0) throw UserError("--top-k: must be >= 0 (0 = no limit), got " + std::to_string(s.top_k));
  if (!(s.top_p > 0 && s.top_p <= 1))
    throw UserError("--top-p: must be in (0, 1] (1 = no limit), got " + std::to_string(s.top_p));
}

Sampler::Sampler(const Sampling& s) : s_(s), rng_(s.seed) { check_sampling(s); }

int32_t Sampler::next(const std::vector<float>& logits) {
  SFTDP_ASSERT(!logits.empty(), "Sampler::next: no logits");
  if (s_.temperature == 0)  // greedy: the first of the largest
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  kept_.clear();
  for (size_t i = 0; i < logits.size(); ++i) kept_.emplace_back(logits[i], static_cast<int32_t>(i));
  // Most likely first; equal logits in id order, so that the order is fixed by the logits alone.
  auto more_likely = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t n = kept_.size();
  if (s_.top_k > 0 && size_t(s_.top_k) < n) {
    std::partial_sort(kept_.begin(), kept_.begin() + s_.top_k, kept_.end(), more_likely);
    n = size_t(s_.top_k);
  } else {
    std::sort(kept_.begin(), kept_.end(), more_likely);
  }
  const double top = kept_[0].first / s_.temperature;
  std::vector<double> prob(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += prob[i] = std::exp(kept_[i].first / s_.temperature - top);
  if (s_.top_p < 1) {  // the smallest most-likely prefix whose probability reaches top_p (at least one)
    double cumulative = 0;
    size_t keep = 0;
    while (keep < n && cumulative < s_.top_p * sum) cumulative += prob[keep++];
    n = std::max<size_t>(keep, 1);
    sum = 0;
    for (size_t i = 0; i < n; ++i) sum += prob[i];
  }
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * sum;
  double cumulative = 0;
  for (size_t i = 0; i < n; ++i) {
    cumulative += prob[i];
    if (u < cumulative) return kept_[i].second;
  }
  return kept_[n - 1].second;  // u within rounding of the total
}

}  // namespace sftdp::generate
