// sftdp/model.h — decoder-only transformers (SPEC §5) on any device through the Ops table: GPT-2
// blocks and Llama-family blocks (RMSNorm, RoPE, SwiGLU, grouped-query attention; Qwen2 q/k/v
// biases, Qwen3 q/k norm, tied or untied head), picked by ModelDims::block. Parameters live in
// one flat buffer, >= 2-D weights first (they take weight decay), then vectors. The gradient
// buffer has the same layout plus two trailing floats: [P] = loss sum, [P+1] = weight sum, so one
// allreduce carries gradient sums and both counts (SPEC §1). The trainer, optimiser, checkpoints
// and evaluation see only Model. Every family is one transformer block (src/model/decoder.h) read through its
// traits (src/model/block_traits.h: norm, MLP, positions, biases, q/k norm, tied head), which also give its
// layout; the block's two passes stop at the final hidden state. The LM head and the masked cross-entropy are Model's: a fused,
// chunked linear cross-entropy over only the positions with loss weight != 0 (gathered on the
// host at upload), so the (B·T, V) logits are never materialised; see src/model/model.cpp.
// With remat (activation recomputation), the families keep per block only its output (the
// residual stream): the block's other activations live in one set of buffers that every block
// overwrites, and backward re-runs each block's forward (all but its last projection) right
// before that block's backward. Same kernels, same inputs: results are bitwise those without.
// With ActivationStorage::kBf16GemmInputs (bf16 activations requested where the act16 path does not run: with
// LoRA; never with remat), the activations that only the
// Linear layers' GEMMs read (the two norms' outputs and the MLP's hidden layer after GELU/SwiGLU;
// not the attention output, which attention's backward reads too) are kept per block as bf16;
// their fp32 buffers are one set all blocks share, refilled from the bf16 copy before each block's
// backward. Those GEMMs read bf16-rounded inputs anyway (GemmInputs::kBf16), so results are
// bitwise those of keeping them in fp32. (Not with LoRA dropout, which scales x before rounding.)
// Those GEMMs read the bf16 copies in place (bf16_mirror), and the parameters through one bf16 copy
// made at the start of each pass, instead of rounding their inputs again: in backward the shared fp32
// set is then not refilled at all where every GEMM that reads it can take the copy (C and F multiples
// of 8), since nothing but GEMMs reads it.
// With LoRA (issue 17), the base parameters are frozen: the families skip every base weight
// gradient (the kernels take null weight gradients) and add each adapter's y += s·B(A x) after its
// Linear layer; the trainable parameters are the adapters alone, in their own flat buffer
// (trainable_layout()), and the gradient buffer holds their gradient sums and the two trailing sums.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sftdp/config.h"
#include "sftdp/data.h"

namespace sftdp {
struct Ops;
}
namespace sftdp::model {
class GraphCache;
struct ContextSplit;  // src/model/context_split.h
}
namespace sftdp::comm {
class Group;
}

namespace sftdp::model {

struct ParamInfo {
  std::string name;            // SPEC §5 name, e.g. "h.0.attn.qkv.weight"
  std::vector<int64_t> shape;  // e.g. {3C, C}
  size_t offset = 0;           // into the flat buffer, in floats
  size_t numel = 0;
  bool decay = false;          // >= 2-D: decoupled weight decay applies
};

struct ParamLayout {
  std::vector<ParamInfo> tensors;  // in SPEC order (wte, wpe, h.0..., ln_f)
  size_t total = 0;                // floats
  size_t n_decay = 0;              // [0, n_decay) are the decayed weights
  const ParamInfo& find(const std::string& name) const;  // dies if absent
};

ParamLayout gpt2_layout(const config::ModelDims& d);
// Llama family: wte, per layer ln_1, attn.qkv (+bias: Qwen2), attn.q_norm/k_norm (Qwen3),
// attn.proj, ln_2, mlp.fc (gate rows then up rows), mlp.proj; ln_f; lm_head when untied.
ParamLayout llama_layout(const config::ModelDims& d);
// The layout of d's family.
ParamLayout param_layout(const config::ModelDims& d);

// Seeded initialisation into a host buffer of layout.total floats, deterministic in seed.
// GPT-2: weights N(0, 0.02), the two residual projections N(0, 0.02/sqrt(2L)), biases 0,
// LayerNorm weights 1. Llama family: weights N(0, 0.02) (HF initializer_range), biases 0,
// RMSNorm weights 1.
void init_params(std::vector<float>& params, const ParamLayout& layout,
                 const config::ModelDims& d, uint64_t seed);

// RoPE inverse frequencies (HS/2 floats): theta^(−2i/HS), with Llama-3 "llama3" scaling when
// d.rope_scaling.llama3 (HF's _compute_llama3_parameters), computed in fp32 as HF does.
std::vector<float> rope_inv_freq(const config::ModelDims& d);

// LoRA (issue 17). A block's Linear layers under their Hugging Face module names, relative to the
// block ("self_attn.q_proj", "mlp.c_proj"), and where each lives in sft-dp's stacked tensors:
// output columns [col, col + OC) of the site's Linear layer, which reads IC features.
enum class LoraSite { kQkv, kAttnProj, kFc, kMlpProj };
struct LinearModule {
  std::string name;
  LoraSite site;
  int col = 0, OC = 0, IC = 0;
};
// GPT-2: attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj. Llama family: self_attn.{q,k,v,o}_proj,
// mlp.{gate,up,down}_proj. In block order.
std::vector<LinearModule> linear_modules(const config::ModelDims& d);

// The adapters a run trains: rank 0 = none (full fine-tuning).
struct LoraSpec {
  int rank = 0;
  double alpha = 8, dropout = 0;
  uint64_t seed = 0;                 // A's initialisation and the dropout masks
  std::vector<std::string> modules;  // linear_modules() names that carry one, in block order
  bool enabled() const { return rank > 0; }
  float scale() const { return static_cast<float>(alpha / rank); }
};
// cfg's lora_* keys resolved against d's modules, as PEFT matches target_modules: a target names a
// module when it equals the module's name or is a dot-separated suffix of it ("c_proj" is both
// attn.c_proj and mlp.c_proj; "mlp.c_proj" only the latter); "all-linear" is every one (PEFT
// leaves out only the LM head, which is not a block module here); no targets: PEFT's default for
// the family (GPT-2 c_attn; Llama family q_proj, v_proj). Throws UserError naming the key.
LoraSpec lora_spec(const config::Config& cfg, const config::ModelDims& d);
// The matching alone: the module names targets select, in block order ("what" names the source in
// the UserError: a config key, an adapter_config.json).
std::vector<std::string> resolve_lora_targets(const config::ModelDims& d, std::vector<std::string> targets,
                                              const std::string& what);
// W += scale·B·A for every adapter, into the base parameters (SPEC layout: each module's rows of
// its stacked tensor), accumulated in fp64: what PEFT's merge_and_unload computes.
void merge_lora(std::vector<float>& base, const ParamLayout& base_layout, const config::ModelDims& d,
                const LoraSpec& spec, const ParamLayout& adapters_layout, const std::vector<float>& adapters);
// The adapters' layout: per block, per module in block order, "h.<l>.<module>.lora_A" [r, IC] then
// ".lora_B" [OC, r]; all decayed (>= 2-D, as AdamW's weight decay treats weights).
ParamLayout lora_layout(const config::ModelDims& d, const LoraSpec& spec);
// PEFT's initialisation: A Kaiming-uniform (a = sqrt(5): U(-1/sqrt(IC), 1/sqrt(IC))) from seed, B 0,
// so that step 0 is the base model.
void init_lora(std::vector<float>& params, const ParamLayout& layout, uint64_t seed);

// The frozen base's identity in a LoRA checkpoint: 16 hex digits of a 64-bit FNV-1a hash (over 8-byte words)
// of every tensor's name and float32 bits in layout order (padding excluded).
std::string base_hash(const ParamLayout& layout, const std::vector<float>& params);

struct LossSums {
  double loss_sum = 0, weight_sum = 0;
};

// ZeRO-2/3 (issue 25): a unit is a contiguous range of a flat buffer that is gathered, used and
// reduced whole. A layout's units, in offset order, tile [0, total): the embeddings [0, block 0's
// first weight) (wte, and wpe for GPT-2; absent when empty), each block's >= 2-D weights, an untied
// lm_head, then every vector (norm weights, biases, ln_f; absent when empty). Each unit is wholly
// decayed or wholly not ([0, n_decay) ends where the vectors begin). Without layers: [0, n_decay)
// and [n_decay, total). LoRA's adapter layout has block units only.
struct Unit {
  enum Kind { kEmbed, kBlock, kHead, kVectors };
  Kind kind = kEmbed;
  int layer = -1;  // kBlock
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};
std::vector<Unit> units_of(const ParamLayout& layout, int L);
// The index of the unit holding flat offset `offset` (dies if none does).
size_t unit_at(const std::vector<Unit>& units, size_t offset);

// The two sets of units a pass uses: the base model's parameters, and (LoRA only) the adapters.
// Without LoRA the trainable set is the base set.
enum class UnitSet { kBase, kTrainable };

// How a model stores the activations between its kernels: one choice, made in Model's constructor from
// the request (make_model's bf16_activations: dtype bfloat16 on the GPU), the Ops table, remat and LoRA.
enum class ActivationStorage {
  kFloat32,         // every activation fp32
  kBf16GemmInputs,  // the activations only GEMMs read kept per block as bf16 (the file header): a request
                    // with LoRA (not with its dropout) or off the act16 table; never with remat
  kBf16,            // the act16 path (kernels/act16.h; issue 34): on the bf16-GEMM table without LoRA, every
                    // activation only GEMMs and attention read is bf16 and the fused act16 kernels run (the
                    // residual add and GPT-2's GELU in the GEMMs' epilogues, each norm's backward one kernel,
                    // the LM head's logits bf16 at a padded stride); the residual stream, its gradient and every
                    // gradient sum stay fp32. Remat works as without.
};
// The choice a model made with these arguments makes (Model's constructor asks it; the memory plan too).
ActivationStorage activation_storage_for(const Ops& ops, bool bf16_activations, bool remat, const LoraSpec& lora);

// One event of a pass, in the order every rank makes them (Model::unit_schedule): a unit's
// parameters are needed from now on (kUse), or a trainable unit's gradient sums are final for this
// pass (kGradsFinal).
struct UnitEvent {
  enum Kind { kUse, kGradsFinal };
  Kind kind;
  UnitSet set;
  size_t unit;
  bool operator==(const UnitEvent& o) const { return kind == o.kind && set == o.set && unit == o.unit; }
};

// Where the model's tensors live during its passes (issue 25). Without one (zero_stage 0 and 1)
// the model uses its own full buffers. ZeRO-2/3 (src/optim/zero_units.h) installs one: gradient
// sums in per-unit slots, reduce-scattered as each unit's sums are final; at stage 3 parameters
// all-gathered per unit before use (the next one prefetched). The model makes the calls below in
// unit_schedule()'s order, the same on every rank (a micro-batch with nothing to compute replays the
// schedule without kernels), and between them reaches tensors only through base / trainable / grad.
class Residency {
 public:
  virtual ~Residency() = default;
  virtual void begin_pass(bool training) = 0;
  virtual void use(UnitSet set, size_t unit) = 0;
  virtual void grads_final(size_t unit) = 0;  // a unit of the trainable set
  // Every collective of the pass complete and its gradient sums accumulated.
  virtual void end_pass() = 0;
  // The tensor at `offset` of the base layout / trainable layout (its unit in use), and the gradient
  // sums of the trainable tensor at `offset` (its unit's slot, zeroed at the first call of the pass).
  virtual float* base(size_t offset) = 0;
  virtual float* trainable(size_t offset) = 0;
  virtual float* grad(size_t offset) = 0;
  // Between passes. zero_grads: the gradient sums of a new step. load_range: floats [begin, begin + n)
  // of a set's layout, which every rank passes, and each keeps what it holds of them (a whole vector
  // may so arrive in chunks: no rank needs all of it on the host at once). to_host: the full vector (a
  // collective where the set is sharded: every rank calls it, rank 0 gets it, the others nothing).
  virtual void zero_grads() = 0;
  virtual void load_range(UnitSet set, size_t begin, const float* data, size_t n) = 0;
  virtual std::vector<float> to_host(UnitSet set) = 0;
};

class Model {
 public:
  virtual ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ParamLayout& layout() const { return layout_; }  // the base model's
  // What the optimiser updates and checkpoints hold: the base model, or with LoRA the adapters.
  bool lora() const { return lora_.enabled(); }
  const LoraSpec& lora_spec() const { return lora_; }
  const ParamLayout& trainable_layout() const { return lora() ? lora_layout_ : layout_; }
  float* trainable_params() { return lora() ? lora_params_ : params_; }  // device, trainable_layout().total
  void set_trainable_from_host(const std::vector<float>& host);
  std::vector<float> trainable_to_host() const;
  // Dropout masks (lora_dropout > 0) depend on the optimizer step: set before each step's passes.
  void set_step(int64_t step) { step_ = step; }
  const config::ModelDims& dims() const { return d_; }
  const Ops& ops() const { return ops_; }
  float* params() { return params_; }            // device, layout().total (null at zero_stage 3)
  float* grads() { return grads_; }              // device, trainable_layout().total + 2 (zero_stage 0, 1)
  size_t grad_buffer_floats() const { return trainable_layout().total + 2; }
  // The loss sum and weight sum of this rank's passes since zero_grads(): the gradient buffer's two
  // trailing floats, or at zero_stage 2 and 3 (no gradient buffer) two floats of their own.
  float* sums() { return sums_; }

  // ZeRO (issue 25). zero_stage 2 and 3 (make_model's `zero_stage`): no full gradient buffer; at 3
  // no full parameter buffer either (nor its bf16 copy, nor the adapters'). Such a model needs a
  // Residency (set_residency, before any pass); it does not own it.
  int zero_stage() const { return zero_stage_; }
  // weight_dtype bfloat16 (issue 25; make_model's bf16_weights: the run's zero_stage 1, 2 or 3, the
  // bf16-GEMM table, no LoRA): the parameters are stored as bf16 and the fp32 master weights exist
  // only in the optimiser's shard (optim::ZeroUnits, which is then the residency at stage 1 too).
  // Stages 1 and 2: the model keeps the full bf16 buffer (params_bf16(); params() is null; at 1 also
  // its full gradient buffer); stage 3: the residency gathers bf16 units. Either way each
  // unit the model uses is widened to fp32 in a residency slot (exact) for the kernels that read fp32,
  // and the GEMMs read the bf16 values themselves: every kernel computes with bf16(master).
  bool bf16_weights() const { return bf16_weights_; }
  uint16_t* params_bf16() { return bf16_weights_ ? params16_ : nullptr; }  // stages 1 and 2 (else null)
  // Whether the host copies of the parameters (params_to_host, trainable_to_host) are collectives
  // that only rank 0 receives: zero_stage 3, or bf16 weights (the fp32 masters are sharded).
  bool params_sharded() const { return zero_stage_ >= 3 || bf16_weights_; }
  void set_residency(Residency* r) { residency_ = r; }
  Residency* residency() const { return residency_; }
  const std::vector<Unit>& base_units() const { return base_units_; }
  const std::vector<Unit>& trainable_units() const { return lora() ? lora_units_ : base_units_; }
  // The events of one pass in order: training = forward_backward's (the base units in use forward,
  // the head, then backward; each trainable unit's gradients final), else forward()'s.
  std::vector<UnitEvent> unit_schedule(bool training) const;

  // At zero_stage 3 the host copies go through the residency: set_* takes each rank's share of the
  // full vector, and *_to_host is a collective (every rank calls it; rank 0 gets the full vector).
  // The *_range forms take floats [begin, begin + n) of the layout (every rank the same chunk).
  void set_params_range(size_t begin, const float* data, size_t n);
  void set_trainable_range(size_t begin, const float* data, size_t n);
  void set_params_from_host(const std::vector<float>& host);
  std::vector<float> params_to_host() const;
  std::vector<float> grads_to_host() const;      // includes the two trailing sums (zero_stage 0, 1)

  void zero_grads();  // gradient sums and the two trailing sums
  // Forward and backward on one micro-batch (B <= max_B rows): gradient sums += and the
  // trailing loss/weight sums +=. Nothing is divided.
  // ready (allreduce_overlap, last micro-step only): called with each flat range [begin, end) of
  // the gradient buffer once its sums are final for this call, while backward goes on. The
  // ranges are grad_buckets(), in that order, every one exactly once, whatever the batch holds (a
  // micro-batch with no weighted position still reports them all), so every rank issues the same
  // collectives in the same order.
  using GradReady = std::function<void(size_t begin, size_t end)>;
  void forward_backward(const data::Batch& batch, const GradReady& ready = {});
  // The buckets, in the order ready reports them: an untied lm_head.weight (final once the head
  // has run, before the blocks' backward); per transformer block, last to first, its contiguous
  // >= 2-D weights (layout order puts them together); then [0, h.0's first weight) (wte, wpe: the
  // tied wte's gradient is final only after the embedding's backward) and the rest up to
  // total + 2 (every vector, the loss and weight sums). They tile the whole gradient buffer.
  // Without layers: one bucket, the whole buffer.
  const std::vector<std::pair<size_t, size_t>>& grad_buckets() const { return buckets_; }
  // Forward only: the micro-batch's loss sum and weight sum.
  LossSums forward(const data::Batch& batch);

  // The fused head's chunk: how many gathered positions share one (rows, V) logits buffer. The
  // default, 0, picks default_head_chunk_rows(). every_row = true sends every position, weight 0
  // included, through the head in one chunk of max_B·T rows: the unfused computation as it was
  // before the fused head (tests compare against it; the buffers then hold (max_B·T, V) logits).
  // Reallocates the head's buffers: call it between steps, not per step.
  void set_head_chunking(int rows, bool every_row = false);
  int head_chunk_rows() const { return head_rows_; }

  // Context parallelism (issue 37, SPEC §1): this rank holds split's positions of every row and attends
  // with the ranks of `group` (split.n of them; the model does not own it). Call once, before any pass, on
  // a model made with T = split.local_T() and the fp32 activation path; the passes then take the group's
  // whole rows (T = split.T), keep this rank's share (local_batch) and run every layer's attention over
  // the group: the k/v heads of its rows all-gathered, the queries of its rows against every position,
  // the k/v gradients reduce-scattered back (src/model/context_attention.cpp). Every member makes the
  // same collectives, so a pass runs even where this rank's share has no weighted position.
  void set_context_parallel(const ContextSplit& split, comm::Group* group);
  int context_parallelism() const;  // 1 without
  // The key/value all-gathers made so far (0 without): per micro-step 2L − 1, the backward of the last
  // layer (and with remat of every layer, whose recomputation gathers) reusing its forward's.
  uint64_t context_gathers() const;

  bool remat() const { return remat_; }
  ActivationStorage activation_storage() const { return act_storage_; }
  // CUDA graphs (config key cuda_graphs; src/model/graph_cache.h): forward_backward's passes, and forward's, are
  // replayed as a graph once their shape (B, the head's rows, segments and positions given or not) repeats, where
  // the table has graphs and the passes talk to nobody else (no residency, no GradReady, no LoRA dropout). On by
  // default; results are bitwise the same. graphs_captured(): how many are kept.
  void set_cuda_graphs(bool on);
  size_t graphs_captured() const;
  // On the bf16-GEMM table, each pass rounds the parameters to a bf16 copy once and the GEMMs read it
  // (and the bf16 activation copies) in place instead of rounding their inputs again (kernels/bf16.h's
  // bf16_mirror): bitwise the same results. false: every GEMM rounds its own inputs (for tests).
  void set_bf16_mirrors(bool on) { mirrors_ = on; }
  bool bf16_mirrors() const { return bf16_table_ && mirrors_; }
  // Bytes of the family's activation buffers (per-block activations, the embedding and final
  // norm outputs, the activation-gradient scratch), on the device; not the parameters, gradients,
  // micro-batch or the head's chunk buffers. remat_saved_bytes(): what remat saves, i.e. the
  // same model's activation_bytes() without remat minus with it, whether this one uses it or not
  // (without remat: as this model keeps them, bf16 or fp32).
  size_t activation_bytes() const { return act_bytes_; }
  size_t remat_saved_bytes() const { return remat_saved_bytes_; }
  // Chunk logits of at most 128 MiB (fp32), at least 256 rows, at most max_B·T rows.
  static int default_head_chunk_rows(int V, int max_rows);
  // The act16 path's chunk: at most 1 GiB of bf16 logits at the padded stride, at least 256 rows, at most max_B·T
  // rows: one chunk (one head-weight-gradient GEMM per micro-step) for GPT-2's V at B·T <= 10672.
  static int default_head_chunk_rows16(int V, int max_rows);
  // The act16 path's logits row stride: V rounded up to a multiple of 64 (whole 128-byte rows of bf16).
  static int padded_vocab(int V) { return (V + 63) / 64 * 64; }
  // The act16 path's LM head runs its weighted positions in multiples of kHeadRows rows (weight-0 padding), so that
  // micro-steps with different counts share a shape (and a CUDA graph).
  static constexpr int kHeadRows = 128;

 protected:
  // The micro-batch on the device, shared by both families' passes. The head's positions (weight
  // != 0, ascending; every position with every_row) come gathered: index, target and weight.
  struct Io {
    int32_t *inputs, *segments, *positions;            // (N) each
    int32_t *active, *active_targets;                  // (N) each, first n_active used
    float *active_weights;                             // (N), first n_active used
    float *eval_sums;                                  // (2)
    int32_t* buckets;                                  // encoder_buckets_ints(N): the embedding backward's
    int n_active = 0;
    int n_head = 0;  // rows the LM head runs: n_active, on the act16 path padded to a multiple of kHeadRows
    bool has_segments = false, has_positions = false;
    const int32_t* seg() const { return has_segments ? segments : nullptr; }
    const int32_t* pos() const { return has_positions ? positions : nullptr; }
  };
  Model(const config::ModelDims& d, const Ops& ops, int max_B, int T, ParamLayout layout, bool remat,
        bool bf16_activations, const LoraSpec& lora, int zero_stage, bool bf16_weights);
  // Where a tensor is now (the residency's, else the full buffers): the base parameter at `offset`,
  // the trainable one, and the gradient sums of the base tensor at `offset` — null when the base is
  // frozen (LoRA): the families pass null weight gradients to the kernels then.
  float* param(size_t offset) { return residency_ ? residency_->base(offset) : params_ + offset; }
  float* trainable(size_t offset) { return residency_ ? residency_->trainable(offset) : trainable_params() + offset; }
  float* trainable_grad(size_t offset) { return residency_ ? residency_->grad(offset) : grads_ + offset; }
  float* base_grad(size_t offset) { return lora() ? nullptr : trainable_grad(offset); }
  // The families announce the units they use (no-ops without a residency): the embeddings before
  // the encoder, block l before its forward and again before its backward (both sets under LoRA).
  void use_embeddings();
  void use_block(int l);
  // The adapters on block l's Linear layer at `site` (none: nothing happens). Forward: out (row
  // stride ldo, the site's width) += each adapter's s·B(A x'), x' = x or, training with
  // lora_dropout, its dropout. Backward: their gradient sums += and dx += their share, from dout
  // (the Linear layer's output gradient, stride ldo) and the same x. Allocates nothing.
  void lora_forward(int l, LoraSite site, float* out, int ldo, const float* x, int B);
  void lora_backward(int l, LoraSite site, float* dx, const float* dout, int ldo, const float* x, int B);
  // Device memory owned by the model, zero-filled, freed with it.
  float* alloc_floats(size_t n);
  int32_t* alloc_ints(size_t n);
  // alloc_floats for the family's activation buffers: counted in activation_bytes().
  float* alloc_acts(size_t n);
  // The GEMMs' bf16 copy of [src, src + n) is `copy` (made by bf16_pack) from here until the slot is
  // set again or the pass ends: bf16_mirror when bf16_mirrors(), else nothing.
  void mirror(int slot, const float* src, const uint16_t* copy, size_t n) const;
  // n bf16 values (their 16 bits) of activation storage, counted in activation_bytes().
  uint16_t* alloc_acts_bf16(size_t n);
  uint16_t* alloc_bf16(size_t n);  // n bf16 values the model owns, not counted as activations
  // The family's forward pass for B rows from params_ and io_, up to hidden_ (the final norm's
  // output, the LM head's input).
  virtual void run_forward(int B) = 0;
  // The family's backward pass from dhidden_ = d(loss sum)/d hidden_: gradient sums +=, the head
  // weight's own gradient excluded (Model adds it).
  // Families call it in run_backward right after block l's weight gradients are final.
  void layer_backward_done(int l) const {
    if (residency_) residency_->grads_final(block_unit_[l]);
    if (!ready_ || !*ready_) return;
    const auto& b = buckets_[head_buckets_ + d_.L - 1 - l];
    (*ready_)(b.first, b.second);
  }
  virtual void run_backward(int B) = 0;
  // The families' attention over B rows of this rank's T_ positions: ops_.attention_fwd / attention_bwd on
  // the rows alone, or with context parallelism the group's (see set_context_parallel). Same contract.
  void attention_forward(float* out, float* lse, const float* qkv, int B, int NH, int KVH, int HS);
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                          int NH, int KVH, int HS);
  // The same on the act16 path (ops_.act16's attention; with context parallelism the keys and values are gathered
  // as bf16 and their gradients reduce-scattered in fp32, rounded once into dqkv).
  void attention_forward16(uint16_t* out, float* lse, const uint16_t* qkv, int B, int NH, int KVH, int HS);
  void attention_backward16(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv, const uint16_t* out,
                            const float* lse, int B, int NH, int KVH, int HS);

  config::ModelDims d_;
  const Ops& ops_;
  int max_B_, T_;
  ParamLayout layout_;
  bool remat_ = false;
  ActivationStorage act_storage_ = ActivationStorage::kFloat32;
  size_t act_bytes_ = 0;          // alloc_acts adds
  size_t remat_saved_bytes_ = 0;  // the family sets it
  float* params_ = nullptr;
  float* grads_ = nullptr;
  float* sums_ = nullptr;
  Io io_{};
  // Set by the family's constructor: hidden_ (max_B·T, C), dhidden_ (max_B·T, C) (may be scratch
  // of the family that run_forward overwrites: Model writes it between the two passes), and the
  // LM head weight [V, C] (wte when tied) as an offset into the parameters and the gradients.
  float* hidden_ = nullptr;
  float* dhidden_ = nullptr;
  size_t head_ = 0;
  // ActivationStorage::kBf16: hidden16_ (max_B·T, C) bf16 (the final norm's output) and dhidden16_ (max_B·T, C)
  // bf16, what the head hands backward; then hidden_ and dhidden_ are null.
  uint16_t* hidden16_ = nullptr;
  uint16_t* dhidden16_ = nullptr;

 private:
  struct Adapter {
    const LinearModule* module;
    size_t a, b;         // offsets of lora_A, lora_B in the adapters' buffer
    float* u;            // (max_B·T, r): A x', kept for backward
    uint64_t index = 0;  // the adapter's number, folded into its dropout key
  };
  void make_adapters();
  const float* lora_input(const Adapter& ad, const float* x, int B);  // x or its dropout
  uint64_t dropout_key(const Adapter& ad) const;
  const int32_t* dropout_positions() const;  // context parallelism's global positions (device), or null
  LoraSpec lora_;
  ParamLayout lora_layout_;
  int zero_stage_ = 0;
  bool bf16_weights_ = false;
  Residency* residency_ = nullptr;
  std::vector<Unit> base_units_, lora_units_;
  std::vector<size_t> block_unit_;       // the trainable unit of block l
  std::vector<size_t> block_base_unit_;  // the base unit of block l
  size_t embed_unit_ = 0;           // the base unit of wte (the first tensor of both families)
  size_t head_unit() const { return unit_at(base_units_, head_); }  // the base unit of the LM head weight
  // A pass with nothing to compute at zero_stage 2/3: unit_schedule(training)'s calls, no kernels.
  void replay_schedule(bool training);
  std::vector<LinearModule> modules_;
  std::vector<Adapter> adapters_;
  std::vector<std::array<std::vector<int>, 4>> adapters_at_;  // [layer][site]: indices into adapters_
  float* lora_params_ = nullptr;
  uint16_t* params16_ = nullptr;  // bf16 copy of params_, the bf16-GEMM table only (bf16_mirrors())
  bool bf16_table_ = false;       // ops_ is the bf16-GEMM table
  bool mirrors_ = true;
  void begin_pass();  // params16_ = bf16(params_), its mirror registered
  void end_pass();    // every mirror cleared
  float *lora_du_ = nullptr, *lora_x_ = nullptr, *lora_dx_ = nullptr;  // scratch; the last two with dropout
  int64_t* row_ids_ = nullptr;  // (max_B): the micro-batch's rows in the training data (dropout)
  uint64_t* dropout_keys_ = nullptr;         // (adapters): each adapter's mask key for the current step (dropout)
  std::vector<uint64_t> dropout_keys_host_;  // their host values, uploaded with each micro-batch
  int64_t step_ = 0;
  bool training_ = false;  // inside forward_backward: dropout applies
  // The micro-batch to the device, queued (Ops::to_device_async: nothing waits); training: with the embedding
  // backward's buckets, built here on the host (kernels/encoder.h).
  void upload(const data::Batch& b, bool training);
  std::vector<int32_t> host_buckets_;
  // The fused head on the gathered positions: loss and weight sums += into sums; with backward,
  // the head weight's gradient += and dhidden_ = (0 on positions outside the head).
  void run_head(float* sums, bool backward, int B);
  void free_owned(void* p);
  void make_buckets();
  std::vector<void*> owned_;
  std::vector<std::pair<size_t, size_t>> buckets_;  // grad_buckets()
  size_t head_buckets_ = 0;                         // 1: buckets_[0] is an untied lm_head
  const GradReady* ready_ = nullptr;                // during forward_backward only
  // Host staging of the gathered positions, sized max_B·T once (no per-step allocation).
  std::vector<int32_t> host_active_, host_targets_;
  std::vector<float> host_weights_;
  // The head's chunk buffers: gathered hidden rows, their logits (dlogits in place), d rows; on the act16 path their
  // bf16 twins (logits at row stride padded_vocab(V)).
  float *head_x_ = nullptr, *head_logits_ = nullptr, *head_dx_ = nullptr;
  uint16_t *head_x16_ = nullptr, *head_logits16_ = nullptr, *head_dx16_ = nullptr;
  int head_rows_ = 0;
  bool every_row_ = false;
  bool all_active_ = false;  // the micro-batch weights every position: the head reads hidden in place
  void run_head16(float* sums, bool backward, int B);  // run_head on the act16 path
  struct ContextParallel;  // src/model/context_attention.cpp
  std::unique_ptr<ContextParallel> cp_;
  // Every position's k/v heads, in position order, from the group's rows of qkv (this pass's layer).
  void gather_keys_values(const float* qkv, int B, int NH, int KVH, int HS);
  void gather_keys_values16(const uint16_t* qkv, int B, int NH, int KVH, int HS);  // the act16 path's, bf16
  // The share of `full` this rank computes: full itself, or with context parallelism its positions
  // (the group's segments kept for the keys).
  const data::Batch& share_of(const data::Batch& full, data::Batch& local);
  std::unique_ptr<GraphCache> graphs_;
  bool graphable(bool with_ready) const;  // the passes may be captured (see set_cuda_graphs)
};

// What make_model(d, ops, max_B, T, remat, bf16_activations) would allocate on ops's device, found
// without allocating anything (the same constructors on a table whose alloc only counts): for the
// memory plan checked before a run starts. Bytes; `other` is the micro-batch, the head's chunk
// buffers and constant tables.
struct Footprint {
  size_t params = 0, grads = 0, activations = 0, other = 0;
  size_t total() const { return params + grads + activations + other; }
};
// The counting table footprint() builds on: ops's name and kernels, an alloc that only counts (and
// hands out distinct addresses that nothing touches), copies and fills that do nothing. Making it
// resets the count; counted_bytes() is what was allocated on it since (per thread). For sizing
// other objects the same way (the ZeRO shards and slots: train/memory_plan.cpp).
Ops counting_ops(const Ops& ops);
size_t counted_bytes();
Footprint footprint(const config::ModelDims& d, const Ops& ops, int max_B, int T, bool remat = false,
                    bool bf16_activations = false, const LoraSpec& lora = {}, int zero_stage = 0,
                    bool bf16_weights = false);

// The model of d's family, with activations for max_B rows of T tokens; remat: recompute each
// block's activations in backward instead of keeping them for every block (config key remat);
// bf16_activations: keep the GEMM-only activations as bf16 (ops must be the bf16-GEMM table;
// ignored with remat, which keeps none of them).
// lora: adapters on a frozen base (LoraSpec; rank 0: none).
// zero_stage 2 or 3: see Model::zero_stage(). bf16_weights: see Model::bf16_weights().
// Bytes set_context_parallel adds for B rows of T positions over a group of cp ranks (0 when cp is 1): the
// gathered keys and values (bf16 on the act16 path: bf16_keys) and their gradients in fp32, and the index tables.
size_t context_parallel_bytes(const config::ModelDims& d, int B, int T, int cp, bool bf16_keys = false);

std::unique_ptr<Model> make_model(const config::ModelDims& d, const Ops& ops, int max_B, int T, bool remat = false,
                                  bool bf16_activations = false, const LoraSpec& lora = {}, int zero_stage = 0,
                                  bool bf16_weights = false);

}  // namespace sftdp::model
