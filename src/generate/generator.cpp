// src/generate/generator.cpp — the forward pass of generation over a key/value cache, built from the
// trainer's kernels through the Ops table (kernels/ops.h), so the CPU and the GPU run this one code
// path. Legend: n new tokens at positions [p, p + n), C channels, F mlp dim, V vocab, NH query heads,
// KVH k/v heads, HS head size, QKV = (NH + 2·KVH)·HS, A = NH·HS, maxT the cache's positions.
// The blocks are the trainer's (src/model/decoder.cpp, over block_traits.h), forward only, without keeping their
// activations:
//   GPT-2:  x = wte[id] + wpe[pos]; x += proj(attn(qkv(ln_1 x))); x += fc2(gelu(fc(ln_2 x)))
//   Llama:  x = wte[id];  x += o(attn(rope(qk_norm?(qkv(rms_1 x) [+ bias])))); x += down(swiglu(gate|up(rms_2 x)))
// where attn is kv_attention_fwd over the cache after kv_append has added the new keys and values.
// Then the final norm and the LM head (wte when tied) on the last row (or every row, for tests).
// residual_fwd runs in place (x = x + y): it is elementwise on both devices.
#include <algorithm>
#include <chrono>
#include <numeric>
#include <string>

#include "kernels/ops.h"
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
  float* inv_freq = nullptr;                 // (HS/2) Llama family
};

namespace {
size_t offset_of(const model::ParamLayout& layout, const std::string& name) { return layout.find(name).offset; }
}  // namespace

Generator::Generator(const LoadedModel& m, const Ops& ops, int max_T)
    : d_(m.d), ops_(ops), max_T_(max_T), layout_(model::param_layout(m.d)), b_(std::make_unique<Buffers>(ops)) {
  if (max_T < 1) throw UserError("--max-length: must be >= 1, got " + std::to_string(max_T));
  if (d_.block == config::Block::kGpt2 && max_T > d_.maxT)
    throw UserError("--max-length " + std::to_string(max_T) + " is more than the model's " + std::to_string(d_.maxT) +
                    " learned positions (GPT-2's wpe)");
  SFTDP_ASSERT(m.params.size() == layout_.total, "Generator: parameters do not match the model's layout");
  auto& b = *b_;
  const size_t T = size_t(max_T), C = d_.C, F = d_.F, QKV = d_.qkv_dim(), A = d_.attn_dim();
  const size_t KV = size_t(d_.kv_heads()) * d_.head_size();
  const bool llama = d_.block == config::Block::kLlama;
  b.params = b.alloc(layout_.total);
  ops.to_device(b.params, m.params.data(), layout_.total * sizeof(float));
  for (int l = 0; l < d_.L; ++l) b.k_cache.push_back(b.alloc(T * KV)), b.v_cache.push_back(b.alloc(T * KV));
  b.ids = static_cast<int32_t*>(b.own(T * sizeof(int32_t)));
  b.pos = static_cast<int32_t*>(b.own(T * sizeof(int32_t)));
  b.x = b.alloc(T * C), b.ln = b.alloc(T * C), b.mean = b.alloc(T), b.rstd = b.alloc(T);
  b.qkv = b.alloc(T * QKV);
  if (d_.qk_norm) b.qkv_raw = b.alloc(T * QKV), b.qk_rstd = b.alloc(T * (d_.NH + d_.kv_heads()));
  b.att = b.alloc(T * A), b.y = b.alloc(T * C);
  b.fc = b.alloc(T * (llama ? 2 * F : F)), b.act = b.alloc(T * F);
  b.logits = b.alloc(size_t(d_.V)), b.logit_rows = 1;
  if (llama) {
    const auto inv = model::rope_inv_freq(d_);
    b.inv_freq = b.alloc(inv.size());
    ops.to_device(b.inv_freq, inv.data(), inv.size() * sizeof(float));
  }
}

Generator::~Generator() = default;

void Generator::layer_forward(int l, int n) {
  auto& b = *b_;
  const Ops& o = ops_;
  const int C = d_.C, F = d_.F, NH = d_.NH, KVH = d_.kv_heads(), HS = d_.head_size(), QKV = d_.qkv_dim();
  const int A = d_.attn_dim();
  const std::string h = "h." + std::to_string(l) + ".";
  auto w = [&](const std::string& name) { return b.params + offset_of(layout_, h + name); };
  auto w_if = [&](const std::string& name, bool present) { return present ? w(name) : nullptr; };
  const size_t NC = size_t(n) * C;
  if (d_.block == config::Block::kGpt2) {
    o.layernorm_fwd(b.ln, b.mean, b.rstd, b.x, w("ln_1.weight"), w("ln_1.bias"), n, C);
    o.matmul_fwd(b.qkv, b.ln, w("attn.qkv.weight"), w("attn.qkv.bias"), n, C, QKV);
  } else {
    const float eps = static_cast<float>(d_.norm_eps);
    o.rmsnorm_fwd(b.ln, b.rstd, b.x, w("ln_1.weight"), n, C, eps);
    float* raw = d_.qk_norm ? b.qkv_raw : b.qkv;
    o.matmul_fwd(raw, b.ln, w("attn.qkv.weight"), w_if("attn.qkv.bias", d_.qkv_bias), n, C, QKV);
    if (d_.qk_norm)
      o.qk_rmsnorm_fwd(b.qkv, b.qk_rstd, raw, w("attn.q_norm.weight"), w("attn.k_norm.weight"), n, NH, KVH, HS, eps);
    o.rope_fwd(b.qkv, b.pos, b.inv_freq, 1, n, NH, KVH, HS);
  }
  o.kv_append(b.k_cache[l], b.v_cache[l], b.qkv, pos_, n, NH, KVH, HS);
  o.kv_attention_fwd(b.att, b.qkv, b.k_cache[l], b.v_cache[l], pos_, n, NH, KVH, HS);
  if (d_.block == config::Block::kGpt2) {
    o.matmul_fwd(b.y, b.att, w("attn.proj.weight"), w("attn.proj.bias"), n, A, C);
    o.residual_fwd(b.x, b.x, b.y, NC);
    o.layernorm_fwd(b.ln, b.mean, b.rstd, b.x, w("ln_2.weight"), w("ln_2.bias"), n, C);
    o.matmul_fwd(b.fc, b.ln, w("mlp.fc.weight"), w("mlp.fc.bias"), n, C, F);
    o.gelu_fwd(b.act, b.fc, size_t(n) * F);
    o.matmul_fwd(b.y, b.act, w("mlp.proj.weight"), w("mlp.proj.bias"), n, F, C);
  } else {
    const float eps = static_cast<float>(d_.norm_eps);
    o.matmul_fwd(b.y, b.att, w("attn.proj.weight"), nullptr, n, A, C);
    o.residual_fwd(b.x, b.x, b.y, NC);
    o.rmsnorm_fwd(b.ln, b.rstd, b.x, w("ln_2.weight"), n, C, eps);
    o.matmul_fwd(b.fc, b.ln, w("mlp.fc.weight"), nullptr, n, C, 2 * F);
    o.swiglu_fwd(b.act, b.fc, n, F);
    o.matmul_fwd(b.y, b.act, w("mlp.proj.weight"), nullptr, n, F, C);
  }
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
  const bool gpt2 = d_.block == config::Block::kGpt2;
  o.encoder_fwd(b.x, b.ids, b.pos, b.params + offset_of(layout_, "wte"),
                gpt2 ? b.params + offset_of(layout_, "wpe") : nullptr, 1, n, C);
  for (int l = 0; l < d_.L; ++l) layer_forward(l, n);
  pos_ += n;
  // The final norm and the head on the rows asked for: the last, or all n.
  const int rows = all_rows ? n : 1;
  const float* x = b.x + size_t(n - rows) * C;
  if (gpt2)
    o.layernorm_fwd(b.ln, b.mean, b.rstd, x, b.params + offset_of(layout_, "ln_f.weight"),
                    b.params + offset_of(layout_, "ln_f.bias"), rows, C);
  else
    o.rmsnorm_fwd(b.ln, b.rstd, x, b.params + offset_of(layout_, "ln_f.weight"), rows, C,
                  static_cast<float>(d_.norm_eps));
  if (rows > b.logit_rows) b.logits = b.alloc(size_t(rows) * V), b.logit_rows = rows;
  const float* head = b.params + offset_of(layout_, d_.tied ? "wte" : "lm_head.weight");
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
