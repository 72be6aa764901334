// tests/config/test_resume_changes.cpp — what a resumed run changed (SPEC §5 "Resume"): every key
// whose value differs from the config its checkpoint stores, in key-table order, for the log; the
// model (as resolved), LoRA's adapters and the data order cannot change: an error naming the key,
// both values and the checkpoint.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/test_util.h"
#include "sftdp/check.h"
#include "sftdp/config.h"

using sftdp::test::user_error_of;

namespace sftdp::config {
namespace {

const std::string kRun = "train_files: train.h5\nglobal_batch_size: 8\nmax_target_length: 64\n"
                         "learning_rate: 0.001\nsteps: 10\n";
const std::string kCheckpoint = "out/r/checkpoints/step_10.h5";

// The checkpoint's stored config (to_yaml of the run that wrote it) against this run's.
std::vector<KeyChange> changes(const std::vector<std::string>& before, const std::vector<std::string>& now) {
  return resume_changes(from_yaml_text(kRun, now), from_yaml_text(kRun, before).to_yaml(), kCheckpoint);
}

std::string refusal(const std::vector<std::string>& before, const std::vector<std::string>& now) {
  return user_error_of([&] { changes(before, now); });
}

std::vector<std::string> lines(const std::vector<KeyChange>& cs) {
  std::vector<std::string> out;
  for (const auto& c : cs) out.push_back(c.key + " " + c.before + " -> " + c.after);
  return out;
}

TEST(ResumeChanges, TheSameConfigChangesNothing) { EXPECT_TRUE(changes({}, {}).empty()); }

TEST(ResumeChanges, EveryChangedKeyIsListedInKeyTableOrder) {
  EXPECT_EQ(lines(changes({}, {"learning_rate=5e-4", "steps=20", "zero_stage=1", "global_batch_size=16",
                               "train_files=moved/train.h5"})),
            (std::vector<std::string>{"steps 10 -> 20", "global_batch_size 8 -> 16",
                                      "train_files [train.h5] -> [moved/train.h5]", "learning_rate 0.001 -> 5.0e-04",
                                      "zero_stage 0 -> 1"}));
}

TEST(ResumeChanges, TheModelCannotChange) {
  EXPECT_EQ(refusal({}, {"num_decoder_layers=3"}),
            "num_decoder_layers: cannot change when resuming: out/r/checkpoints/step_10.h5 was trained with 2, this "
            "run has 3 (its tensors are that model's); set it back, or start a new run under another run_name");
  EXPECT_EQ(refusal({}, {"model_name=gpt2-124m"}).substr(0, 75),
            "num_decoder_layers: cannot change when resuming: out/r/checkpoints/step_10.")
      << "another preset is another model: its first differing dimension is named";
  EXPECT_CONTAINS(refusal({"model_name=llama-tiny"}, {"model_name=llama-tiny", "rope_theta=500000"}),
                  "rope_theta: cannot change when resuming: out/r/checkpoints/step_10.h5 was trained with 10000.0, "
                  "this run has 5.0e+05");
  EXPECT_EQ(refusal({}, {"vocab_size=300"}).substr(0, 20), "vocab_size: cannot c");
}

TEST(ResumeChanges, ThePresetWrittenOutAsDimensionsIsTheSameModel) {
  // gpt2-tiny is L 2, NH 4, C 64, F 256, V 264, T_max 256: the same tensors, only the keys differ.
  const auto cs = changes({}, {"model_name=", "num_decoder_layers=2", "num_heads=4", "emb_dim=64", "mlp_dim=256",
                               "vocab_size=264", "max_position_embeddings=256"});
  EXPECT_EQ(lines(cs), (std::vector<std::string>{"model_name gpt2-tiny -> \"\"", "num_decoder_layers null -> 2",
                                                 "num_heads null -> 4", "emb_dim null -> 64", "mlp_dim null -> 256",
                                                 "vocab_size null -> 264", "max_position_embeddings null -> 256"}));
}

TEST(ResumeChanges, TheAdaptersAndTheDataOrderCannotChange) {
  EXPECT_EQ(refusal({"lora_rank=8"}, {"lora_rank=16"}),
            "lora_rank: cannot change when resuming: out/r/checkpoints/step_10.h5 was trained with 8, this run has "
            "16 (the checkpoint holds adapters of that rank (or none)); set it back, or start a new run under another "
            "run_name");
  EXPECT_NE(refusal({}, {"lora_rank=8"}).find("lora_rank: cannot change"), std::string::npos);
  EXPECT_NE(refusal({"lora_rank=8"}, {"lora_rank=8", "lora_alpha=16"}).find("lora_alpha: cannot change"),
            std::string::npos);
  EXPECT_NE(refusal({"lora_rank=8"}, {"lora_rank=8", "lora_target_modules=[q_proj]"}).find("lora_target_modules:"),
            std::string::npos);
  EXPECT_EQ(refusal({}, {"data_shuffle_seed=7"}),
            "data_shuffle_seed: cannot change when resuming: out/r/checkpoints/step_10.h5 was trained with 0, this "
            "run has 7 (the data cursor counts steps of that permutation); set it back, or start a new run under "
            "another run_name");
  EXPECT_NE(refusal({}, {"enable_data_shuffling=false"}).find("enable_data_shuffling: cannot change"),
            std::string::npos);
  // lora_dropout is a training choice, not a tensor: listed, not refused.
  EXPECT_EQ(lines(changes({"lora_rank=8"}, {"lora_rank=8", "lora_dropout=0.1"})),
            std::vector<std::string>{"lora_dropout 0.0 -> 0.1"});
}

TEST(ResumeChanges, KeysTheCheckpointDoesNotNameAreNotCompared) {
  // An older build's config: no cuda_graphs key, and a key this build no longer has.
  const std::string old = "steps: 10\nglobal_batch_size: 8\nmax_target_length: 64\ntrain_files: [train.h5]\n"
                          "learning_rate: 0.001\nretired_key: 3\n";
  const Config now = from_yaml_text(kRun, {"cuda_graphs=false"});
  EXPECT_TRUE(resume_changes(now, old, kCheckpoint).empty());
  EXPECT_TRUE(resume_changes(now, "not: [a, valid", kCheckpoint).empty()) << "unreadable YAML: nothing to compare";
}

}  // namespace
}  // namespace sftdp::config
