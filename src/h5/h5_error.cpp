// src/h5/h5_error.cpp — the text of an HDF5 failure: h5_error_string (sftdp/check_h5.h), the
// current error stack as "function: description" entries, outermost first. When HDF5's file
// driver recorded an OS error, the OS reason leads and only the outermost entry and the driver's
// own are kept ("No space left on device (errno 28); HDF5: H5Fflush: ...; H5FD__sec2_write: file
// write failed: ..."): a full disk makes a stack of ~30 entries. h5::stack_errno: that errno.
#include <hdf5.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "h5/h5.h"
#include "sftdp/check_h5.h"

namespace sftdp {
namespace {

struct Stack {
  std::string text;       // every entry
  std::string outermost;  // the first entry (the API call)
  std::string os_entry;   // the first entry that carries an errno
  int os_errno = 0;       // its "errno = N"
};

herr_t collect_h5_error(unsigned n, const H5E_error2_t* e, void* out) {
  auto* s = static_cast<Stack*>(out);
  std::string entry = e->func_name ? e->func_name : "?";
  entry += ": ";
  entry += e->desc ? e->desc : "?";
  for (char& c : entry)
    if (c == '\n') c = ' ';  // ctime()'s newline inside the sec2 driver's message
  if (n == 0) s->outermost = entry;
  // The POSIX drivers (sec2, core, ...) report a failed system call as
  // "..., errno = 28, error message = 'No space left on device', ...".
  if (const char* at = e->desc ? std::strstr(e->desc, "errno = ") : nullptr; at && !s->os_errno) {
    s->os_errno = std::atoi(at + std::strlen("errno = "));
    s->os_entry = entry;
  }
  if (n > 0) s->text += "; ";
  s->text += entry;
  return 0;
}

Stack current_stack() {
  Stack s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_h5_error, &s);
  return s;
}

}  // namespace

std::string h5_error_string(long long code) {
  const Stack s = current_stack();
  if (s.text.empty()) return "HDF5 returned " + std::to_string(code);
  if (s.os_errno <= 0) return s.text;
  std::string out = std::strerror(s.os_errno);
  out += " (errno " + std::to_string(s.os_errno) + "); HDF5: " + s.outermost;
  if (s.os_entry != s.outermost) out += "; ...; " + s.os_entry;
  return out;
}

namespace h5 {
int stack_errno() { return current_stack().os_errno; }
}  // namespace h5

}  // namespace sftdp
