// src/checkpoint/atomic_h5.h — private to src/checkpoint: one HDF5 file written under a temporary
// name in its target directory and committed by fsync + rename + directory fsync (AtomicH5Writer),
// and the root-attribute writers. Used by the single-file writer (checkpoint_write.cpp) and the
// sharded one (sharded_write.cpp: each rank's shard file and the index). Any failure removes the
// temporary file and dies (exit 1) with "cannot write checkpoint <path>: <OS reason>", or, for a
// writer made with OnFailure::kThrow (a rank's shard: the ranks agree first), throws WriteError.
#pragma once
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "h5/h5.h"
#include "sftdp/check.h"
#include "sftdp/check_h5.h"
#include "sftdp/checkpoint.h"
#include "checkpoint/format.h"

namespace sftdp::checkpoint::detail {

namespace fs = std::filesystem;

// One HDF5 file written at a temporary name and committed by rename. Every HDF5 call goes through
// ok() (see H5_OK), which removes the temporary file before dying, so nothing partial remains.
enum class OnFailure { kDie, kThrow };

class AtomicH5Writer {
 public:
  explicit AtomicH5Writer(const std::string& final_path, OnFailure on_failure = OnFailure::kDie)
      : final_path_(final_path), throw_(on_failure == OnFailure::kThrow) {
    const fs::path final_fs(final_path);
    dir_ = final_fs.has_parent_path() ? final_fs.parent_path().string() : std::string(".");
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) fail("POSIX", "create_directories", dir_ + ": " + ec.message(), __LINE__);
    // Hidden and suffixed: newest() never mistakes it for a checkpoint, and two processes
    // writing the same step cannot collide.
    std::string temp_name = ".";
    temp_name += final_fs.filename().string();
    temp_name += ".tmp.";
    temp_name += std::to_string(getpid());
    temp_path_ = (fs::path(dir_) / temp_name).string();
    const h5::Handle fapl = detail::checkpoint_file_access(/*for_writing=*/true);
    file_ = h5::Handle(ok(H5Fcreate(temp_path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()),
                        "H5Fcreate", __LINE__),
                     H5Fclose);
  }
  // Not committed (an exception unwound past us): leave no temporary file behind.
  ~AtomicH5Writer() {
    if (!committed_) {
      file_.reset();
      std::remove(temp_path_.c_str());
    }
  }
  AtomicH5Writer(const AtomicH5Writer&) = delete;
  AtomicH5Writer& operator=(const AtomicH5Writer&) = delete;

  hid_t file() const { return file_.get(); }

  template <class T>
  T ok(T status, const char* call, int line) {
    if (status < 0) fail("HDF5", call, h5_error_string(status), line);
    return status;
  }

  // Flush and close the HDF5 file, fsync it, rename it over the final name, fsync the directory.
  // Every object opened on the file must be closed by now, or H5Fclose would only defer the
  // close (and any write error it meets) to the last of them.
  void commit() {
    ok(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL), "H5Fflush", __LINE__);
    ok(file_.close(), "H5Fclose", __LINE__);
    fsync_path(temp_path_, O_RDONLY);
    if (std::rename(temp_path_.c_str(), final_path_.c_str()) != 0)
      fail_errno("rename", temp_path_ + " -> " + final_path_, __LINE__);
    committed_ = true;
    fsync_path(dir_, O_RDONLY | O_DIRECTORY);  // makes the rename itself durable
  }

 private:
  void fsync_path(const std::string& path, int flags) {
    const int fd = ::open(path.c_str(), flags);
    if (fd < 0) fail_errno("open", path, __LINE__);
    if (::fsync(fd) != 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      fail_errno("fsync", path, __LINE__);
    }
    ::close(fd);
  }
  [[noreturn]] void fail_errno(const char* call, const std::string& what, int line) {
    const int err = errno;
    fail("POSIX", call,
         std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ", " + call + " " + what + ")",
         line);
  }
  // "cannot write checkpoint <final>: <OS reason> (errno N); HDF5: <stack>; ...". `reason` is taken
  // before anything else runs: the next HDF5 call clears the error stack.
  [[noreturn]] void fail(const char* lib, const char* call, const std::string& reason, int line) {
    std::string full = "cannot write checkpoint " + final_path_ + ": " + reason;
    if (committed_) {
      full += " (after the rename: the file is in place but may not be durable)";
    } else if (!temp_path_.empty()) {
      std::remove(temp_path_.c_str());
      full += "; temporary file removed, earlier checkpoints untouched";
    }
    if (throw_) {
      file_.reset();  // closed before anyone looks at the directory
      throw WriteError(lib, call, full, __FILE__, line);
    }
    die_internal(lib, call, full, __FILE__, line);
  }

  std::string final_path_, dir_, temp_path_;
  h5::QuietErrors quiet_;  // before file_: failures are reported once, by fail()
  h5::Handle file_;
  bool committed_ = false;
  bool throw_ = false;
};

#define H5_OK(writer, expr) (writer).ok((expr), #expr, __LINE__)

// Scalar integer attribute on the root: file type `file_type`, memory type `mem_type`.
inline void write_scalar_attr(AtomicH5Writer& w, const char* name, hid_t file_type, hid_t mem_type,
                       const void* value) {
  h5::Handle space(H5_OK(w, H5Screate(H5S_SCALAR)), H5Sclose);
  h5::Handle attr(H5_OK(w, H5Acreate2(w.file(), name, file_type, space.get(), H5P_DEFAULT,
                                    H5P_DEFAULT)),
                H5Aclose);
  H5_OK(w, H5Awrite(attr.get(), mem_type, value));
}

// Variable-length UTF-8 string: no 64 KiB attribute limit, and h5py reads it as a str.
inline void write_string_attr(AtomicH5Writer& w, const char* name, const std::string& text) {
  h5::Handle type(H5_OK(w, H5Tcopy(H5T_C_S1)), H5Tclose);
  H5_OK(w, H5Tset_size(type.get(), H5T_VARIABLE));
  H5_OK(w, H5Tset_cset(type.get(), H5T_CSET_UTF8));
  h5::Handle space(H5_OK(w, H5Screate(H5S_SCALAR)), H5Sclose);
  h5::Handle attr(H5_OK(w, H5Acreate2(w.file(), name, type.get(), space.get(), H5P_DEFAULT,
                                    H5P_DEFAULT)),
                H5Aclose);
  const char* data = text.c_str();
  H5_OK(w, H5Awrite(attr.get(), type.get(), &data));
}

}  // namespace sftdp::checkpoint::detail
