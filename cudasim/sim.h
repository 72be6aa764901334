// cudasim/sim.h — what the simulator offers beyond the CUDA API, for tests of the simulator and
// of planted bugs: the reports of failed checks, clearing a device's sticky error so that one test
// binary can provoke several faults, and the number of thread schedules.
#pragma once
#include <string>
#include <vector>

namespace sftdp::sim {

std::vector<std::string> reports();  // every report of this process so far, oldest first
void clear_reports();
// The current device's sticky error (on a real GPU only a new process clears it).
void clear_sticky_error();
int schedules();
void set_schedules(int n);  // >= 1; 1 turns the schedule comparison off

}  // namespace sftdp::sim
