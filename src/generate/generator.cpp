// src/generate/generator.cpp — the forward pass of generation over a key/value cache, built from the
// trainer's kernels through the Ops table (kernels/ops.h), so the CPU and the GPU run this one code
// path. Legend: n new tokens at positions [p, p + n), C channels, F mlp dim, V vocab, NH query heads,
// KVH k/v heads, HS head size, QKV = (NH + 2·KVH)·HS, A = NH·HS, maxT the cache's positions.
// The blocks are the trainer's (src/model/decoder.cpp), forward only, without keeping their activations, and read
// the family from its traits alone (src/model/block_traits.h: norm, MLP, positions, biases, q/k norm, tied head):
//   x = wte[id] (+ wpe[pos]); x += proj(attn(rope?(qk_norm?(qkv(norm_1 x))))); x += proj(act(fc(norm_2 x)))
// (GPT-2: LayerNorm, learned positions, GELU, every bias; the Llama family: RMSNorm, RoPE, SwiGLU over gate|up),
// where attn is kv_attention_fwd over the cache after kv_append has added the new keys and values.
// Then the final norm and the LM head (wte when tied) on the last row (or every row, for tests).
// residual_fwd runs in place (x = x + y): it is elementwise on both devices.
#include <algorithm>
#include <chrono>
#include <numeric>
#include <string>

#include "kernels/ops.h"
#include "model/block_traits.h"
#include "sftdp/check.h"
#include "sftdp/generate.h"

namespace sftdp::generate {

// Device memory: the parameters, the cache, and one set of activations for max_T rows.
struct Generator::Buffers {
  const Ops& ops;
  std::vector<void*> owned;
  float* alloc(size_t n) { return static_cast<float*>(own(n * sizeof(float))); }
  void* own(size_t bytes) {
    owned.push_back(ops.alloc(std::max<size_t>(bytes, 4)));
    return owned.back();
  }
  explicit Buffers(const Ops& o) : ops(o) {}
  ~Buffers() {
    for (void* p : owned) ops.free(p);
  }
  float* params = nullptr;
  std::vector<float*> k_cache, v_cache;      // per layer (maxT, KVH·HS)
  int32_t *ids = nullptr, *pos = nullptr;    // (maxT)
  float *x, *ln, *mean, *rstd;               // (maxT,C) (maxT,C) (maxT) (maxT)
  float *qkv, *qkv_raw = nullptr, *qk_rstd = nullptr;  // (maxT,QKV) ×2, (maxT,NH+KVH): Qwen3
  float *att, *y, *fc, *act;                 // (maxT,A) (maxT,C) (maxT,F or 2F) (maxT,F)
  float *logits = nullptr;                   // (rows,V): grown when all rows are asked for
  int logit_rows = 0;
  float* inv_freq = nullptr;                 // (HS/2) with RoPE
  model::BlockTraits traits;
  std::vector<model::LayerOffsets> offsets;  // each block's tensors in params
  const float* param(const model::ParamLayout& layout, const std::string& name) const {
    return params + layout.find(name).offset;
  }
  // The family's norm: LayerNorm (mean, rstd; weight and bias) or RMSNorm (rstd; weight), over n rows of C.
  void norm_fwd(float* out, const float* x, const float* w, const float* bias, int n, const config::ModelDims& d) {
    if (traits.norm == model::Norm::kLayerNorm) return ops.layernorm_fwd(out, mean, rstd, x, w, bias, n, d.C);
    ops.rmsnorm_fwd(out, rstd, x, w, n, d.C, static_cast<float>(d.norm_eps));
  }
};

Generator::Generator(const LoadedModel& m, const Ops& ops, int max_T)
    : d_(m.d), ops_(ops), max_T_(max_T), layout_(model::param_layout(m.d)), b_(std::make_unique<Buffers>(ops)) {
  if (max_T < 1) throw UserError("--max-length: must be >= 1, got " + std::to_string(max_T));
  auto& b = *b_;
  b.traits = model::block_traits(d_);
  if (b.traits.positions == model::Positions::kLearned && max_T > d_.maxT)
    throw UserError("--max-length " + std::to_string(max_T) + " is more than the model's " + std::to_string(d_.maxT) +
                    " learned positions (GPT-2's wpe)");
  SFTDP_ASSERT(m.params.size() == layout_.total, "Generator: parameters do not match the model's layout");
  b.offsets = model::layer_offsets(b.traits, layout_, d_.L);
  const size_t T = size_t(max_T), C = d_.C, F = d_.F, QKV = d_.qkv_dim(), A = d_.attn_dim();
  const size_t KV = size_t(d_.kv_heads()) * d_.head_size();
  b.params = b.alloc(layout_.total);
  ops.to_device(b.params, m.params.data(), layout_.total * sizeof(float));
  for (int l = 0; l < d_.L; ++l) b.k_cache.push_back(b.alloc(T * KV)), b.v_cache.push_back(b.alloc(T * KV));
  b.ids = static_cast<int32_t*>(b.own(T * sizeof(int32_t)));
  b.pos = static_cast<int32_t*>(b.own(T * sizeof(int32_t)));
  b.x = b.alloc(T * C), b.ln = b.alloc(T * C), b.mean = b.alloc(T), b.rstd = b.alloc(T);
  b.qkv = b.alloc(T * QKV);
  if (b.traits.qk_norm) b.qkv_raw = b.alloc(T * QKV), b.qk_rstd = b.alloc(T * (d_.NH + d_.kv_heads()));
  b.att = b.alloc(T * A), b.y = b.alloc(T * C);
  b.fc = b.alloc(T * b.traits.mlp_width(d_.F)), b.act = b.alloc(T * F);
  b.logits = b.alloc(size_t(d_.V)), b.logit_rows = 1;
  if (b.traits.positions == model::Positions::kRope) {
    const auto inv = model::rope_inv_freq(d_);
    b.inv_freq = b.alloc(inv.size());
    ops.to_device(b.inv_freq, inv.data(), inv.size() * sizeof(float));
  }
}

Generator::~Generator() = default;

void Generator::layer_forward(int l, int n) {
  auto& b = *b_;
  const Ops& o = ops_;
  const auto& t = b.traits;
  const int C = d_.C, F = d_.F, NH = d_.NH, KVH = d_.kv_heads(), HS = d_.head_size(), QKV = d_.qkv_dim();
  const int A = d_.attn_dim();
  const size_t NC = size_t(n) * C;
  const auto w = model::layer_ptrs(b.offsets[l], [&](size_t offset) { return b.params + offset; });
  b.norm_fwd(b.ln, b.x, w.ln1w, w.ln1b, n, d_);
  float* raw = t.qk_norm ? b.qkv_raw : b.qkv;  // the projection's output
  o.matmul_fwd(raw, b.ln, w.qkvw, w.qkvb, n, C, QKV);
  if (t.qk_norm)
    o.qk_rmsnorm_fwd(b.qkv, b.qk_rstd, raw, w.qnorm, w.knorm, n, NH, KVH, HS, static_cast<float>(d_.norm_eps));
  if (t.positions == model::Positions::kRope) o.rope_fwd(b.qkv, b.pos, b.inv_freq, 1, n, NH, KVH, HS);
  o.kv_append(b.k_cache[l], b.v_cache[l], b.qkv, pos_, n, NH, KVH, HS);
  o.kv_attention_fwd(b.att, b.qkv, b.k_cache[l], b.v_cache[l], pos_, n, NH, KVH, HS);
  o.matmul_fwd(b.y, b.att, w.projw, w.projb, n, A, C);
  o.residual_fwd(b.x, b.x, b.y, NC);
  b.norm_fwd(b.ln, b.x, w.ln2w, w.ln2b, n, d_);
  o.matmul_fwd(b.fc, b.ln, w.fcw, w.fcb, n, C, t.mlp_width(F));
  if (t.mlp == model::Mlp::kGelu) o.gelu_fwd(b.act, b.fc, size_t(n) * F);
  else o.swiglu_fwd(b.act, b.fc, n, F);
  o.matmul_fwd(b.y, b.act, w.mlpprojw, w.mlpprojb, n, F, C);
  o.residual_fwd(b.x, b.x, b.y, NC);
}

const std::vector<float>& Generator::feed(const int32_t* ids, int n, bool all_rows) {
  if (n < 1) throw UserError("generate: nothing to feed (an empty prompt?)");
  if (pos_ + n > max_T_)
    throw UserError("generate: " + std::to_string(pos_ + n) + " tokens do not fit the cache of " +
                    std::to_string(max_T_) + " positions (raise --max-length)");
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= d_.V)
      throw UserError("generate: token id " + std::to_string(ids[i]) + " is outside the model's vocabulary of " +
                      std::to_string(d_.V));
  auto& b = *b_;
  const Ops& o = ops_;
  const int C = d_.C, V = d_.V;
  std::vector<int32_t> positions(n);
  std::iota(positions.begin(), positions.end(), pos_);
  o.to_device(b.ids, ids, n * sizeof(int32_t));
  o.to_device(b.pos, positions.data(), n * sizeof(int32_t));
  const bool learned = b.traits.positions == model::Positions::kLearned;
  o.encoder_fwd(b.x, b.ids, b.pos, b.param(layout_, "wte"), learned ? b.param(layout_, "wpe") : nullptr, 1, n, C);
  for (int l = 0; l < d_.L; ++l) layer_forward(l, n);
  pos_ += n;
  // The final norm and the head on the rows asked for: the last, or all n.
  const int rows = all_rows ? n : 1;
  const float* x = b.x + size_t(n - rows) * C;
  b.norm_fwd(b.ln, x, b.param(layout_, "ln_f.weight"),
             b.traits.norm == model::Norm::kLayerNorm ? b.param(layout_, "ln_f.bias") : nullptr, rows, d_);
  if (rows > b.logit_rows) b.logits = b.alloc(size_t(rows) * V), b.logit_rows = rows;
  const float* head = b.param(layout_, b.traits.tied_head ? "wte" : "lm_head.weight");
  o.matmul_fwd(b.logits, b.ln, head, nullptr, rows, C, V);
  logits_.resize(size_t(rows) * V);
  o.to_host(logits_.data(), b.logits, logits_.size() * sizeof(float));
  return logits_;
}

std::vector<int32_t> generate(Generator& g, Sampler& sampler, const std::vector<int32_t>& prompt, int max_new_tokens,
                              const std::vector<int32_t>& stop_ids, Timing* timing) {
  using clock = std::chrono::steady_clock;
  g.reset();
  std::vector<int32_t> out;
  if (max_new_tokens <= 0) return out;
  const auto t0 = clock::now();
  const std::vector<float>* logits = &g.feed(prompt.data(), static_cast<int>(prompt.size()));
  const auto t1 = clock::now();
  int steps = 0;
  while (true) {
    const int32_t next = sampler.next(*logits);
    out.push_back(next);
    const bool stop = std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end();
    if (stop || static_cast<int>(out.size()) >= max_new_tokens || g.position() >= g.max_T()) break;
    logits = &g.feed(&next, 1);
    ++steps;
  }
  if (timing) {
    const auto t2 = clock::now();
    *timing = {std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count(),
               static_cast<int>(prompt.size()), steps};
  }
  return out;
}

}  // namespace sftdp::generate
