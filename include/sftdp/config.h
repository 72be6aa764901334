// sftdp/config.h — the resolved run configuration (SPEC §3): a flat YAML file plus
// MaxText-style key=value overrides. Every key is validated: unknown keys, wrong types and
// impossible values throw UserError("<key>: <reason>"). World-size-dependent checks (batch
// divisibility) happen in resolve_batch(), once the communicator knows the world size.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sftdp::config {

struct Config {
  // Run
  std::string run_name = "sft";
  std::string base_output_directory = "out";
  int64_t steps = -1;        // optimizer steps; -1 = unset (then num_epochs decides)
  int64_t num_epochs = -1;   // -1 = unset; when both are unset, 1 epoch
  std::string hardware = "auto";  // cpu | gpu | auto
  bool cuda_graphs = true;         // GPU: replay each repeated micro-step and update as a CUDA graph
  int64_t seed = 0;
  double collective_timeout_s = 600;  // a collective no rank finishes in this long ends the job; 0 = off
  // Batch
  int64_t global_batch_size = -1;      // exactly one of these two is set (> 0)
  int64_t per_device_batch_size = -1;  // rows per rank per micro-step
  int64_t gradient_accumulation_steps = 1;
  // Context parallelism (issue 37, SPEC §1): ranks per group that share every row's positions; the
  // world is world / context_parallelism data-parallel groups. 1 = none.
  int64_t context_parallelism = 1;
  int64_t max_target_length = 1024;
  // Data
  std::vector<std::string> train_files;  // one path or a YAML list; rows are concatenated
  std::vector<std::string> eval_files;   // optional
  bool enable_data_shuffling = true;
  int64_t data_shuffle_seed = 0;
  int64_t eval_interval = 0;  // 0 = evaluate only at the end (when eval_files is set)
  int64_t eval_steps = -1;    // -1 = the whole eval set; else at most this many eval batches
  // Model
  std::string model_name = "gpt2-tiny";  // preset; explicit dimensions below override it
  int64_t num_decoder_layers = -1, num_heads = -1, emb_dim = -1, mlp_dim = -1, vocab_size = -1;
  int64_t max_position_embeddings = -1;  // rows of wpe; preset value or max_target_length
  // Decoder family (SPEC §5); "" = the preset's (gpt2 without a preset): gpt2|llama|qwen2|qwen3
  std::string decoder_block;
  int64_t num_kv_heads = -1;  // grouped-query attention; -1 = preset's, else num_heads
  int64_t head_dim = -1;      // -1 = preset's, else emb_dim / num_heads
  double rms_norm_eps = -1;   // RMSNorm epsilon; -1 (null) = preset's, else 1e-5
  double rope_theta = -1;     // RoPE base; -1 (null) = preset's, else 10000
  std::string tie_word_embeddings;  // "" = preset's (else true) | true | false
  std::string load_parameters_path;      // HDF5 with /params (SPEC §5); empty = seeded init
  std::string weight_dtype = "float32";  // float32 | bfloat16 (bfloat16: GPU only)
  std::string dtype = "float32";         // activations/GEMM inputs: float32 | bfloat16 (GPU only)
  bool remat = false;  // keep only each block's output; recompute the rest in backward
  // LoRA (issue 17): PEFT's names and meanings; lora_rank 0 = full fine-tuning
  int64_t lora_rank = 0;
  double lora_alpha = 8;                         // the adapters' scale is lora_alpha / lora_rank
  double lora_dropout = 0;                       // on the adapters' input; masks seeded by (seed, step, row, position)
  std::vector<std::string> lora_target_modules;  // Hugging Face module names, all-linear; [] = PEFT's default
  std::string load_adapter_path;                 // a PEFT adapter directory to start from; "" = PEFT's initialisation
  // Optimiser
  double learning_rate = 3e-4;
  double warmup_steps_fraction = 0.1;
  int64_t warmup_steps = -1;                  // -1 (null) = warmup_steps_fraction × steps; else this many
  double learning_rate_final_fraction = 0.1;
  std::string lr_schedule = "cosine";         // after warmup: cosine | linear decay to the final fraction | constant
  std::string lr_schedule_convention = "sft-dp";  // the ends: sft-dp | transformers (optim/schedule.cpp)
  double adam_b1 = 0.9, adam_b2 = 0.95, adam_eps = 1e-8;
  double adam_weight_decay = 0.1;
  double gradient_clipping_threshold = 1.0;  // 0 = off
  // 0 | 1 | 2 | 3 (SPEC §1 ZeRO): 1 shards the moments (each rank updates its shard), 2 also the gradient sums
  // (reduce-scattered), 3 also the parameters (all-gathered per unit)
  int64_t zero_stage = 0;
  bool allreduce_overlap = false;  // bucketed non-blocking allreduce during the last backward
  // Checkpoints
  int64_t checkpoint_period = 0;  // 0 = only at the end
  int64_t keep_checkpoints = 0;   // 0 = keep all
  // "" (null) = true where the host memory allows (train::choose_async_checkpointing) | true | false
  std::string async_checkpointing;
  bool resume = true;
  bool hf_export = false;           // also write <run_dir>/hf/ (Hugging Face GPT-2) at the end
  std::string hf_export_tokenizer;  // tokenizer file or directory copied into it; "" = none
  // Logging
  int64_t log_period = 1;  // console line every N steps (metrics.jsonl gets every step)
  int64_t param_check_period = 100;  // every N steps ranks compare a parameter checksum; 0 = off

  // How other trainers' names were read (SPEC §3 "Other trainers' names"), one log line each:
  // "warmup_ratio=0.1 read as warmup_steps_fraction=0.1". Not a key: to_yaml() leaves it out.
  std::vector<std::string> alias_notes;

  // The YAML text that reproduces this config (every key, resolved); stored in checkpoints.
  std::string to_yaml() const;
};

// Parse CONFIG.yml then apply key=value overrides in order. Validates every key.
Config from_file(const std::string& path, const std::vector<std::string>& overrides);
// Same, from YAML text (tests; checkpoints store the resolved YAML).
Config from_yaml_text(const std::string& yaml, const std::vector<std::string>& overrides,
                      const std::string& source_name = "<config>");
// sft_train's argv: CONFIG.yml [key=value ...]. Throws UserError on bad usage.
Config from_args(int argc, char** argv);

// The decoder block family (SPEC §5): GPT-2 (LayerNorm, learned positions, GELU MLP, tied head)
// or Llama (RMSNorm, RoPE, SwiGLU MLP, grouped-query attention), which also covers Mistral-class
// models, Qwen2 (q/k/v biases) and Qwen3 (per-head q/k RMSNorm).
enum class Block { kGpt2, kLlama };

// Llama-3 "llama3" RoPE frequency scaling (HF rope_scaling); off for every other model.
struct RopeScaling {
  bool llama3 = false;
  double factor = 8, low_freq_factor = 1, high_freq_factor = 4;
  int original_max_positions = 8192;
};

// Model dimensions after presets and explicit overrides. The members after maxT only matter for
// Block::kLlama (GPT-2: KVH = NH, HS = C/NH, no biases beyond its own, tied head).
struct ModelDims {
  int L = 0, NH = 0, C = 0, F = 0, V = 0, maxT = 0;
  Block block = Block::kGpt2;
  int KVH = 0;              // key/value heads; 0 = NH
  int HS = 0;               // head size; 0 = C/NH (Qwen3 sets its own)
  bool qkv_bias = false;    // Qwen2: q/k/v projections have biases
  bool qk_norm = false;     // Qwen3: RMSNorm of every q and k head before RoPE
  bool tied = true;         // LM head is wte (else its own lm_head.weight)
  double norm_eps = 1e-5;   // RMSNorm epsilon
  double rope_theta = 10000;
  RopeScaling rope_scaling{};

  int kv_heads() const { return KVH ? KVH : NH; }
  int head_size() const { return HS ? HS : C / NH; }
  int qkv_dim() const { return (NH + 2 * kv_heads()) * head_size(); }  // fused q|k|v rows
  int attn_dim() const { return NH * head_size(); }                    // attention output rows
};
// "gpt2" | "llama" | "qwen2" | "qwen3": the decoder_block value that describes d.
std::string block_name(const ModelDims& d);
ModelDims model_dims(const Config& cfg);
// With load_parameters_path a Hugging Face directory, the log line that says its config.json gives
// the model and what became of model_name (that shape, or not used: where its preset differs); ""
// otherwise. An unknown model_name is an error there too (SPEC §3).
std::string hf_model_note(const Config& cfg);
// Known preset names (gpt2-tiny, gpt2-124m, ...).
std::vector<std::string> preset_names();

// One key whose value in a resumed run differs from its checkpoint's (SPEC §5 "Resume").
struct KeyChange {
  std::string key, before, after;  // the values as to_yaml() writes them
};
// The keys of `now` whose value differs from the resolved config a checkpoint stores (its `config`
// attribute: `checkpoint_yaml`), in key-table order; a key the stored config does not name (it
// predates the key) is not compared. Throws UserError naming the key, both values and `checkpoint`
// when one that cannot change on resume did: the model (as resolved: layers, heads, widths,
// vocabulary, positions, block, norms, RoPE, head tying), lora_rank, lora_alpha,
// lora_target_modules, enable_data_shuffling and data_shuffle_seed.
std::vector<KeyChange> resume_changes(const Config& now, const std::string& checkpoint_yaml,
                                      const std::string& checkpoint);

// The parallel layout of a run for a given world size, built once from the config (resolve_batch) and asked by
// the trainer, the model's construction, the optimiser, the memory plan and --plan: the batch factorisation (SPEC
// §1), the context-parallel groups and the ZeRO stage.
struct BatchPlan {
  int64_t global_batch = 0;   // G rows per optimizer step
  int64_t micro_batch = 0;    // rows per data-parallel group per micro-step = G / (world / cp) / ga
  int64_t ga_steps = 1;
  int world_size = 1;
  int context_parallelism = 1;  // cp: ranks per group, each holding 1/cp of every row's positions
  int zero_stage = 0;           // 0 | 1 | 2 | 3
  int data_parallel() const { return world_size / context_parallelism; }
  int64_t local_positions(int64_t T) const { return T / context_parallelism; }  // of each row, on each rank
};
// Throws UserError when context_parallelism is not valid for this world (context_parallelism_problem) or G /
// (world / cp) / ga is not a whole number >= 1.
BatchPlan resolve_batch(const Config& cfg, int world_size);
// What is wrong with context_parallelism cp for rows of T positions over `world` ranks (world 0: not known yet),
// as the text after "context_parallelism: "; "" when nothing is. The one statement of its limits: cp >= 1, cp
// divides the world (data-parallel groups of cp ranks), T divisible by 2·cp (two chunks per rank).
std::string context_parallelism_problem(int64_t cp, int64_t T, int world);
// The ZeRO stage the model itself is built with (model::make_model): 2 and 3 give it a residency; at 0 and 1 it
// keeps its full buffers (stage 1 shards only the optimiser's moments).
inline int model_zero_stage(int zero_stage) { return zero_stage >= 2 ? zero_stage : 0; }

}  // namespace sftdp::config
