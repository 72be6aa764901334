// src/model/model.cpp — what every decoder family shares: the flat parameter and gradient
// buffers, the micro-batch upload, and the step around the family's two passes, with the LM head
// and masked cross-entropy between them. The loss and weight SUMS go to the two floats after the
// gradients (SPEC §1).
//
// The head is a fused, chunked linear cross-entropy. Positions with loss weight 0 (prompt,
// padding) add nothing to the loss, the weight sum or any gradient, so upload lists only the
// others (host side, where the batch is) with their targets and weights; then, R at a time:
//   gather_rows(x, hidden, idx) → matmul_fwd(logits = x·Wᵀ) → cross_entropy_fwd_bwd (dlogits in
//   place) → matmul_bwd(dx, dW +=, dlogits, x, W) → scatter_rows(dhidden, dx, idx)
// with dhidden zeroed first, so the positions outside the head get exactly the 0 the unfused
// path's matmul_bwd gave them. Only (R, V) logits exist at a time, never (B·T, V). The same
// kernels on every device: the twins are gather/scatter, the GEMMs and the cross-entropy.
// Results equal the unfused computation to fp32 rounding (the chunks' dW additions and per-chunk
// rounding of the two sums change the order of a few fp32 sums); tests/model/test_fused_head.cpp.
// A micro-batch with no weighted position skips both passes: every sum += 0.
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/bf16.h"
#include "kernels/encoder.h"
#include "kernels/ops.h"
#include "model/block_traits.h"
#include "model/context_parallel.h"
#include "model/decoder.h"
#include "model/graph_cache.h"
#include "sftdp/check.h"
#include "sftdp/model.h"

namespace sftdp::model {

std::unique_ptr<Model> make_model(const config::ModelDims& d, const Ops& ops, int max_B, int T, bool remat,
                                  bool bf16_activations, const LoraSpec& lora, int zero_stage, bool bf16_weights) {
  return std::make_unique<Decoder>(d, ops, max_B, T, remat, bf16_activations, lora, zero_stage, bf16_weights);
}

namespace {
// Every act16 entry of the table is there (every table fills them: kernels/ops.h).
bool act16_complete(const Ops& ops) {
  const Ops::Act16& a = ops.act16;
  return a.layernorm_fwd && a.layernorm_bwd && a.rmsnorm_fwd && a.rmsnorm_bwd && a.qk_rmsnorm_fwd && a.qk_rmsnorm_bwd &&
         a.rope_fwd && a.rope_bwd && a.swiglu_fwd && a.swiglu_bwd && a.attention_fwd && a.attention_bwd &&
         a.linear_fwd && a.linear_bwd && a.cross_entropy_fwd_bwd && a.gather_rows && a.scatter_rows &&
         a.attention_cp_fwd && a.attention_cp_bwd && a.copy_strided_rows;
}

// The counting table of footprint(): allocations are counted and get distinct addresses that are
// never touched; copies and fills do nothing. One model is measured at a time per thread.
thread_local size_t t_counted = 0;
thread_local uintptr_t t_next_address = 0;
void* counting_alloc(size_t bytes) {
  t_counted += bytes;
  t_next_address += 256 + (bytes + 255) / 256 * 256;
  return reinterpret_cast<void*>(t_next_address);
}
}  // namespace

Ops counting_ops(const Ops& ops) {
  Ops counting = ops;  // the device's name and kernels, so that the constructors take the same paths
  counting.alloc = counting_alloc;
  counting.free = [](void*) {};
  counting.zero = [](void*, size_t) {};
  counting.to_device = [](void*, const void*, size_t) {};
  counting.to_host = [](void*, const void*, size_t) {};
  counting.to_device_async = [](void*, const void*, size_t) {};
  counting.copy = [](void*, const void*, size_t) {};
  counting.synchronize = [] {};
  t_counted = 0;
  t_next_address = 0x100000;
  return counting;
}

size_t counted_bytes() { return t_counted; }

ActivationStorage activation_storage_for(const Ops& ops, bool bf16_activations, bool remat, const LoraSpec& lora) {
  if (bf16_activations && gemm_inputs_bf16(ops) && !lora.enabled()) return ActivationStorage::kBf16;
  // Not with LoRA dropout: its mask scales x before the adapter's GEMM rounds it, so backward must see the very x
  // forward saw, not x rounded to bf16 (that alone keeps results bitwise).
  if (bf16_activations && !remat && !(lora.enabled() && lora.dropout > 0)) return ActivationStorage::kBf16GemmInputs;
  return ActivationStorage::kFloat32;
}

Footprint footprint(const config::ModelDims& d, const Ops& ops, int max_B, int T, bool remat, bool bf16_activations,
                    const LoraSpec& lora, int zero_stage, bool bf16_weights) {
  const Ops counting = counting_ops(ops);
  Footprint f;
  {
    const auto m = make_model(d, counting, max_B, T, remat, bf16_activations, lora, zero_stage, bf16_weights);
    // What the model itself holds: at zero_stage 3 no parameters (with bf16 weights at 2: the bf16
    // buffer), at 2 and 3 no gradient buffer (the residency's shards and slots are the optimiser's:
    // optim::ZeroUnits::bytes()).
    f.params = zero_stage >= 3 ? 0
               : bf16_weights ? m->layout().total * sizeof(uint16_t)
                              : (m->layout().total + (m->lora() ? m->trainable_layout().total : 0)) * sizeof(float);
    f.grads = (zero_stage >= 2 ? 2 : m->grad_buffer_floats()) * sizeof(float);
    f.activations = m->activation_bytes();
  }
  f.other = t_counted - f.params - f.grads - f.activations;
  return f;
}

Model::Model(const config::ModelDims& d, const Ops& ops, int max_B, int T, ParamLayout layout, bool remat,
             bool bf16_activations, const LoraSpec& lora, int zero_stage, bool bf16_weights)
    : d_(d),
      ops_(ops),
      max_B_(max_B),
      T_(T),
      layout_(std::move(layout)),
      remat_(remat),
      lora_(lora),
      zero_stage_(zero_stage),
      bf16_weights_(bf16_weights) {
  SFTDP_ASSERT(max_B >= 1 && T >= 1 && T <= d.maxT, "bad micro-batch shape");
  SFTDP_ASSERT(zero_stage >= 0 && zero_stage <= 3, "zero_stage must be 0..3");
  SFTDP_ASSERT(!bf16_weights || (gemm_inputs_bf16(ops) && !lora.enabled()),
               "bf16 weights: the bf16-GEMM table, without LoRA");
  if (lora_.enabled()) lora_layout_ = lora_layout(d, lora_);
  bf16_table_ = gemm_inputs_bf16(ops_);
  act_storage_ = activation_storage_for(ops_, bf16_activations, remat, lora_);
  SFTDP_ASSERT(act_storage_ != ActivationStorage::kBf16 || act16_complete(ops_),
               std::string(ops_.name) + ": an act16 entry is missing");
  // Exact only where the GEMMs round their inputs to bf16 themselves.
  SFTDP_ASSERT(act_storage_ != ActivationStorage::kBf16GemmInputs || bf16_table_,
               "bf16 activations need the bf16-GEMM table");
  if (zero_stage_ < 3) {  // at 3 the residency holds this rank's shard and the units in use
    if (!bf16_weights_) params_ = alloc_floats(layout_.total);
    if (bf16_table_) {  // with bf16 weights, the parameters themselves  // the GEMMs' bf16 copy of the parameters (bf16_mirrors())
      params16_ = static_cast<uint16_t*>(ops_.alloc(std::max<size_t>(layout_.total, 1) * sizeof(uint16_t)));
      owned_.push_back(params16_);
    }
    if (lora_.enabled()) lora_params_ = alloc_floats(lora_layout_.total);
  }
  if (zero_stage_ < 2) {
    grads_ = alloc_floats(grad_buffer_floats());
    sums_ = grads_ + trainable_layout().total;
  } else {
    sums_ = alloc_floats(2);
  }
  base_units_ = units_of(layout_, d_.L);
  if (lora_.enabled()) lora_units_ = units_of(lora_layout_, d_.L);
  for (size_t u = 0; u < base_units_.size(); ++u)
    if (base_units_[u].kind == Unit::kBlock) block_base_unit_.push_back(u);
  for (size_t u = 0; u < trainable_units().size(); ++u)
    if (trainable_units()[u].kind == Unit::kBlock) block_unit_.push_back(u);
  SFTDP_ASSERT(block_base_unit_.size() == size_t(d_.L) && block_unit_.size() == size_t(d_.L),
               "a block without its unit");
  embed_unit_ = unit_at(base_units_, 0);  // wte is the first tensor of both families
  const size_t N = size_t(max_B) * T;
  io_.inputs = alloc_ints(N);
  io_.segments = alloc_ints(N), io_.positions = alloc_ints(N);
  // The head's lists, with room for the act16 path's padding rows (upload).
  io_.active = alloc_ints(N + kHeadRows), io_.active_targets = alloc_ints(N + kHeadRows);
  io_.active_weights = alloc_floats(N + kHeadRows);
  io_.eval_sums = alloc_floats(2);
  io_.buckets = alloc_ints(encoder_buckets_ints(N));
  host_active_.resize(N + kHeadRows), host_targets_.resize(N + kHeadRows), host_weights_.resize(N + kHeadRows);
  graphs_ = std::make_unique<GraphCache>(ops_);
  set_head_chunking(0);
  make_buckets();
  make_adapters();
}

void Model::make_adapters() {
  adapters_at_.assign(d_.L, {});
  if (!lora_.enabled()) return;
  modules_ = linear_modules(d_);
  const size_t N = size_t(max_B_) * T_, r = lora_.rank;
  int max_in = 0;
  for (int l = 0; l < d_.L; ++l)
    for (const auto& m : modules_) {
      if (std::find(lora_.modules.begin(), lora_.modules.end(), m.name) == lora_.modules.end()) continue;
      const std::string h = "h." + std::to_string(l) + "." + m.name;
      Adapter ad{&m, lora_layout_.find(h + ".lora_A").offset, lora_layout_.find(h + ".lora_B").offset,
                 alloc_acts(N * r), adapters_.size()};
      adapters_at_[l][static_cast<int>(m.site)].push_back(static_cast<int>(adapters_.size()));
      adapters_.push_back(ad);
      max_in = std::max(max_in, m.IC);
    }
  lora_du_ = alloc_acts(N * r);
  if (lora_.dropout > 0) {
    lora_x_ = alloc_acts(N * max_in), lora_dx_ = alloc_acts(N * max_in);
    row_ids_ = static_cast<int64_t*>(ops_.alloc(size_t(max_B_) * sizeof(int64_t)));
    owned_.push_back(row_ids_);
    dropout_keys_ = static_cast<uint64_t*>(ops_.alloc(adapters_.size() * sizeof(uint64_t)));
    owned_.push_back(dropout_keys_);
  }
}

// Where the rows' local positions sit in the whole rows: context parallelism's global positions (the
// masks are the whole rows' there, so a group draws what one rank would); null: 0 … T − 1.
const int32_t* Model::dropout_positions() const { return cp_ ? cp_->qpos : nullptr; }

uint64_t Model::dropout_key(const Adapter& ad) const {
  using lora_hash::mix;
  return mix(lora_.seed ^ mix(static_cast<uint64_t>(step_) ^ mix(ad.index)));
}

const float* Model::lora_input(const Adapter& ad, const float* x, int B) {
  if (!(lora_.dropout > 0) || !training_) return x;
  const float p = static_cast<float>(lora_.dropout), keep_scale = static_cast<float>(1.0 / (1.0 - lora_.dropout));
  ops_.lora_dropout(lora_x_, x, row_ids_, dropout_positions(), dropout_keys_ + ad.index, p, keep_scale, B * T_, T_,
                    ad.module->IC);
  return lora_x_;
}

void Model::lora_forward(int l, LoraSite site, float* out, int ldo, const float* x, int B) {
  if (adapters_at_.empty()) return;
  for (const int i : adapters_at_[l][static_cast<int>(site)]) {
    const Adapter& ad = adapters_[i];
    const LinearModule& m = *ad.module;
    const float* in = lora_input(ad, x, B);
    ops_.lora_fwd(out + m.col, ldo, ad.u, in, trainable(ad.a), trainable(ad.b), lora_.scale(), B * T_, m.IC,
                  lora_.rank, m.OC);
  }
}

void Model::lora_backward(int l, LoraSite site, float* dx, const float* dout, int ldo, const float* x, int B) {
  if (adapters_at_.empty()) return;
  const int N = B * T_;
  for (const int i : adapters_at_[l][static_cast<int>(site)]) {
    const Adapter& ad = adapters_[i];
    const LinearModule& m = *ad.module;
    const float* in = lora_input(ad, x, B);  // the forward's x' again (the same mask)
    float* dA = trainable_grad(ad.a);
    float* dB = trainable_grad(ad.b);
    const float* A = trainable(ad.a);
    const float* Bw = trainable(ad.b);
    if (in == x) {
      ops_.lora_bwd(dx, dA, dB, lora_du_, dout + m.col, ldo, in, ad.u, A, Bw, lora_.scale(), N, m.IC, lora_.rank, m.OC);
      continue;
    }
    // Dropout: d x' through the mask (its own backward), then into dx.
    const size_t n = size_t(N) * m.IC;
    ops_.zero(lora_dx_, n * sizeof(float));
    ops_.lora_bwd(lora_dx_, dA, dB, lora_du_, dout + m.col, ldo, in, ad.u, A, Bw, lora_.scale(), N, m.IC, lora_.rank,
                  m.OC);
    const float p = static_cast<float>(lora_.dropout), keep_scale = static_cast<float>(1.0 / (1.0 - lora_.dropout));
    ops_.lora_dropout(lora_dx_, lora_dx_, row_ids_, dropout_positions(), dropout_keys_ + ad.index, p, keep_scale, N,
                      T_, m.IC);
    ops_.residual_fwd(dx, dx, lora_dx_, n);
  }
}

void Model::make_buckets() {
  // allreduce_overlap's buckets are the trainable units (units_of), in the order backward finishes
  // them, the vectors' bucket carrying the loss and weight sums too.
  const size_t P = trainable_layout().total;
  buckets_.clear();
  head_buckets_ = 0;
  if (d_.L == 0) {
    buckets_.push_back({0, P + 2});
    return;
  }
  const auto& units = trainable_units();
  for (const auto& u : units)
    if (u.kind == Unit::kHead) buckets_.push_back({u.begin, u.end}), head_buckets_ = 1;
  for (int l = d_.L - 1; l >= 0; --l) buckets_.push_back({units[block_unit_[l]].begin, units[block_unit_[l]].end});
  for (const auto& u : units)
    if (u.kind == Unit::kEmbed) buckets_.push_back({u.begin, u.end});
  const size_t vectors = units.back().kind == Unit::kVectors ? units.back().begin : P;
  buckets_.push_back({vectors, P + 2});
}

void Model::use_embeddings() {
  if (residency_) residency_->use(UnitSet::kBase, embed_unit_);
}

void Model::use_block(int l) {
  if (!residency_) return;
  residency_->use(UnitSet::kBase, block_base_unit_[l]);
  if (lora()) residency_->use(UnitSet::kTrainable, block_unit_[l]);
}

void Model::replay_schedule(bool training) {
  residency_->begin_pass(training);
  for (const auto& e : unit_schedule(training)) {
    if (e.kind == UnitEvent::kUse) residency_->use(e.set, e.unit);
    else residency_->grads_final(e.unit);
  }
  residency_->end_pass();
}

Model::~Model() {
  for (void* p : owned_) ops_.free(p);
}

void Model::free_owned(void* p) {
  if (!p) return;
  owned_.erase(std::find(owned_.begin(), owned_.end(), p));
  ops_.free(p);
}

int Model::default_head_chunk_rows(int V, int max_rows) {
  // 128 MiB of fp32 logits: 667 rows at GPT-2's V = 50257, 217 at Qwen2.5's 151936 (then the
  // 256-row floor: 149 MiB). The floor keeps the GEMMs efficient: dW += dlogitsᵀ·x has inner
  // dimension R, i.e. R/2 flops per byte of dW read and written, above both the H200's fp32 and a
  // CPU core's flops-per-byte ridge at R = 256; and the per-chunk passes over W (forward, dx)
  // and dW stay few. At B·T ≤ R (llm.c's bench shape, eval) everything is one chunk.
  constexpr size_t kChunkBytes = size_t(128) << 20;
  constexpr int kMinRows = 256;
  const size_t fit = kChunkBytes / (sizeof(float) * static_cast<size_t>(V));
  const int rows = static_cast<int>(std::max<size_t>(kMinRows, std::min<size_t>(fit, INT32_MAX)));
  return std::min(rows, max_rows);
}

int Model::default_head_chunk_rows16(int V, int max_rows) {
  constexpr size_t kChunkBytes = size_t(1) << 30;
  constexpr int kMinRows = 256;
  const size_t fit = kChunkBytes / (sizeof(uint16_t) * static_cast<size_t>(padded_vocab(V)));
  const int rows = static_cast<int>(std::max<size_t>(kMinRows, std::min<size_t>(fit, INT32_MAX)));
  return std::min(rows, max_rows);
}

bool Model::graphable(bool with_ready) const {
  // LoRA dropout replays too: its masks' keys and rows are read from device memory the upload fills.
  return graphs_->enabled() && !residency_ && !cp_ && !with_ready;
}

void Model::set_cuda_graphs(bool on) { graphs_->set_enabled(on); }

size_t Model::graphs_captured() const { return graphs_->graphs(); }

void Model::set_head_chunking(int rows, bool every_row) {
  graphs_->clear();  // the head's buffers change: a graph would write the old ones
  const int N = max_B_ * T_;
  SFTDP_ASSERT(rows >= 0, "head chunk rows must be >= 0");
  every_row_ = every_row;
  const int fit = act_storage_ == ActivationStorage::kBf16 ? default_head_chunk_rows16(d_.V, N)
                                                           : default_head_chunk_rows(d_.V, N);
  head_rows_ = every_row ? N : (rows == 0 ? fit : std::min(rows, N));
  for (void* p : {static_cast<void*>(head_x_), static_cast<void*>(head_logits_), static_cast<void*>(head_dx_),
                  static_cast<void*>(head_x16_), static_cast<void*>(head_logits16_), static_cast<void*>(head_dx16_)})
    free_owned(p);
  head_x_ = head_logits_ = head_dx_ = nullptr;
  head_x16_ = head_logits16_ = head_dx16_ = nullptr;
  const size_t R = static_cast<size_t>(head_rows_);
  if (act_storage_ == ActivationStorage::kBf16) {
    head_x16_ = alloc_bf16(R * d_.C);
    head_logits16_ = alloc_bf16(R * padded_vocab(d_.V));
    head_dx16_ = alloc_bf16(R * d_.C);
    return;
  }
  head_x_ = alloc_floats(R * d_.C);
  head_logits_ = alloc_floats(R * d_.V);
  head_dx_ = alloc_floats(R * d_.C);
}

float* Model::alloc_floats(size_t n) {
  void* p = ops_.alloc(std::max<size_t>(n, 1) * sizeof(float));
  owned_.push_back(p);
  return static_cast<float*>(p);
}

float* Model::alloc_acts(size_t n) {
  act_bytes_ += n * sizeof(float);
  return alloc_floats(n);
}

uint16_t* Model::alloc_acts_bf16(size_t n) {
  act_bytes_ += n * sizeof(uint16_t);
  return alloc_bf16(n);
}

uint16_t* Model::alloc_bf16(size_t n) {
  void* p = ops_.alloc(std::max<size_t>(n, 1) * sizeof(uint16_t));
  owned_.push_back(p);
  return static_cast<uint16_t*>(p);
}

int32_t* Model::alloc_ints(size_t n) {
  void* p = ops_.alloc(std::max<size_t>(n, 1) * sizeof(int32_t));
  owned_.push_back(p);
  return static_cast<int32_t*>(p);
}

void Model::set_params_range(size_t begin, const float* data, size_t n) {
  SFTDP_ASSERT(begin + n <= layout_.total, "parameter range beyond the layout");
  if (residency_) return residency_->load_range(UnitSet::kBase, begin, data, n);
  ops_.to_device(params_ + begin, data, n * sizeof(float));
}

void Model::set_trainable_range(size_t begin, const float* data, size_t n) {
  if (!lora()) return set_params_range(begin, data, n);
  SFTDP_ASSERT(begin + n <= lora_layout_.total, "adapter range beyond the layout");
  if (residency_) return residency_->load_range(UnitSet::kTrainable, begin, data, n);
  ops_.to_device(lora_params_ + begin, data, n * sizeof(float));
}

void Model::set_trainable_from_host(const std::vector<float>& host) {
  if (!lora()) return set_params_from_host(host);
  SFTDP_ASSERT(host.size() == lora_layout_.total, "adapter buffer size mismatch");
  set_trainable_range(0, host.data(), host.size());
}

std::vector<float> Model::trainable_to_host() const {
  if (!lora()) return params_to_host();
  if (residency_) return residency_->to_host(UnitSet::kTrainable);
  std::vector<float> h(lora_layout_.total);
  ops_.to_host(h.data(), lora_params_, h.size() * sizeof(float));
  return h;
}

void Model::set_params_from_host(const std::vector<float>& host) {
  SFTDP_ASSERT(host.size() == layout_.total, "parameter buffer size mismatch");
  set_params_range(0, host.data(), host.size());
}

std::vector<float> Model::params_to_host() const {
  if (residency_) return residency_->to_host(UnitSet::kBase);
  std::vector<float> h(layout_.total);
  ops_.to_host(h.data(), params_, h.size() * sizeof(float));
  return h;
}

std::vector<float> Model::grads_to_host() const {
  SFTDP_ASSERT(grads_ != nullptr, "grads_to_host: no gradient buffer at zero_stage 2 and 3");
  std::vector<float> h(grad_buffer_floats());
  ops_.to_host(h.data(), grads_, h.size() * sizeof(float));
  return h;
}

void Model::zero_grads() {
  if (grads_) return ops_.zero(grads_, grad_buffer_floats() * sizeof(float));
  ops_.zero(sums_, 2 * sizeof(float));
  SFTDP_ASSERT(residency_ != nullptr, "zero_stage 2/3: the model has no residency");
  residency_->zero_grads();
}

void Model::upload(const data::Batch& b, bool training) {
  SFTDP_ASSERT(b.B >= 1 && b.B <= max_B_ && b.T == T_, "micro-batch shape does not fit the model");
  const size_t n = size_t(b.B) * b.T;
  ops_.to_device_async(io_.inputs, b.inputs.data(), n * sizeof(int32_t));
  if (row_ids_) {  // dropout masks are keyed by the rows' places in the training data, the step and the adapter
    SFTDP_ASSERT(b.row_ids.size() == size_t(b.B), "a LoRA-dropout micro-batch without its row ids");
    ops_.to_device_async(row_ids_, b.row_ids.data(), size_t(b.B) * sizeof(int64_t));
    dropout_keys_host_.resize(adapters_.size());
    for (const Adapter& ad : adapters_) dropout_keys_host_[ad.index] = dropout_key(ad);
    ops_.to_device_async(dropout_keys_, dropout_keys_host_.data(), adapters_.size() * sizeof(uint64_t));
  }
  io_.has_segments = b.has_segments();
  io_.has_positions = b.has_positions();
  if (io_.has_segments) ops_.to_device_async(io_.segments, b.segment_ids.data(), n * sizeof(int32_t));
  if (io_.has_positions) ops_.to_device_async(io_.positions, b.positions.data(), n * sizeof(int32_t));
  if (training && !lora()) {  // the embedding backward's buckets (a frozen base has none to compute)
    const bool learned_positions = block_traits(d_).positions == Positions::kLearned;
    encoder_buckets(b.inputs.data(), io_.has_positions ? b.positions.data() : nullptr, b.B, b.T, learned_positions,
                    host_buckets_);
    ops_.to_device_async(io_.buckets, host_buckets_.data(), host_buckets_.size() * sizeof(int32_t));
  }
  // The head's positions, in ascending order (the cross-entropy then adds the weights in the same
  // order as over all positions).
  int k = 0;
  for (size_t i = 0; i < n; ++i) {
    if (b.loss_weights[i] == 0.0f && !every_row_) continue;
    host_active_[k] = static_cast<int32_t>(i);
    host_targets_[k] = b.targets[i];
    host_weights_[k] = b.loss_weights[i];
    ++k;
  }
  io_.n_active = k;
  all_active_ = k == static_cast<int>(n);  // ascending and all of them: position i is active row i
  // The act16 head runs a multiple of kHeadRows rows, so that a micro-step's shape repeats (CUDA graphs): the rows
  // added read the hidden state's spare row max_B·T (zeros, never written) with weight 0, which adds exactly 0 to
  // every sum, and write their gradient into that spare row of dhidden.
  io_.n_head = k;
  if (act_storage_ == ActivationStorage::kBf16 && !all_active_ && k > 0) {
    io_.n_head = (k + kHeadRows - 1) / kHeadRows * kHeadRows;
    for (int i = k; i < io_.n_head; ++i)
      host_active_[i] = max_B_ * T_, host_targets_[i] = 0, host_weights_[i] = 0.0f;
  }
  if (k == 0) return;
  const size_t listed = static_cast<size_t>(io_.n_head);
  ops_.to_device_async(io_.active, host_active_.data(), listed * sizeof(int32_t));
  ops_.to_device_async(io_.active_targets, host_targets_.data(), listed * sizeof(int32_t));
  ops_.to_device_async(io_.active_weights, host_weights_.data(), listed * sizeof(float));
}

void Model::run_head(float* sums, bool backward, int B) {
  if (act_storage_ == ActivationStorage::kBf16) return run_head16(sums, backward, B);
  const int C = d_.C, V = d_.V, n = io_.n_active;
  if (residency_) residency_->use(UnitSet::kBase, head_unit());
  const float* W = param(head_);
  float* dW = backward && !lora() ? trainable_grad(head_) : nullptr;  // frozen (LoRA): none
  if (backward) ops_.zero(dhidden_, size_t(B) * T_ * C * sizeof(float));
  for (int r0 = 0; r0 < n; r0 += head_rows_) {
    const int r = std::min(head_rows_, n - r0);
    const int32_t* idx = io_.active + r0;
    ops_.gather_rows(head_x_, hidden_, idx, r, C);
    ops_.matmul_fwd(head_logits_, head_x_, W, nullptr, r, C, V);
    ops_.cross_entropy_fwd_bwd(sums, backward ? head_logits_ : nullptr, head_logits_, io_.active_targets + r0,
                               io_.active_weights + r0, r, V);
    if (!backward) continue;
    // Tied head: W is wte, and its gradient lands in the embedding's gradient sums as well.
    // Frozen (LoRA): no head weight gradient.
    ops_.matmul_bwd(head_dx_, dW, nullptr, head_logits_, head_x_, W, r, C, V);
    ops_.scatter_rows(dhidden_, head_dx_, idx, r, C);
  }
}

// The act16 path's head: as run_head, on bf16 rows and bf16 logits at the padded stride (the cross-entropy's dlogits
// in place), the head weight read through its bf16 mirror and its gradient summed in fp32 by one GEMM per chunk (one
// chunk when the logits fit 1 GiB). When every position is weighted the hidden rows are read, and their gradient
// written, in place: no gather, no scatter, no zeroing.
void Model::run_head16(float* sums, bool backward, int B) {
  const int C = d_.C, V = d_.V, Vp = padded_vocab(V), n = io_.n_head;
  const Ops::Act16& a16 = ops_.act16;
  if (residency_) residency_->use(UnitSet::kBase, head_unit());
  const float* W = param(head_);
  float* dW = backward ? trainable_grad(head_) : nullptr;
  const bool in_place = all_active_;
  if (backward && !in_place) ops_.zero(dhidden16_, size_t(B) * T_ * C * sizeof(uint16_t));
  for (int r0 = 0; r0 < n; r0 += head_rows_) {
    const int r = std::min(head_rows_, n - r0);
    const int32_t* idx = io_.active + r0;
    const uint16_t* x = in_place ? hidden16_ + size_t(r0) * C : head_x16_;
    if (!in_place) a16.gather_rows(head_x16_, hidden16_, idx, r, C);
    a16.linear_fwd(head_logits16_, Vp, nullptr, nullptr, x, W, nullptr, r, C, V, act16::LinearOut::kBf16);
    a16.cross_entropy_fwd_bwd(sums, backward ? head_logits16_ : nullptr, head_logits16_, Vp,
                              io_.active_targets + r0, io_.active_weights + r0, r, V);
    if (!backward) continue;
    // Tied head: W is wte, and its gradient lands in the embedding's gradient sums as well.
    uint16_t* dx = in_place ? dhidden16_ + size_t(r0) * C : head_dx16_;
    a16.linear_bwd(dx, nullptr, dW, nullptr, head_logits16_, Vp, x, W, r, C, V);
    if (!in_place) a16.scatter_rows(dhidden16_, head_dx16_, idx, r, C);
  }
}

void Model::mirror(int slot, const float* src, const uint16_t* copy, size_t n) const {
  if (bf16_mirrors()) ops_.bf16_mirror(slot, src, copy, n);
}

void Model::begin_pass() {
  // zero_stage 3 and bf16 weights: the residency registers each unit's bf16 copy as it is used.
  if (!bf16_mirrors() || !params_) return;
  // The parameters change only between passes (the optimizer, a checkpoint): one copy per pass.
  ops_.bf16_pack(params16_, params_, layout_.total);
  ops_.bf16_mirror(kMirrorParams, params_, params16_, layout_.total);
}

void Model::end_pass() {
  if (!bf16_table_) return;
  for (int slot = 0; slot < kMirrorSlots; ++slot) ops_.bf16_mirror(slot, nullptr, nullptr, 0);
}

void Model::forward_backward(const data::Batch& full, const GradReady& ready) {
  data::Batch local;
  const data::Batch& batch = share_of(full, local);
  upload(batch, /*training=*/true);
  SFTDP_ASSERT(residency_ || (zero_stage_ < 2 && !bf16_weights_), "zero_stage 2/3 or bf16 weights: the model has no residency");
  // Buckets reported during the passes: an untied head's, then one per block (layer_backward_done).
  // Context parallelism: the group's other members need this rank's keys and values, so the passes run
  // even where its share has no weighted position (the head then sends back zeros).
  const bool passes = io_.n_active > 0 || cp_;
  const size_t early = ready && passes ? head_buckets_ + d_.L : 0;
  if (!passes && residency_) {
    replay_schedule(/*training=*/true);  // every rank makes the pass's collectives, with sums of 0
  } else if (passes && graphable(static_cast<bool>(ready))) {  // the passes alone: a graph once repeated
    training_ = true;
    const GraphCache::Key key{0, batch.B, io_.n_head, io_.has_segments, io_.has_positions, all_active_};
    graphs_->run(key, [&] {
      begin_pass();
      run_forward(batch.B);
      run_head(sums_, /*backward=*/true, batch.B);
      run_backward(batch.B);
      end_pass();
    });
    training_ = false;
  } else if (passes) {  // else no weighted position: the loss, weight and gradient sums += 0
    training_ = true;      // LoRA dropout applies (never in forward(), evaluation)
    if (residency_) residency_->begin_pass(true);
    begin_pass();
    run_forward(batch.B);
    run_head(sums_, /*backward=*/true, batch.B);
    if (head_buckets_) {  // an untied head's gradient sums are final
      if (residency_) residency_->grads_final(head_unit());
      if (ready) ready(buckets_[0].first, buckets_[0].second);
    }
    ready_ = &ready;
    run_backward(batch.B);
    ready_ = nullptr;
    end_pass();
    if (residency_) {  // what backward finishes last: the embeddings' and the vectors' sums
      const auto& units = trainable_units();
      for (size_t u = 0; u < units.size(); ++u)
        if (units[u].kind == Unit::kEmbed || units[u].kind == Unit::kVectors) residency_->grads_final(u);
      residency_->end_pass();
    }
    training_ = false;
  }
  if (!ready) return;
  for (size_t i = early; i < buckets_.size(); ++i) ready(buckets_[i].first, buckets_[i].second);
}

LossSums Model::forward(const data::Batch& full) {
  data::Batch local;
  const data::Batch& batch = full.B > 0 ? share_of(full, local) : full;
  SFTDP_ASSERT(residency_ || (zero_stage_ < 2 && !bf16_weights_), "zero_stage 2/3 or bf16 weights: the model has no residency");
  if (batch.B > 0) upload(batch, /*training=*/false);
  if (batch.B == 0 || (io_.n_active == 0 && !cp_)) {
    if (residency_) replay_schedule(/*training=*/false);  // the pass's collectives, no kernels
    return {0, 0};
  }
  const auto passes = [&] {
    begin_pass();
    run_forward(batch.B);
    ops_.zero(io_.eval_sums, 2 * sizeof(float));
    run_head(io_.eval_sums, /*backward=*/false, batch.B);
    end_pass();
  };
  if (graphable(false)) {
    graphs_->run({1, batch.B, io_.n_head, io_.has_segments, io_.has_positions, all_active_}, passes);
  } else {
    if (residency_) residency_->begin_pass(false);
    passes();
    if (residency_) residency_->end_pass();
  }
  float sums[2];
  ops_.to_host(sums, io_.eval_sums, sizeof sums);
  return {sums[0], sums[1]};
}

}  // namespace sftdp::model
