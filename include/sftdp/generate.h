// sftdp/generate.h — text generation from a trained model (sft_generate; SPEC §2): the model's
// forward pass one new token at a time over a key/value cache (kernels/kv_cache.h), on any device
// through the trainer's Ops table (the same kernels, the same code path on the CPU and the GPU), and
// the choice of each next token: greedy, or sampled with temperature / top-k / top-p from a seeded
// generator (the same seed gives the same tokens). A LoRA adapter is merged into the base when the
// model is loaded (W + s·B·A: what PEFT's merge_and_unload computes), so generation runs the plain
// model.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sftdp/config.h"
#include "sftdp/model.h"

namespace sftdp {
struct Ops;
}

namespace sftdp::generate {

// A model on the host: its dimensions, its SPEC parameters (param_layout(d)), and the ids that end a
// reply (eos_ids: generation_config.json's or config.json's eos_token_id; the byte tokenizer's <|eos|>
// and <|end|> for a checkpoint of sft_prepare's byte vocabulary).
struct LoadedModel {
  config::ModelDims d;
  std::vector<float> params;
  std::vector<int32_t> eos_ids;
  bool byte_tokenizer = false;  // vocab_size is the byte tokenizer's (src/data/tokenizer.h)
  std::string source;           // what was loaded, for the log line
  std::vector<std::string> notes;  // a Hugging Face directory's config.json notes (hf::read_hf_notes), for stderr
};

// path: an sft-dp checkpoint or params-only .h5 (SPEC §5; a LoRA checkpoint's adapters merged into
// the base it names), or a Hugging Face model directory (hf/hf_dir.h). adapter_dir, if not empty: a
// PEFT LoRA adapter directory merged into that model. Problems: UserError naming the file.
LoadedModel load_model(const std::string& path, const std::string& adapter_dir = "");

// The forward pass with a key/value cache of max_T positions on ops's device.
class Generator {
 public:
  Generator(const LoadedModel& m, const Ops& ops, int max_T);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Runs n tokens at positions [position(), position() + n) (position() + n <= max_T()), appending
  // their keys and values to the cache, and returns the logits (host, V floats) of the last one; with
  // all_rows, those of all n ((n, V), row-major).
  const std::vector<float>& feed(const int32_t* ids, int n, bool all_rows = false);
  void reset() { pos_ = 0; }  // an empty cache: the next feed starts at position 0
  int position() const { return pos_; }
  int max_T() const { return max_T_; }
  const config::ModelDims& dims() const { return d_; }

 private:
  struct Buffers;
  void layer_forward(int l, int n);
  config::ModelDims d_;
  const Ops& ops_;
  int max_T_, pos_ = 0;
  model::ParamLayout layout_;
  std::unique_ptr<Buffers> b_;
  std::vector<float> logits_;
};

// How the next token is chosen from the logits: temperature 0 is greedy (the first largest logit);
// else softmax(logits / temperature) restricted to the top_k largest (0: all) and then to the smallest
// set of most likely tokens whose probability reaches top_p (1: all), renormalised, sampled with a
// 64-bit Mersenne Twister seeded with seed (transformers' order: temperature, top-k, top-p).
struct Sampling {
  double temperature = 0.0;
  int top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
};
// Throws UserError naming the flag for a negative temperature, top_k < 0 or top_p outside (0, 1].
void check_sampling(const Sampling& s);

class Sampler {
 public:
  explicit Sampler(const Sampling& s);
  int32_t next(const std::vector<float>& logits);

 private:
  Sampling s_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> kept_;  // scratch: (logit, id) of the candidates
};

// Wall-clock seconds of one generate(): the prompt's forward (prefill) and the decoding steps (one
// forward per new token but the last).
struct Timing {
  double prefill_s = 0, decode_s = 0;
  int prefill_tokens = 0, decode_steps = 0;
};
// Generates after prompt (fed whole, from an empty cache) until a stop id (included in the result,
// as transformers' generate returns it), max_new_tokens new tokens, or a full cache.
std::vector<int32_t> generate(Generator& g, Sampler& sampler, const std::vector<int32_t>& prompt, int max_new_tokens,
                              const std::vector<int32_t>& stop_ids, Timing* timing = nullptr);

}  // namespace sftdp::generate
