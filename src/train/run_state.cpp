// src/train/run_state.cpp — see run_state.h: the job-wide error helpers and the output directory
// check (what a run starts from and leaves behind: run_restore.cpp).
#include "train/run_state.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "hf/hf_dir.h"
#include "sftdp/check.h"

namespace fs = std::filesystem;

namespace sftdp::train {

void on_rank0(comm::Communicator& comm, const std::function<void()>& fn) {
  comm::agree_on_user_errors([&] {
    if (comm.rank() == 0) fn();
  });
}

void or_abort_job(comm::Communicator& comm, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    if (comm.world() == 1) throw;  // main prints it and exits 2 cleanly
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    comm.abort(2);
  }
}

void check_output_directory(const config::Config& cfg, const RunPaths& paths, comm::Communicator& comm) {
  on_rank0(comm, [&] {
    std::error_code ec;
    if (!cfg.resume) {
      if (const auto ckpt = checkpoint::newest(paths.checkpoint_dir))
        throw UserError("resume: false, but " + paths.checkpoint_dir + " already holds " + *ckpt +
                        " from an earlier run (use another run_name, or delete the checkpoints)");
    }
    // Create the run directory for real (the only honest test), then remove what this check
    // created: nothing is left behind if a later check (a bad row at step 1) fails.
    fs::path existing = fs::absolute(paths.run_dir, ec);
    while (!existing.empty() && !fs::exists(existing, ec)) existing = existing.parent_path();
    fs::create_directories(paths.run_dir, ec);
    if (ec || !fs::is_directory(paths.run_dir))
      throw UserError("base_output_directory: cannot create " + paths.run_dir + ": " + ec.message());
    if (access(paths.run_dir.c_str(), W_OK | X_OK) != 0)
      throw UserError("base_output_directory: " + paths.run_dir + " is not writable");
    for (fs::path p = fs::absolute(paths.run_dir, ec); !p.empty() && p != existing; p = p.parent_path())
      if (!fs::remove(p, ec)) break;  // only directories this check created, deepest first
    if (fs::exists(paths.metrics_path, ec) && !fs::is_regular_file(paths.metrics_path, ec))
      throw UserError("base_output_directory: " + paths.metrics_path + " exists and is not a file");
    if (fs::exists(paths.checkpoint_dir, ec) && !fs::is_directory(paths.checkpoint_dir, ec))
      throw UserError("base_output_directory: " + paths.checkpoint_dir + " exists and is not a directory");
    if (cfg.hf_export) {
      const std::string hf_dir = paths.run_dir + "/hf";
      if (fs::exists(hf_dir, ec) && !fs::is_directory(hf_dir, ec))
        throw UserError("hf_export: " + hf_dir + " exists and is not a directory");
      if (!cfg.hf_export_tokenizer.empty()) hf::tokenizer_files(cfg.hf_export_tokenizer, "hf_export_tokenizer");
    }
  });
}

}  // namespace sftdp::train
