// src/model/model.cpp — what every decoder family shares: the flat parameter and gradient
// buffers, the micro-batch upload, and the step around the family's two passes. The loss and
// weight SUMS go to the two floats after the gradients (SPEC §1); dlogits are written in place.
#include <algorithm>

#include "kernels/ops.h"
#include "sftdp/check.h"
#include "sftdp/model.h"

namespace sftdp::model {

ParamLayout param_layout(const config::ModelDims& d) {
  return d.block == config::Block::kLlama ? llama_layout(d) : gpt2_layout(d);
}

std::unique_ptr<Model> make_model(const config::ModelDims& d, const Ops& ops, int max_B, int T) {
  if (d.block == config::Block::kLlama) return std::make_unique<Llama>(d, ops, max_B, T);
  return std::make_unique<Gpt2>(d, ops, max_B, T);
}

Model::Model(const config::ModelDims& d, const Ops& ops, int max_B, int T, ParamLayout layout)
    : d_(d), ops_(ops), max_B_(max_B), T_(T), layout_(std::move(layout)) {
  SFTDP_ASSERT(max_B >= 1 && T >= 1 && T <= d.maxT, "bad micro-batch shape");
  params_ = alloc_floats(layout_.total);
  grads_ = alloc_floats(grad_buffer_floats());
  const size_t N = size_t(max_B) * T;
  io_.inputs = alloc_ints(N), io_.targets = alloc_ints(N);
  io_.segments = alloc_ints(N), io_.positions = alloc_ints(N);
  io_.weights = alloc_floats(N);
  io_.logits = alloc_floats(N * d.V);
  io_.eval_sums = alloc_floats(2);
}

Model::~Model() {
  for (void* p : owned_) ops_.free(p);
}

float* Model::alloc_floats(size_t n) {
  void* p = ops_.alloc(std::max<size_t>(n, 1) * sizeof(float));
  owned_.push_back(p);
  return static_cast<float*>(p);
}

int32_t* Model::alloc_ints(size_t n) {
  void* p = ops_.alloc(std::max<size_t>(n, 1) * sizeof(int32_t));
  owned_.push_back(p);
  return static_cast<int32_t*>(p);
}

void Model::set_params_from_host(const std::vector<float>& host) {
  SFTDP_ASSERT(host.size() == layout_.total, "parameter buffer size mismatch");
  ops_.to_device(params_, host.data(), host.size() * sizeof(float));
}

std::vector<float> Model::params_to_host() const {
  std::vector<float> h(layout_.total);
  ops_.to_host(h.data(), params_, h.size() * sizeof(float));
  return h;
}

std::vector<float> Model::grads_to_host() const {
  std::vector<float> h(grad_buffer_floats());
  ops_.to_host(h.data(), grads_, h.size() * sizeof(float));
  return h;
}

void Model::zero_grads() { ops_.zero(grads_, grad_buffer_floats() * sizeof(float)); }

void Model::upload(const data::Batch& b) {
  SFTDP_ASSERT(b.B >= 1 && b.B <= max_B_ && b.T == T_, "micro-batch shape does not fit the model");
  const size_t n = size_t(b.B) * b.T;
  ops_.to_device(io_.inputs, b.inputs.data(), n * sizeof(int32_t));
  ops_.to_device(io_.targets, b.targets.data(), n * sizeof(int32_t));
  ops_.to_device(io_.weights, b.loss_weights.data(), n * sizeof(float));
  io_.has_segments = b.has_segments();
  io_.has_positions = b.has_positions();
  if (io_.has_segments) ops_.to_device(io_.segments, b.segment_ids.data(), n * sizeof(int32_t));
  if (io_.has_positions) ops_.to_device(io_.positions, b.positions.data(), n * sizeof(int32_t));
}

void Model::forward_backward(const data::Batch& batch) {
  upload(batch);
  run_forward(batch.B);
  const int N = batch.B * T_;
  ops_.cross_entropy_fwd_bwd(grads_ + layout_.total, io_.logits, io_.logits, io_.targets, io_.weights, N,
                             d_.V);
  run_backward(batch.B);
}

LossSums Model::forward(const data::Batch& batch) {
  upload(batch);
  run_forward(batch.B);
  ops_.zero(io_.eval_sums, 2 * sizeof(float));
  ops_.cross_entropy_fwd_bwd(io_.eval_sums, nullptr, io_.logits, io_.targets, io_.weights, batch.B * T_,
                             d_.V);
  float sums[2];
  ops_.to_host(sums, io_.eval_sums, sizeof sums);
  return {sums[0], sums[1]};
}

}  // namespace sftdp::model
