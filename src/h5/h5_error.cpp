// src/h5/h5_error.cpp — the text of an HDF5 failure: h5_error_string (sftdp/check_h5.h), the
// current error stack as "function: description" entries, outermost first, led by the OS reason
// when HDF5's file driver recorded one ("No space left on device (errno 28); HDF5: ..."); and
// h5::stack_errno (src/h5/h5.h), that errno alone.
#include <hdf5.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "h5/h5.h"
#include "sftdp/check_h5.h"

namespace sftdp {
namespace {

struct Stack {
  std::string text;
  int os_errno = 0;  // the first "errno = N" that a description carries
};

herr_t collect_h5_error(unsigned n, const H5E_error2_t* e, void* out) {
  auto* s = static_cast<Stack*>(out);
  if (n > 0) s->text += "; ";
  s->text += (e->func_name ? e->func_name : "?");
  s->text += ": ";
  s->text += (e->desc ? e->desc : "?");
  // The POSIX drivers (sec2, core, ...) report a failed system call as
  // "..., errno = 28, error message = 'No space left on device', ...".
  if (const char* at = e->desc ? std::strstr(e->desc, "errno = ") : nullptr; at && !s->os_errno)
    s->os_errno = std::atoi(at + std::strlen("errno = "));
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
  return std::string(std::strerror(s.os_errno)) + " (errno " + std::to_string(s.os_errno) +
         "); HDF5: " + s.text;
}

namespace h5 {
int stack_errno() { return current_stack().os_errno; }
}  // namespace h5

}  // namespace sftdp
