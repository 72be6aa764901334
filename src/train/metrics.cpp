// src/train/metrics.cpp — one JSON object per line, flushed after every line; the TensorBoard
// scalars train/{loss,lr,grad_norm,tokens_per_s} and eval/loss go out with the same lines.
#include "train/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "sftdp/check.h"

namespace sftdp::train {

namespace {
// The `step` of one metrics.jsonl line, or nothing (a blank or damaged line: a run killed mid-write).
std::optional<int64_t> step_of(const std::string& line) {
  if (line.empty()) return std::nullopt;
  auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) return std::nullopt;
  return j["step"].get<int64_t>();
}
}  // namespace

int64_t last_logged_step(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  int64_t last = -1;
  while (std::getline(in, line))
    if (const auto step = step_of(line)) last = std::max(last, *step);
  return last;
}

MetricsWriter::MetricsWriter(const std::string& path, int64_t keep_up_to_step) : path_(path) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::vector<std::string> kept;
  {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const auto step = step_of(line);
      if (step && *step <= keep_up_to_step) kept.push_back(line);
    }
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& l : kept) out << l << '\n';
    if (!out) throw UserError(path + ": cannot write metrics file");
  }
  std::filesystem::rename(tmp, path);
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) throw UserError(path + ": cannot open metrics file: " + std::strerror(errno));

  const auto tb_dir = std::filesystem::path(path).parent_path() / "tensorboard";
  std::error_code ec;
  if (keep_up_to_step < 0 && std::filesystem::is_directory(tb_dir, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(tb_dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.starts_with("events.out.tfevents.") && name.ends_with(".sftdp"))
        std::filesystem::remove(e.path(), ec);
    }
  }
  events_.emplace(tb_dir.string());
  if (keep_up_to_step >= 0) {
    events_->session_start(keep_up_to_step + 1);
    events_->flush();
  }
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write_line(const std::string& line) {
  std::fputs(line.c_str(), f_);
  std::fputc('\n', f_);
  std::fflush(f_);
}

void MetricsWriter::step(const StepMetrics& m) {
  nlohmann::ordered_json j;
  j["step"] = m.step;
  if (m.skipped) j["loss"] = nullptr;
  else j["loss"] = m.loss;
  j["lr"] = m.lr;
  j["grad_norm"] = m.grad_norm;
  j["weight_sum"] = m.weight_sum;
  j["tokens_per_s"] = m.tokens_per_s;
  j["step_time_s"] = m.step_time_s;
  j["epoch"] = m.epoch;
  j["tflops"] = m.tflops;
  if (m.mfu >= 0) j["mfu"] = m.mfu;
  if (m.skipped) j["skipped"] = true;
  write_line(j.dump());
  if (!m.skipped) {  // a skipped step has no loss, and its norm and speed say nothing
    events_->scalar(m.step, "train/loss", m.loss);
    events_->scalar(m.step, "train/grad_norm", m.grad_norm);
    events_->scalar(m.step, "train/tokens_per_s", m.tokens_per_s);
  }
  events_->scalar(m.step, "train/lr", m.lr);
  events_->flush();
}

void MetricsWriter::eval(int64_t step, double eval_loss, double eval_weight_sum) {
  nlohmann::ordered_json j;
  j["step"] = step;
  j["eval_loss"] = eval_loss;
  j["eval_weight_sum"] = eval_weight_sum;
  write_line(j.dump());
  events_->scalar(step, "eval/loss", eval_loss);
  events_->flush();
}

}  // namespace sftdp::train
