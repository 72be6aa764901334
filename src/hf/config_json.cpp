// src/hf/config_json.cpp — see config_json.h. The tables list what transformers 4.44 and 5.x write for
// GPT2Config, LlamaConfig, MistralConfig, Qwen2Config and Qwen3Config (to_dict() of each class, which
// save_pretrained's config.json is a subset of), plus the keys some published models add (SmolLM2's
// nanotron keys). SPEC §5 holds the same tables; tests/integration/test_hf_config_json.py checks that
// no key either transformers writes is unknown here.
#include "hf/config_json.h"

#include <algorithm>
#include <cmath>

#include "sftdp/check.h"

namespace sftdp::hf {
namespace {

using json = nlohmann::json;
constexpr KeyUse R = KeyUse::kRead, I = KeyUse::kIrrelevant, D = KeyUse::kDefaultOnly, N = KeyUse::kNoted;

constexpr const char* kGeneration = "a generation default (sft_generate and generate.py read generation_config.json)";
constexpr const char* kOutputs = "what a transformers forward returns; no bearing on the model";
constexpr const char* kNoDropout = "dropout probability: sft-dp fine-tunes without dropout, as llm.c does";

// PretrainedConfig's keys (4.44's to_dict(); 5.x keeps a subset and spells torch_dtype as dtype).
const ConfigJsonKey kCommon[] = {
    {"model_type", R, "the family: gpt2, llama, mistral, qwen2 or qwen3", ""},
    {"architectures", R, "the family when model_type is missing (*ForCausalLM); else not used", ""},
    {"vocab_size", R, "vocabulary rows of the embedding and head", ""},
    {"tie_word_embeddings", R, "whether the head is the token embedding", ""},
    {"bos_token_id", R, "written into the export's config.json and generation_config.json", ""},
    {"eos_token_id", R, "written into the export's config.json and generation_config.json", ""},
    {"pad_token_id", R, "written into the export's config.json and generation_config.json", ""},
    {"transformers_version", I, "which transformers wrote the file", ""},
    {"_name_or_path", I, "where transformers loaded the model from", ""},
    {"torch_dtype", I, "the tensors' storage dtype: sft-dp reads each tensor's own (F32, F16, BF16); dtype and "
                       "weight_dtype in the run's config choose the arithmetic", ""},
    {"dtype", I, "transformers >= 5's torch_dtype (see there)", ""},
    {"use_bfloat16", I, "an old TensorFlow storage flag", ""},
    {"initializer_range", I, "the std of transformers' random init; the weights are loaded", ""},
    {"use_cache", I, "keeps k/v for generation; training recomputes them", ""},
    {"output_attentions", I, kOutputs, ""},
    {"output_hidden_states", I, kOutputs, ""},
    {"return_dict", I, kOutputs, ""},
    {"torchscript", I, "a TorchScript export flag", ""},
    {"tf_legacy_loss", I, "a TensorFlow loss flag", ""},
    {"chunk_size_feed_forward", I, "feed-forward chunking: the same products in pieces", ""},
    {"id2label", I, "labels of a classification head (none here)", ""},
    {"label2id", I, "labels of a classification head (none here)", ""},
    {"problem_type", I, "the loss of a classification head (none here)", ""},
    {"finetuning_task", I, "a note of the task", ""},
    {"tokenizer_class", I, "the tokenizer's class (the tokenizer files say it)", ""},
    {"prefix", I, "a prompt prefix some pipelines add", ""},
    {"task_specific_params", I, "pipeline settings", ""},
    {"is_decoder", I, "an encoder model's switch; causal LMs are decoders regardless", ""},
    {"tie_encoder_decoder", I, "encoder-decoder models only", ""},
    {"cross_attention_hidden_size", I, "encoder-decoder models only", ""},
    {"decoder_start_token_id", I, "encoder-decoder models only", ""},
    {"sep_token_id", I, "a separator id for paired inputs; not used by causal LMs", ""},
    {"max_length", I, kGeneration, ""},
    {"min_length", I, kGeneration, ""},
    {"do_sample", I, kGeneration, ""},
    {"early_stopping", I, kGeneration, ""},
    {"num_beams", I, kGeneration, ""},
    {"num_beam_groups", I, kGeneration, ""},
    {"diversity_penalty", I, kGeneration, ""},
    {"temperature", I, kGeneration, ""},
    {"top_k", I, kGeneration, ""},
    {"top_p", I, kGeneration, ""},
    {"typical_p", I, kGeneration, ""},
    {"repetition_penalty", I, kGeneration, ""},
    {"length_penalty", I, kGeneration, ""},
    {"no_repeat_ngram_size", I, kGeneration, ""},
    {"encoder_no_repeat_ngram_size", I, kGeneration, ""},
    {"bad_words_ids", I, kGeneration, ""},
    {"num_return_sequences", I, kGeneration, ""},
    {"output_scores", I, kGeneration, ""},
    {"return_dict_in_generate", I, kGeneration, ""},
    {"forced_bos_token_id", I, kGeneration, ""},
    {"forced_eos_token_id", I, kGeneration, ""},
    {"remove_invalid_values", I, kGeneration, ""},
    {"exponential_decay_length_penalty", I, kGeneration, ""},
    {"suppress_tokens", I, kGeneration, ""},
    {"begin_suppress_tokens", I, kGeneration, ""},
    {"is_encoder_decoder", D, "an encoder-decoder model; sft-dp trains decoder-only models", "[false]"},
    {"add_cross_attention", D, "cross-attention layers; sft-dp's blocks have none", "[false]"},
    {"pruned_heads", D, "heads removed from some layers; sft-dp's layers all have num_attention_heads", "[{}]"},
    {"quantization_config", D, "quantised weights; sft-dp loads F32, F16 or BF16 tensors", "[]"},
};

const ConfigJsonKey kGpt2[] = {
    {"n_layer", R, "num_decoder_layers", ""},
    {"n_head", R, "num_heads", ""},
    {"n_embd", R, "emb_dim", ""},
    {"n_inner", R, "mlp_dim (null: 4 x n_embd)", ""},
    {"n_positions", R, "max_position_embeddings (rows of wpe)", ""},
    {"activation_function", R, "the MLP's GELU: gelu_new or gelu_pytorch_tanh (the tanh form) only", ""},
    {"layer_norm_epsilon", R, "LayerNorm's epsilon: 1e-5 only", ""},
    {"n_ctx", I, "an old name of n_positions (transformers no longer reads it)", ""},
    {"reorder_and_upcast_attn", I, "computes attention scores in fp32: sft-dp's always are", ""},
    {"summary_type", I, "GPT2DoubleHeadsModel's classifier (not part of a causal LM)", ""},
    {"summary_use_proj", I, "GPT2DoubleHeadsModel's classifier (not part of a causal LM)", ""},
    {"summary_activation", I, "GPT2DoubleHeadsModel's classifier (not part of a causal LM)", ""},
    {"summary_proj_to_labels", I, "GPT2DoubleHeadsModel's classifier (not part of a causal LM)", ""},
    {"summary_first_dropout", I, "GPT2DoubleHeadsModel's classifier (not part of a causal LM)", ""},
    {"scale_attn_weights", D, "scores scaled by 1/sqrt(head size), as sft-dp's attention does", "[true]"},
    {"scale_attn_by_inverse_layer_idx", D, "scores also scaled by 1/(layer+1); sft-dp's are not", "[false]"},
    {"resid_pdrop", N, kNoDropout, "[0]"},
    {"embd_pdrop", N, kNoDropout, "[0]"},
    {"attn_pdrop", N, kNoDropout, "[0]"},
};

// Every Llama-family class (llama, mistral, qwen2, qwen3).
const ConfigJsonKey kLlamaFamily[] = {
    {"num_hidden_layers", R, "num_decoder_layers", ""},
    {"num_attention_heads", R, "num_heads", ""},
    {"num_key_value_heads", R, "num_kv_heads (absent: num_attention_heads)", ""},
    {"hidden_size", R, "emb_dim", ""},
    {"intermediate_size", R, "mlp_dim", ""},
    {"head_dim", R, "head_dim (absent: hidden_size / num_attention_heads; Qwen3: 128)", ""},
    {"max_position_embeddings", R, "the longest max_target_length allowed; llama3 RoPE's default "
                                   "original_max_position_embeddings", ""},
    {"rms_norm_eps", R, "RMSNorm's epsilon", ""},
    {"rope_theta", R, "RoPE's base, as transformers < 5 writes it (rope_parameters.rope_theta from 5 on)", ""},
    {"rope_scaling", R, "RoPE's frequency scaling, as transformers < 5 writes it: null, default or llama3", ""},
    {"rope_parameters", R, "transformers >= 5's RoPE: rope_theta, rope_type (default or llama3) and llama3's "
                           "factor, low_freq_factor, high_freq_factor, original_max_position_embeddings", ""},
    {"hidden_act", R, "the MLP's activation: silu (SwiGLU) only", ""},
    {"partial_rotary_factor", D, "RoPE on part of each head; sft-dp rotates all of it", "[1, null]"},
    {"attention_dropout", N, kNoDropout, "[0, null]"},
};

const ConfigJsonKey kLlama[] = {
    {"attention_bias", D, "biases on q/k/v/o_proj; sft-dp's Llama block has none", "[false]"},
    {"mlp_bias", D, "biases in the MLP; the model's MLP has none", "[false]"},
    {"pretraining_tp", I, "splits the same products into slices (tensor parallelism at pretraining)", ""},
    {"rope_interleaved", D, "nanotron's interleaved RoPE pairs (SmolLM2 writes false); sft-dp rotates halves "
                            "as transformers does", "[false]"},
    {"is_llama_config", I, "nanotron's marker (SmolLM2)", ""},
    {"transformers.js_config", I, "transformers.js export settings (SmolLM2)", ""},
};

const ConfigJsonKey kMistral[] = {
    {"sliding_window", R, "attention window; only null (the whole sequence) is supported", ""},
};

// Qwen2 and Qwen3: the sliding-window keys, read only with use_sliding_window.
const ConfigJsonKey kQwen[] = {
    {"use_sliding_window", D, "sliding-window attention in the upper layers; sft-dp attends over the whole "
                              "sequence", "[false]"},
    {"sliding_window", I, "the window; not used while use_sliding_window is false", ""},
    {"max_window_layers", I, "the first layer with a window; not used while use_sliding_window is false", ""},
    {"layer_types", R, "each layer's attention: every entry must be full_attention", ""},
};

const ConfigJsonKey kQwen3[] = {
    {"attention_bias", D, "biases on q/k/v/o_proj; Qwen3 blocks have none", "[false]"},
};

template <size_t K>
void append(std::vector<ConfigJsonKey>& out, const ConfigJsonKey (&keys)[K]) {
  out.insert(out.end(), keys, keys + K);
}

const ConfigJsonKey* find(const std::vector<ConfigJsonKey>& keys, const std::string& name) {
  for (const auto& k : keys)
    if (name == k.name) return &k;
  return nullptr;
}

bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// `value` is one of the JSON array text `accepted` (numbers compare as numbers: 0 is 0.0).
bool accepted(const json& value, const char* accepted_values) {
  for (const json& ok : json::parse(accepted_values)) {
    if (ok == value) return true;
    if (ok.is_number() && value.is_number() && ok.get<double>() == value.get<double>()) return true;
  }
  return false;
}

// The fields of a rope dict each RoPE type reads (transformers' _validate_<type>_rope_parameters).
bool rope_field_known(const std::string& field) {
  static const char* kFields[] = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "factor",
                                  "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
  return std::any_of(std::begin(kFields), std::end(kFields), [&](const char* f) { return field == f; });
}

double positive(const json& v, const std::string& where) {
  if (!v.is_number() || !(v.get<double>() > 0))
    throw UserError(where + " must be a positive number, got " + v.dump());
  return v.get<double>();
}

// One reading of RoPE from a rope dict (may be null: plain RoPE) and the theta/original length to fall
// back on. `where` names the dict for messages ("config.json: rope_parameters").
Rope rope_from(const json& dict, const std::string& where, double theta, const json& original_fallback) {
  Rope r;
  r.theta = theta;
  if (dict.is_null()) return r;
  if (!dict.is_object()) throw UserError(where + " must be null or an object, got " + dict.dump());
  if (present(dict, "rope_theta")) r.theta = positive(dict["rope_theta"], where + ": rope_theta");
  if (present(dict, "partial_rotary_factor") && !accepted(dict["partial_rotary_factor"], "[1]"))
    throw UserError(where + ": partial_rotary_factor " + dict["partial_rotary_factor"].dump() +
                    " is not supported (RoPE on part of each head; sft-dp rotates all of it)");
  const json type = present(dict, "rope_type") ? dict["rope_type"] : present(dict, "type") ? dict["type"]
                                                                                           : json("default");
  if (type == "default") return r;  // transformers' name for plain RoPE
  if (type != "llama3")
    throw UserError(where + ": rope_type " + type.dump() +
                    " is not supported (only \"default\" or \"llama3\"; transformers would scale the frequencies)");
  r.scaling.llama3 = true;
  for (const char* key : {"factor", "low_freq_factor", "high_freq_factor"})
    if (!present(dict, key)) throw UserError(where + ": " + key + " is missing (llama3 needs it)");
  r.scaling.factor = positive(dict["factor"], where + ": factor");
  r.scaling.low_freq_factor = positive(dict["low_freq_factor"], where + ": low_freq_factor");
  r.scaling.high_freq_factor = positive(dict["high_freq_factor"], where + ": high_freq_factor");
  const json original =
      present(dict, "original_max_position_embeddings") ? dict["original_max_position_embeddings"] : original_fallback;
  if (!original.is_number_integer() || original.get<int64_t>() < 1 || original.get<int64_t>() > INT32_MAX)
    throw UserError(where + ": original_max_position_embeddings must be a positive integer, got " + original.dump());
  r.scaling.original_max_positions = original.get<int>();
  if (r.scaling.high_freq_factor <= r.scaling.low_freq_factor)
    throw UserError(where + ": high_freq_factor must exceed low_freq_factor");
  return r;
}

bool same(const Rope& a, const Rope& b) {
  if (a.theta != b.theta || a.scaling.llama3 != b.scaling.llama3) return false;
  if (!a.scaling.llama3) return true;
  return a.scaling.factor == b.scaling.factor && a.scaling.low_freq_factor == b.scaling.low_freq_factor &&
         a.scaling.high_freq_factor == b.scaling.high_freq_factor &&
         a.scaling.original_max_positions == b.scaling.original_max_positions;
}

std::string describe(const Rope& r) {
  char theta[64];
  std::snprintf(theta, sizeof theta, "%g", r.theta);
  std::string s = std::string("rope_theta ") + theta;
  if (!r.scaling.llama3) return s + ", no scaling";
  char buf[160];
  std::snprintf(buf, sizeof buf, ", llama3 scaling (factor %g, low_freq_factor %g, high_freq_factor %g, "
                "original_max_position_embeddings %d)", r.scaling.factor, r.scaling.low_freq_factor,
                r.scaling.high_freq_factor, r.scaling.original_max_positions);
  return s + buf;
}

}  // namespace

std::vector<ConfigJsonKey> config_json_keys(const std::string& type) {
  std::vector<ConfigJsonKey> keys;
  append(keys, kCommon);
  if (type == "gpt2") {
    append(keys, kGpt2);
    return keys;
  }
  append(keys, kLlamaFamily);
  if (type == "llama") append(keys, kLlama);
  if (type == "mistral") append(keys, kMistral);
  if (type == "qwen2" || type == "qwen3") append(keys, kQwen);
  if (type == "qwen3") append(keys, kQwen3);
  return keys;
}

void refuse_unsupported_keys(const json& j, const std::string& file, const std::string& type) {
  std::vector<std::string> errors;
  for (const auto& key : config_json_keys(type)) {
    if (key.use != KeyUse::kDefaultOnly || !j.contains(key.name)) continue;
    const json& v = j[key.name];
    if (v.is_null() || accepted(v, key.accepted)) continue;
    std::string value = v.dump();
    if (value.size() > 80) value = value.substr(0, 77) + "...";
    errors.push_back(file + ": " + key.name + " " + value + " is not supported (" + key.meaning + ")");
  }
  if ((type == "qwen2" || type == "qwen3") && present(j, "layer_types")) {
    const json& types = j["layer_types"];
    if (!types.is_array()) {
      errors.push_back(file + ": layer_types must be a list, got " + types.dump());
    } else {
      for (size_t i = 0; i < types.size(); ++i)
        if (types[i] != "full_attention") {
          errors.push_back(file + ": layer_types[" + std::to_string(i) + "] " + types[i].dump() +
                           " is not supported (only full_attention: sft-dp attends over the whole sequence)");
          break;
        }
    }
  }
  if (!errors.empty()) throw UserError(errors);
}

Rope read_rope(const json& j, const std::string& file, int maxT) {
  const std::string where = file + ": ";
  const double top_theta = present(j, "rope_theta") ? positive(j["rope_theta"], where + "rope_theta") : 10000.0;
  const json top_original =
      present(j, "original_max_position_embeddings") ? j["original_max_position_embeddings"] : json(maxT);
  if (present(j, "partial_rotary_factor") && !accepted(j["partial_rotary_factor"], "[1]"))
    throw UserError(where + "partial_rotary_factor " + j["partial_rotary_factor"].dump() +
                    " is not supported (RoPE on part of each head; sft-dp rotates all of it)");
  const json scaling = present(j, "rope_scaling") ? j["rope_scaling"] : json();
  const json params = present(j, "rope_parameters") ? j["rope_parameters"] : json();
  // transformers < 5: the top-level keys (rope_parameters is an attribute it never reads).
  const Rope old_reading = rope_from(scaling, where + "rope_scaling", top_theta, top_original);
  if (params.is_null()) return old_reading;
  if (!params.is_object()) throw UserError(where + "rope_parameters must be null or an object, got " + params.dump());
  for (const auto& [field, value] : params.items())
    if (value.is_object())
      throw UserError(where + "rope_parameters." + field + " is not supported (RoPE per layer type; sft-dp's "
                      "layers all use one)");
  // transformers >= 5 reads rope_parameters, or a non-empty rope_scaling before it (its backward-compatible
  // name). With both spellings in the file, rope_parameters must say what the top-level keys say: else the
  // two transformers read different models, or (rope_scaling first) the file holds a RoPE nobody reads.
  const Rope params_reading = rope_from(params, where + "rope_parameters", top_theta, top_original);
  const bool has_old_spelling = present(j, "rope_theta") || present(j, "rope_scaling");
  if (has_old_spelling && !same(old_reading, params_reading))
    throw UserError(where + "rope_theta/rope_scaling (" + describe(old_reading) +
                    ": what transformers < 5 reads) and rope_parameters (" + describe(params_reading) +
                    ": what transformers >= 5 reads) disagree; make them agree or remove one spelling");
  return params_reading;
}

std::vector<std::string> config_json_notes(const json& j, const std::string& type) {
  std::vector<std::string> notes;
  const std::vector<ConfigJsonKey> keys = config_json_keys(type);
  std::string unknown;
  for (const auto& [name, value] : j.items()) {
    const ConfigJsonKey* key = find(keys, name);
    if (!key) {
      unknown += (unknown.empty() ? "" : ", ") + name;
      continue;
    }
    if (key->use == KeyUse::kNoted && !value.is_null() && !accepted(value, key->accepted))
      notes.push_back("config.json: " + name + " " + value.dump() + " is not applied (" + key->meaning + ")");
  }
  for (const char* dict : {"rope_parameters", "rope_scaling"}) {
    if (!present(j, dict) || !j[dict].is_object()) continue;
    for (const auto& [field, value] : j[dict].items())
      if (!rope_field_known(field)) unknown += (unknown.empty() ? "" : ", ") + std::string(dict) + "." + field;
  }
  if (!unknown.empty())
    notes.push_back("config.json: keys sft-dp does not read: " + unknown +
                    " (not part of the tables of SPEC §5; check they do not change the model)");
  return notes;
}

}  // namespace sftdp::hf
