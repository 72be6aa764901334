// sftdp/check_cuda.h — CHECK_CUDA and CHECK_CUBLAS (cuBLAS and cuBLASLt share the status type):
// a failing call is an internal error (sftdp/check.h) with the library's own error string.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "sftdp/check.h"

#define CHECK_CUDA(e) SFTDP_CHECK_LIB("CUDA", e, cudaSuccess, cudaGetErrorString)
#define CHECK_CUBLAS(e) SFTDP_CHECK_LIB("cuBLAS", e, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
