// tests/hf/test_config_json.cpp — config.json key by key (SPEC §5, src/hf/config_json.h): RoPE as both
// transformers generations write it (rope_theta/rope_scaling < 5, rope_parameters >= 5) and their
// precedence; both spellings disagreeing, RoPE types other than default/llama3, per-layer RoPE and partial
// rotation refused; every unsupported key's value named at once; unknown keys named in one line, GPT-2's
// dropouts in a note. The real writers' files are tests/integration/test_hf_config_json.py's.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common/test_util.h"
#include "hf/config_json.h"
#include "sftdp/check.h"

using nlohmann::json;
using sftdp::test::user_error_of;

namespace sftdp::hf {
namespace {

const std::string kFile = "m/config.json";
const json kLlama3 = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                      {"original_max_position_embeddings", 8192}};

TEST(ConfigJsonRope, TransformersBefore5WritesTopLevelKeys) {
  const Rope r = read_rope({{"rope_theta", 500000.0}, {"rope_scaling", kLlama3}}, kFile, 131072);
  EXPECT_EQ(r.theta, 500000.0);
  EXPECT_TRUE(r.scaling.llama3);
  EXPECT_EQ(r.scaling.factor, 8.0);
  EXPECT_EQ(r.scaling.original_max_positions, 8192);
  EXPECT_EQ(read_rope(json::object(), kFile, 64).theta, 10000.0);  // absent: transformers' default
}

TEST(ConfigJsonRope, TransformersFrom5WritesRopeParameters) {
  // The Qwen3 of the issue: transformers 5.25 writes no top-level rope_theta.
  const Rope plain = read_rope({{"rope_parameters", {{"rope_theta", 1000000.0}, {"rope_type", "default"}}}}, kFile, 64);
  EXPECT_EQ(plain.theta, 1000000.0);
  EXPECT_FALSE(plain.scaling.llama3);
  json params = kLlama3;
  params["rope_theta"] = 500000.0;
  params.erase("original_max_position_embeddings");  // >= 5: defaults to max_position_embeddings
  const Rope llama3 = read_rope({{"rope_parameters", params}}, kFile, 4096);
  EXPECT_EQ(llama3.theta, 500000.0);
  EXPECT_TRUE(llama3.scaling.llama3);
  EXPECT_EQ(llama3.scaling.original_max_positions, 4096);
  // rope_parameters without its own rope_theta takes the top-level one (transformers' second source).
  EXPECT_EQ(read_rope({{"rope_theta", 2.0e5}, {"rope_parameters", {{"rope_type", "default"}}}}, kFile, 64).theta, 2.0e5);
  // "type" is the older spelling of rope_type.
  EXPECT_TRUE(read_rope({{"rope_scaling", {{"type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                            {"high_freq_factor", 4.0}}}}, kFile, 64).scaling.llama3);
}

TEST(ConfigJsonRope, BothSpellingsMustAgree) {
  // sft-dp's own export writes both (they agree): read as either.
  json both = {{"rope_theta", 500000.0}, {"rope_scaling", kLlama3}, {"rope_parameters", kLlama3}};
  both["rope_parameters"]["rope_theta"] = 500000.0;
  EXPECT_EQ(read_rope(both, kFile, 64).theta, 500000.0);
  const std::string e = user_error_of([] {
    read_rope({{"rope_theta", 10000.0}, {"rope_parameters", {{"rope_theta", 1000000.0}, {"rope_type", "default"}}}},
              kFile, 64);
  });
  EXPECT_EQ(e, "m/config.json: rope_theta/rope_scaling (rope_theta 10000, no scaling: what transformers < 5 reads) and "
               "rope_parameters (rope_theta 1e+06, no scaling: what transformers >= 5 reads) disagree; make them agree "
               "or remove one spelling");
  // A non-empty rope_scaling is what transformers >= 5 reads first (its backward-compatible name): a
  // rope_parameters that says otherwise is read by neither, and is refused.
  json stale = {{"rope_scaling", kLlama3}, {"rope_parameters", {{"rope_theta", 10000.0}, {"rope_type", "default"}}}};
  EXPECT_NE(user_error_of([&] { read_rope(stale, kFile, 64); }).find("disagree"), std::string::npos);
}

TEST(ConfigJsonRope, OtherRopeTypesPerLayerRopeAndPartialRotationAreRefused) {
  for (const char* type : {"yarn", "dynamic", "longrope", "linear", "proportional"}) {
    const std::string e = user_error_of([&] {
      read_rope({{"rope_parameters", {{"rope_type", type}, {"factor", 4.0}, {"rope_theta", 1e4}}}}, kFile, 64);
    });
    EXPECT_EQ(e, std::string("m/config.json: rope_parameters: rope_type \"") + type +
                     "\" is not supported (only \"default\" or \"llama3\"; transformers would scale the frequencies)");
  }
  EXPECT_NE(user_error_of([] {
              read_rope({{"rope_parameters", {{"full_attention", {{"rope_type", "default"}}}}}}, kFile, 64);
            }).find("rope_parameters.full_attention is not supported"),
            std::string::npos);
  EXPECT_NE(user_error_of([] {
              read_rope({{"rope_parameters", {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}}}}, kFile, 64);
            }).find("partial_rotary_factor 0.5 is not supported"),
            std::string::npos);
  EXPECT_NE(user_error_of([] { read_rope({{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}, kFile, 64); })
                .find("rope_scaling: low_freq_factor is missing (llama3 needs it)"),
            std::string::npos);
}

TEST(ConfigJsonKeys, EveryUnsupportedValueIsNamedAtOnce) {
  const json j = {{"attention_bias", true}, {"mlp_bias", true}, {"attention_dropout", 0.0}, {"pretraining_tp", 4}};
  try {
    refuse_unsupported_keys(j, kFile, "llama");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(e.messages(), (std::vector<std::string>{
                                "m/config.json: attention_bias true is not supported (biases on q/k/v/o_proj; "
                                "sft-dp's Llama block has none)",
                                "m/config.json: mlp_bias true is not supported (biases in the MLP; the model's MLP "
                                "has none)"}));
  }
  EXPECT_NO_THROW(refuse_unsupported_keys({{"attention_bias", false}, {"is_encoder_decoder", false}}, kFile, "llama"));
  EXPECT_NE(user_error_of([] {
              refuse_unsupported_keys({{"layer_types", {"full_attention", "sliding_attention"}}}, kFile, "qwen3");
            }).find("layer_types[1] \"sliding_attention\" is not supported"),
            std::string::npos);
  EXPECT_NE(user_error_of([] { refuse_unsupported_keys({{"use_sliding_window", true}}, kFile, "qwen2"); })
                .find("use_sliding_window true is not supported"),
            std::string::npos);
  EXPECT_NE(user_error_of([] {
              refuse_unsupported_keys({{"quantization_config", {{"quant_method", "bitsandbytes"}}}}, kFile, "llama");
            }).find("quantization_config {\"quant_method\":\"bitsandbytes\"} is not supported"),
            std::string::npos);
  EXPECT_NE(user_error_of([] { refuse_unsupported_keys({{"scale_attn_by_inverse_layer_idx", true}}, kFile, "gpt2"); })
                .find("scale_attn_by_inverse_layer_idx true is not supported"),
            std::string::npos);
}

TEST(ConfigJsonKeys, UnknownKeysAreNamedInOneLineAndDropoutsInANote) {
  const json gpt2 = {{"model_type", "gpt2"}, {"n_layer", 2}, {"resid_pdrop", 0.1}, {"embd_pdrop", 0.0},
                     {"my_new_key", 1}, {"another", true}, {"use_cache", true}};
  EXPECT_EQ(config_json_notes(gpt2, "gpt2"),
            (std::vector<std::string>{
                "config.json: resid_pdrop 0.1 is not applied (dropout probability: sft-dp fine-tunes without dropout, "
                "as llm.c does)",
                "config.json: keys sft-dp does not read: another, my_new_key (not part of the tables of SPEC §5; "
                "check they do not change the model)"}));
  const json qwen3 = {{"model_type", "qwen3"}, {"rope_parameters", {{"rope_theta", 1e6}, {"mrope_section", {1, 2}}}},
                      {"dtype", "bfloat16"}, {"layer_types", {"full_attention"}}};
  EXPECT_EQ(config_json_notes(qwen3, "qwen3"),
            std::vector<std::string>{"config.json: keys sft-dp does not read: rope_parameters.mrope_section (not part "
                                     "of the tables of SPEC §5; check they do not change the model)"});
  EXPECT_TRUE(config_json_notes({{"model_type", "llama"}, {"attention_dropout", 0.0}}, "llama").empty());
}

TEST(ConfigJsonKeys, EachFamilyTableNamesAKeyOnce) {
  for (const char* type : {"gpt2", "llama", "mistral", "qwen2", "qwen3"}) {
    std::set<std::string> seen;
    for (const auto& k : config_json_keys(type)) {
      EXPECT_TRUE(seen.insert(k.name).second) << type << ": " << k.name << " twice";
      EXPECT_NE(std::string(k.meaning), "") << k.name;
      if (k.use == KeyUse::kDefaultOnly || k.use == KeyUse::kNoted) {
        EXPECT_TRUE(json::parse(k.accepted).is_array()) << k.name;
      }
    }
  }
}

}  // namespace
}  // namespace sftdp::hf
