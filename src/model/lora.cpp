// src/model/lora.cpp — LoRA's description (issue 17): a block's Linear layers under their Hugging
// Face names and where they live in sft-dp's stacked tensors, PEFT's target_modules matching, the
// adapters' layout and PEFT's initialisation. The passes are Model's (model.cpp) and the families'.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "sftdp/check.h"
#include "sftdp/model.h"

namespace sftdp::model {

std::vector<LinearModule> linear_modules(const config::ModelDims& d) {
  const int C = d.C, F = d.F;
  if (d.block == config::Block::kGpt2)
    return {{"attn.c_attn", LoraSite::kQkv, 0, 3 * C, C},
            {"attn.c_proj", LoraSite::kAttnProj, 0, C, C},
            {"mlp.c_fc", LoraSite::kFc, 0, F, C},
            {"mlp.c_proj", LoraSite::kMlpProj, 0, C, F}};
  const int Q = d.attn_dim(), KV = d.kv_heads() * d.head_size();
  // attn.qkv stacks q | k | v rows, mlp.fc gate | up rows (src/hf/llama_names.h).
  return {{"self_attn.q_proj", LoraSite::kQkv, 0, Q, C},       {"self_attn.k_proj", LoraSite::kQkv, Q, KV, C},
          {"self_attn.v_proj", LoraSite::kQkv, Q + KV, KV, C}, {"self_attn.o_proj", LoraSite::kAttnProj, 0, C, Q},
          {"mlp.gate_proj", LoraSite::kFc, 0, F, C},           {"mlp.up_proj", LoraSite::kFc, F, F, C},
          {"mlp.down_proj", LoraSite::kMlpProj, 0, C, F}};
}

namespace {

// PEFT: a target matches a module whose name equals it or ends with "." + target.
bool matches(const std::string& module, const std::string& target) {
  if (module == target) return true;
  return module.size() > target.size() && module.compare(module.size() - target.size(), target.size(), target) == 0 &&
         module[module.size() - target.size() - 1] == '.';
}

std::string names_of(const std::vector<LinearModule>& modules) {
  std::string s;
  for (const auto& m : modules) s += (s.empty() ? "" : " ") + m.name;
  return s;
}

}  // namespace

std::vector<std::string> resolve_lora_targets(const config::ModelDims& d, std::vector<std::string> targets,
                                              const std::string& what) {
  const auto modules = linear_modules(d);
  if (targets.empty()) {
    if (d.block == config::Block::kGpt2)
      targets = {"c_attn"};
    else
      targets = {"q_proj", "v_proj"};
  }
  std::set<std::string> chosen;
  for (const auto& t : targets) {
    bool any = false;
    for (const auto& m : modules)
      if (t == "all-linear" || matches(m.name, t)) chosen.insert(m.name), any = true;
    if (!any)
      throw UserError(what + ": '" + t + "' names no linear module of a " + config::block_name(d) +
                      " block (its modules: " + names_of(modules) + ", or all-linear)");
  }
  std::vector<std::string> out;
  for (const auto& m : modules)
    if (chosen.count(m.name)) out.push_back(m.name);
  return out;
}

LoraSpec lora_spec(const config::Config& cfg, const config::ModelDims& d) {
  LoraSpec spec;
  if (cfg.lora_rank == 0) return spec;  // the ranges: config::validate
  if (cfg.lora_rank > 65536) throw UserError("lora_rank: " + std::to_string(cfg.lora_rank) + " is too large");
  spec.rank = static_cast<int>(cfg.lora_rank);
  spec.alpha = cfg.lora_alpha;
  spec.dropout = cfg.lora_dropout;
  spec.seed = static_cast<uint64_t>(cfg.seed);
  spec.modules = resolve_lora_targets(d, cfg.lora_target_modules, "lora_target_modules");
  return spec;
}

ParamLayout lora_layout(const config::ModelDims& d, const LoraSpec& spec) {
  ParamLayout lay;
  if (!spec.enabled()) return lay;
  const auto modules = linear_modules(d);
  size_t off = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    ParamInfo p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.numel = static_cast<size_t>(p.shape[0]) * static_cast<size_t>(p.shape[1]);
    p.decay = true;
    p.offset = off;
    off += (p.numel + 15) / 16 * 16;  // 64-byte aligned, as the base layout
    lay.tensors.push_back(std::move(p));
  };
  for (int l = 0; l < d.L; ++l)
    for (const auto& m : modules) {
      if (std::find(spec.modules.begin(), spec.modules.end(), m.name) == spec.modules.end()) continue;
      const std::string h = "h." + std::to_string(l) + "." + m.name;
      add(h + ".lora_A", {spec.rank, m.IC});
      add(h + ".lora_B", {m.OC, spec.rank});
    }
  lay.total = lay.n_decay = off;
  return lay;
}

void init_lora(std::vector<float>& params, const ParamLayout& layout, uint64_t seed) {
  params.assign(layout.total, 0.0f);
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const auto& t = layout.tensors[i];
    if (t.name.size() < 7 || t.name.compare(t.name.size() - 7, 7, ".lora_A") != 0) continue;  // B stays 0
    // One splitmix64 stream per tensor (as init_params), uniform in [-bound, bound).
    uint64_t s = seed * 0x100000001B3ull + 0x10A5A11ull * (i + 1);
    const double bound = 1.0 / std::sqrt(static_cast<double>(t.shape[1]));
    for (size_t j = 0; j < t.numel; ++j) {
      uint64_t z = (s += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      const double u = (z >> 11) * (1.0 / 9007199254740992.0);
      params[t.offset + j] = static_cast<float>((2 * u - 1) * bound);
    }
  }
}

void merge_lora(std::vector<float>& base, const ParamLayout& base_layout, const config::ModelDims& d,
                const LoraSpec& spec, const ParamLayout& adapters_layout, const std::vector<float>& adapters) {
  static const char* const kSiteTensor[4] = {"attn.qkv.weight", "attn.proj.weight", "mlp.fc.weight", "mlp.proj.weight"};
  const int r = spec.rank;
  const double scale = spec.alpha / r;
  for (int l = 0; l < d.L; ++l)
    for (const auto& m : linear_modules(d)) {
      if (std::find(spec.modules.begin(), spec.modules.end(), m.name) == spec.modules.end()) continue;
      const std::string h = "h." + std::to_string(l) + ".";
      const float* A = adapters.data() + adapters_layout.find(h + m.name + ".lora_A").offset;  // [r, IC]
      const float* B = adapters.data() + adapters_layout.find(h + m.name + ".lora_B").offset;  // [OC, r]
      float* W = base.data() + base_layout.find(h + kSiteTensor[static_cast<int>(m.site)]).offset;
      for (int o = 0; o < m.OC; ++o) {
        float* row = W + static_cast<size_t>(m.col + o) * m.IC;
        for (int i = 0; i < m.IC; ++i) {
          double acc = 0;
          for (int k = 0; k < r; ++k) acc += double(B[size_t(o) * r + k]) * A[size_t(k) * m.IC + i];
          row[i] = static_cast<float>(row[i] + scale * acc);
        }
      }
    }
}

std::string base_hash(const ParamLayout& layout, const std::vector<float>& params) {
  SFTDP_ASSERT(params.size() == layout.total, "base_hash: buffer size differs from the layout");
  uint64_t h = 0xCBF29CE484222325ull;
  // FNV-1a's step over 8-byte words (then the tail bytes): 8x fewer multiplies than per byte.
  auto add = [&](const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      h = (h ^ w) * 0x100000001B3ull;
    }
    for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  };
  for (const auto& t : layout.tensors) {
    add(t.name.data(), t.name.size() + 1);
    add(params.data() + t.offset, t.numel * sizeof(float));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace sftdp::model
