"""scripts/resource_report/ — the parts of scripts/kernel_resources.py (the command, the file list and the checks):
compiling.py (nvcc as the build runs it), ptxas.py (ptxas -v, the PTX, the cubin's ELF, demangled names), source.py
(each kernel's launch and constants read from its source: block size, dynamic shared memory) and occupancy.py (CUDA's
occupancy calculator for sm_90). Python 3 standard library only."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
