// tests/generate/test_generator.cpp — generation's forward pass and sampler (sftdp/generate.h).
// The cache: for every family (generate_fixtures.h), the logits of a sequence fed one token at a time
// over the key/value cache, fed whole (a prefill, every row's logits), and fed in uneven pieces agree
// (1e-5 of the largest logit); and the trainer's own Model::forward on the same tokens gives the loss
// sum Σ −log softmax(logits_t)[target_t] those logits give (1e-5 relative). Sampling: the same seed
// gives the same tokens and another seed others; top_k = 1 and a tiny top_p are greedy; sampled
// frequencies follow softmax(logits / T) over the kept tokens (20000 draws, 4 standard deviations);
// generate() stops after a stop id (kept) or max_new_tokens, and refuses ids outside the vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/test_util.h"
#include "generate/generate_fixtures.h"
#include "kernels/ops.h"
#include "sftdp/data.h"

namespace sftdp::test {
namespace {

const std::vector<int32_t> kTokens = {1, 5, 9, 2, 30, 7, 7, 11, 0, 36};

// Logits (n, V) of kTokens fed in the given pieces.
std::vector<float> fed_in_pieces(generate::Generator& g, const std::vector<int>& pieces) {
  g.reset();
  std::vector<float> all;
  size_t at = 0;
  for (int n : pieces) {
    const auto& logits = g.feed(kTokens.data() + at, n, /*all_rows=*/true);
    all.insert(all.end(), logits.begin(), logits.end());
    at += n;
  }
  EXPECT_EQ(at, kTokens.size());
  return all;
}

class GeneratorCache : public ::testing::TestWithParam<Family> {};

TEST_P(GeneratorCache, OneTokenAtATimeEqualsAPrefillAndTheTrainersForward) {
  const config::ModelDims d = GetParam().dims;
  const auto m = random_model(d, 3);
  generate::Generator g(m, cpu_ops(), 12);
  const int n = static_cast<int>(kTokens.size());
  const auto step_by_step = fed_in_pieces(g, std::vector<int>(n, 1));
  const auto whole = fed_in_pieces(g, {n});
  const auto uneven = fed_in_pieces(g, {3, 1, 4, 2});
  double largest = 0;
  for (float x : whole) largest = std::max(largest, double(std::fabs(x)));
  ASSERT_GT(largest, 1.0) << "logits too flat to compare";
  EXPECT_TRUE(allclose(step_by_step, whole, 1e-5 * largest, 0));
  EXPECT_TRUE(allclose(uneven, whole, 1e-5 * largest, 0));
  // The last-row form (what decoding uses) is the last row of all rows.
  g.reset();
  const auto last = g.feed(kTokens.data(), n);
  EXPECT_TRUE(allclose(last, std::vector<float>(whole.end() - d.V, whole.end()), 1e-5 * largest, 0));

  // Model::forward: the loss sum over targets = the next token (the last predicts token 0).
  data::Batch b;
  b.B = 1, b.T = n, b.inputs = kTokens;
  for (int t = 0; t < n; ++t) b.targets.push_back(t + 1 < n ? kTokens[t + 1] : 0);
  b.loss_weights.assign(n, 1.0f);
  auto model = model::make_model(d, cpu_ops(), 1, n);
  model->set_params_from_host(m.params);
  const model::LossSums sums = model->forward(b);
  double want = 0;
  for (int t = 0; t < n; ++t) {
    const float* row = step_by_step.data() + size_t(t) * d.V;
    const double top = *std::max_element(row, row + d.V);
    double z = 0;
    for (int v = 0; v < d.V; ++v) z += std::exp(row[v] - top);
    want += top + std::log(z) - row[b.targets[t]];
  }
  EXPECT_NEAR(sums.loss_sum, want, 1e-5 * want);
  EXPECT_EQ(sums.weight_sum, n);
}

TEST_P(GeneratorCache, RefusesWhatDoesNotFit) {
  const config::ModelDims d = GetParam().dims;
  generate::Generator g(random_model(d, 4), cpu_ops(), 4);
  EXPECT_NE(user_error_of([&] { g.feed(kTokens.data(), 5); }).find("cache of 4 positions"), std::string::npos);
  const int32_t bad = d.V;
  EXPECT_NE(user_error_of([&] { g.feed(&bad, 1); }).find("outside the model's vocabulary"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Families, GeneratorCache, ::testing::ValuesIn(generate_families()), family_name);

std::vector<int32_t> draws(const generate::Sampling& s, const std::vector<float>& logits, int n) {
  generate::Sampler sampler(s);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(sampler.next(logits));
  return out;
}

TEST(Sampler, SameSeedSameTokensOtherSeedOthers) {
  const auto logits = uniform(50, 1, -2.f, 2.f);
  generate::Sampling s{.temperature = 1.0, .top_k = 0, .top_p = 0.9, .seed = 42};
  const auto a = draws(s, logits, 200), b = draws(s, logits, 200);
  EXPECT_EQ(a, b);
  s.seed = 43;
  EXPECT_NE(draws(s, logits, 200), a);
}

TEST(Sampler, TopKOneAndATinyTopPAreGreedy) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const auto logits = uniform(300, 100 + seed, -3.f, 3.f);
    const int32_t greedy = draws({}, logits, 1)[0];
    EXPECT_EQ(greedy, std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(draws({.temperature = 1.5, .top_k = 1, .seed = seed}, logits, 20), std::vector<int32_t>(20, greedy));
    EXPECT_EQ(draws({.temperature = 1.5, .top_p = 1e-6, .seed = seed}, logits, 20), std::vector<int32_t>(20, greedy));
  }
}

// Frequencies of n draws against the expected probabilities, within 4 standard deviations.
void expect_frequencies(const std::vector<int32_t>& got, const std::vector<double>& want) {
  const double n = static_cast<double>(got.size());
  for (size_t id = 0; id < want.size(); ++id) {
    const double count = static_cast<double>(std::count(got.begin(), got.end(), static_cast<int32_t>(id)));
    const double sd = std::sqrt(n * want[id] * (1 - want[id]));
    EXPECT_NEAR(count, n * want[id], 4 * sd + 1e-9) << "id " << id;
  }
}

TEST(Sampler, FrequenciesFollowTheTemperatureTopKAndTopP) {
  const float l3 = std::log(3.f), l2 = std::log(2.f);
  const std::vector<float> logits = {0.f, l3, l2, -1.f};  // softmax ∝ 1 : 3 : 2 : e^-1
  const double z = 6 + std::exp(-1.0);
  expect_frequencies(draws({.temperature = 1.0, .seed = 1}, logits, 20000), {1 / z, 3 / z, 2 / z, std::exp(-1.0) / z});
  // T = 0.5: ∝ 1 : 9 : 4 : e^-2
  const double z2 = 14 + std::exp(-2.0);
  expect_frequencies(draws({.temperature = 0.5, .seed = 2}, logits, 20000),
                     {1 / z2, 9 / z2, 4 / z2, std::exp(-2.0) / z2});
  // top_k = 2: ids 1 and 2, 3 : 2
  expect_frequencies(draws({.temperature = 1.0, .top_k = 2, .seed = 3}, logits, 20000), {0, 0.6, 0.4, 0});
  // top_p = 0.7: 3/z = 0.474 < 0.7 <= 5/z = 0.79, so ids 1 and 2 again
  expect_frequencies(draws({.temperature = 1.0, .top_p = 0.7, .seed = 4}, logits, 20000), {0, 0.6, 0.4, 0});
  // top_p = 0.4: id 1 alone reaches it
  expect_frequencies(draws({.temperature = 1.0, .top_p = 0.4, .seed = 5}, logits, 2000), {0, 1, 0, 0});
}

TEST(Sampler, RefusesBadSettingsNamingTheFlag) {
  EXPECT_NE(user_error_of([] { generate::Sampler s({.temperature = -1}); }).find("--temperature"), std::string::npos);
  EXPECT_NE(user_error_of([] { generate::Sampler s({.top_k = -1}); }).find("--top-k"), std::string::npos);
  EXPECT_NE(user_error_of([] { generate::Sampler s({.top_p = 0}); }).find("--top-p"), std::string::npos);
  EXPECT_NE(user_error_of([] { generate::Sampler s({.top_p = 1.5}); }).find("--top-p"), std::string::npos);
}

TEST(Generate, StopsAfterAStopIdOrMaxNewTokens) {
  const auto families = generate_families();
  const auto m = random_model(families[1].dims, 5);
  generate::Generator g(m, cpu_ops(), 40);
  generate::Sampler greedy({});
  const std::vector<int32_t> prompt = {4, 8, 15};
  const auto free_run = generate::generate(g, greedy, prompt, 20, {});
  ASSERT_EQ(free_run.size(), 20u);
  // Stopping at the 6th token's id: the output is the free run up to its first occurrence, included.
  const int32_t stop = free_run[5];
  const auto stopped = generate::generate(g, greedy, prompt, 20, {stop});
  const auto first = std::find(free_run.begin(), free_run.end(), stop);
  EXPECT_EQ(stopped, std::vector<int32_t>(free_run.begin(), first + 1));
  EXPECT_EQ(generate::generate(g, greedy, prompt, 7, {}), std::vector<int32_t>(free_run.begin(), free_run.begin() + 7));
  EXPECT_TRUE(generate::generate(g, greedy, prompt, 0, {}).empty());
  // The cache holds 40 positions: the prompt's 3 and 37 new tokens fed back, plus the last new token,
  // which is never fed.
  EXPECT_EQ(generate::generate(g, greedy, prompt, 100, {}).size(), 38u);
}

}  // namespace
}  // namespace sftdp::test
