// src/train/metrics.cpp — one JSON object per line, flushed after every line.
#include "train/metrics.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "sftdp/check.h"

namespace sftdp::train {

MetricsWriter::MetricsWriter(const std::string& path, int64_t keep_up_to_step) : path_(path) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::vector<std::string> kept;
  {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
          j["step"].get<int64_t>() <= keep_up_to_step)
        kept.push_back(line);
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
  if (m.skipped) j["skipped"] = true;
  write_line(j.dump());
}

void MetricsWriter::eval(int64_t step, double eval_loss, double eval_weight_sum) {
  nlohmann::ordered_json j;
  j["step"] = step;
  j["eval_loss"] = eval_loss;
  j["eval_weight_sum"] = eval_weight_sum;
  write_line(j.dump());
}

}  // namespace sftdp::train
