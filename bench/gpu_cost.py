#!/usr/bin/env python3
"""bench/gpu_cost.py — a cost model of one GPU optimizer step, from the device operations the code really
queues: the CUDA simulator's record of one trainer step (bench/gpu_step_record.cpp in record mode,
cudasim/record.h), each line given its FLOPs and the fewest bytes it must move through device memory
(every input read once, every output written once), then timed on an H100 SXM.

    python3 bench/gpu_cost.py                      # record and cost gpt2-124m B=8 T=1024, qwen3-0.6b B=4 T=4096
    python3 bench/gpu_cost.py --step "model_name=llama-tiny global_batch_size=2 max_target_length=64"
    python3 bench/gpu_cost.py step.jsonl ...       # cost records made before (SFTDP_SIM_RECORD=step.jsonl)
    python3 bench/gpu_cost.py --device h200 ...    # predict for an H200 (default: H100 SXM)
    python3 bench/gpu_cost.py --profile prof.jsonl [--record step.jsonl]   # measured beside predicted

--profile: a profile of the same step on a GPU (bench/gpu_step_record with SFTDP_GPU_PROFILE=prof.jsonl,
kernels/cuda/profile.cuh; scripts/gpu_check.sh profile makes one): every operation's measured µs joined line
by line with the record's operation and its prediction, on the constants of the profiled device (by its
name: H100 SXM or H200; another GPU: H100 SXM's, said so): measured vs predicted µs, achieved GB/s and
TFLOP/s, the idle gap before each operation and whether the host was late (host-bound), per class, per
kernel and for the largest gaps, then each class's efficiency as measured (the constants that would make the
prediction match). The record: --record, else recorded now from the profile's own key=value overrides (a
simulator build is needed then); with --no-record, the measured tables alone.

--build DIR: a simulator build with bench/gpu_step_record (default $SFTDP_BUILD_DIR, else build-sim-b, else
build-sim). --keep DIR keeps the records. --real runs the kernels while recording (slow; the record is the
same). Prints markdown: per model the step's predicted time and MFU, a table per class and per kernel, and
the largest items. --json prints the totals as JSON instead.

The model (each assumption is a constant below):
- Kernel formulas: KERNELS, one entry per __global__ function (its name without the template arguments it
  is launched with), written from the kernel's source: its parameter names (checked against the record's
  argument count; tests/integration/test_gpu_cost_cuda.py checks them against the source), its class, and
  FLOPs and bytes from the scalar arguments and the launch shape. An unknown kernel name is an error.
- cuBLASLt GEMMs: 2·m·n·k·batch FLOPs; bytes: A and B in their types, D in fp32 (C read too when beta != 0,
  the bias when fused); time at GEMM_EFFICIENCY of the peak for the input type (bf16: dense bf16 tensor
  cores; fp32: the fp32 CUDA-core peak, since CUBLAS_COMPUTE_32F never uses TF32).
- Attention at its class's anchor: the tensor-core kernels (attention_tc_*) at FlashAttention-2's measured
  rate, the CUDA-core kernels (attention.cu) at theirs, on the FLOPs each kernel executes (its own GEMMs over
  the pairs it visits: recomputed products count, causal halves do not).
- Every other kernel is memory-bound: bytes at BANDWIDTH_EFFICIENCY of HBM, FLOPs at the fp32 CUDA-core peak.
- Each operation takes max(FLOP time, byte time) plus LAUNCH_US (kernels, GEMMs, memsets, device copies,
  collectives); host<->device copies take COPY_LATENCY_US + bytes / PCIE_GBS (pageable host memory: every
  copy of the step is a synchronising one). One stream, nothing overlaps.
- MFU = the step's model FLOPs (bench::train_flops, the project's one convention, written by the recorder
  into its "step begin" mark) / predicted time / the dense bf16 peak.
"""
import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile
from collections import OrderedDict, defaultdict

# ---- the device (NVIDIA's datasheets; dense = no 2:4 sparsity) ------------------------------------------
# H100 SXM and H200 share the Hopper SXM compute (989 TFLOP/s dense bf16: 1979 with sparsity, halved; 67 TFLOP/s
# fp32 CUDA cores); the H200's HBM3e moves 4.8 TB/s against the H100's HBM3 3.35 TB/s.
DEVICES = {
    "H100 SXM": dict(peak_bf16=989.0, peak_fp32=67.0, hbm_tbps=3.35),
    "H200": dict(peak_bf16=989.0, peak_fp32=67.0, hbm_tbps=4.8),
}
DEVICE = "H100 SXM"
PEAK_BF16_TFLOPS = 989.0   # dense bf16 tensor cores; the MFU denominator
PEAK_FP32_TFLOPS = 67.0    # fp32 CUDA cores (non-tensor)
HBM_TBPS = 3.35            # HBM3
GEMM_EFFICIENCY = 0.70     # of the peak for the GEMM's input type
BANDWIDTH_EFFICIENCY = 0.80
ATTN_TC_TFLOPS = 335.0     # FlashAttention-2 on an H100 (its measured rate): attention_tc_* kernels
ATTN_CUDA_TFLOPS = 17.0    # today's CUDA-core attention kernels (attention.cu)
LAUNCH_US = 2.5            # per device operation: launch and drain on one stream
COPY_LATENCY_US = 10.0     # per host<->device copy (a synchronising cudaMemcpyAsync of pageable memory)
PCIE_GBPS = 20.0           # pageable host<->device copies
NVLINK_BUS_GBPS = 360.0    # NCCL ring allreduce bus bandwidth between GPUs of one node (ranks > 1)

DEFAULT_STEPS = [
    "model_name=gpt2-124m global_batch_size=8 max_target_length=1024 dtype=bfloat16",
    "model_name=qwen3-0.6b global_batch_size=4 max_target_length=4096 dtype=bfloat16",
]


# ---- per-kernel formulas ---------------------------------------------------------------------------------
class Args:
    """A launch's arguments by parameter name (scalars as values, pointers as {"alloc":..} dicts), plus grid,
    block, smem and types (the recorded C++ type of each parameter)."""

    def __init__(self, names, rec):
        self.grid, self.block, self.smem = rec["grid"], rec["block"], rec["smem"]
        self.types = {}
        for name, a in zip(names, rec["args"]):
            setattr(self, name, a["value"] if "value" in a else a)
            self.types[name] = a["type"]

    def null(self, name):
        return getattr(self, name).get("alloc", 0) is None


class K:
    """One kernel: its parameters (in order, as in its source), class, FLOPs and bytes of one launch."""

    def __init__(self, src, params, cls, flops, bytes_):
        self.src, self.params, self.cls, self.flops, self.bytes = src, params.split(), cls, flops, bytes_


def causal_pairs(T):  # visible (query, key) pairs of one causal (b, h) without segments
    return T * (T + 1) // 2


def tile_pairs(T, tile=64):  # visited (query tile, key tile) pairs of one (b, h): the tiles on and below the diagonal
    t = -(-T // tile)
    return t * (t + 1) // 2


def tc_head_size(smem, per_row_tiles, extra):
    """HS of an attention_tc launch from its dynamic shared memory: per_row_tiles·64·(HS + 8)·2 + extra bytes
    (fwd_smem / dkv_smem / dq_smem of attention_tc.cu; the kernels' HS is a template argument)."""
    hs = (smem - extra) / (per_row_tiles * 64 * 2) - 8
    if hs != int(hs) or int(hs) % 16 or not 16 <= hs <= 128:
        raise SystemExit(f"gpu_cost: attention_tc shared memory {smem} gives head size {hs}: "
                         "its formula no longer matches attention_tc.cu's *_smem()")
    return int(hs)


def _reduce_load_bytes(a):  # partial_sums_kernel<Load>: LoadSquare reads fp32, LoadDouble fp64
    t = a.types["load"]
    if t.endswith("LoadSquare"):
        return 4
    if t.endswith("LoadDouble"):
        return 8
    raise SystemExit(f"gpu_cost: partial_sums_kernel with an unknown load functor {t}")


def _attn_b(a, heads):  # batch rows of a CUDA-core attention launch: grid (ceil(T/64), B·heads)
    return a.grid[1] // heads


def _act16_column_sums(a, sums, width):
    """Bytes of an act16 norm backward's column sums (norm_act16.cuh): each wanted sum (its pointer not null)
    read and written once (width fp32), and its per-block partials (grid[0] blocks, width padded to 4 floats)
    written, then read by the last block."""
    wanted = sum(1 for name in sums if not a.null(name))
    return wanted * (2 * F4 * width + 2 * F4 * a.grid[0] * ((width + 3) // 4 * 4))


F4 = 4  # bytes of an fp32 (or int32) element


def _elem(ctype):  # bytes of the element a recorded pointer type points to: bf16 (uint16_t storage) or 4-byte
    return 2 if ("bfloat16" in ctype or "unsigned short" in ctype) else 4


def _tc_out(a, f32_name):  # bytes per element an attention_tc kernel writes: fp32 to f32_name, else bf16 to its twin
    return 2 if a.null(f32_name) else F4
KERNELS = {
    # adamw.cu: p, m, v, g read; p, m, v written (adamw_step_kernel: the settings, sums and Σg² read too, the
    # decision written once)
    "adamw_kernel": K("adamw.cu", "params m v grads N n_decay lr b1 b2 eps weight_decay inv_bias_correction1 "
                      "inv_bias_correction2 grad_scale", "memory", lambda a: 16 * a.N, lambda a: 28 * a.N),
    "adamw_step_kernel": K("adamw.cu", "params m v grads N n_decay hyper sums sumsq stats", "memory",
                           lambda a: 16 * a.N, lambda a: 28 * a.N + 80),
    # reduce.cu (partial_sums_kernel<Load>: Load is LoadSquare or LoadDouble)
    "partial_sums_kernel": K("reduce.cu", "partials load n chunk", "memory",
                                   lambda a: 2 * a.n, lambda a: _reduce_load_bytes(a) * a.n + 8 * a.grid[0]),
    "finish_sum_kernel": K("reduce.cu", "dst partials P accumulate", "memory",
                           lambda a: a.P, lambda a: 8 * a.P + 4 * (1 + a.accumulate)),
    "column_partials_kernel": K("reduce.cu", "partials x N C", "memory",
                                lambda a: a.N * a.C, lambda a: F4 * a.N * a.C + F4 * a.grid[1] * a.C),
    "add_column_partials_kernel": K("reduce.cu", "dst partials R C", "memory",
                                    lambda a: a.R * a.C, lambda a: F4 * a.R * a.C + 2 * F4 * a.C),
    # cast.cu: fp32 -> bf16 copies (the bf16 GEMMs' inputs, bf16 activation storage) and back
    "fp32_to_bf16_kernel": K("cast.cu", "out ld_out inp ld_in len count", "memory", lambda a: a.len * a.count,
                             lambda a: 6 * a.len * a.count),
    "bf16_to_fp32_kernel": K("cast.cu", "out inp n", "memory", lambda a: a.n, lambda a: 6 * a.n),
    # residual.cu, gelu.cu, swiglu.cu: elementwise
    "residual_fwd_kernel": K("residual.cu", "out a b N", "memory", lambda a: a.N, lambda a: 12 * a.N),
    "gelu_fwd_kernel": K("gelu.cu", "out inp N", "memory", lambda a: 12 * a.N, lambda a: 8 * a.N),
    "gelu_bwd_kernel": K("gelu.cu", "dinp inp dout N", "memory", lambda a: 24 * a.N, lambda a: 12 * a.N),
    # swiglu.cu: fp32 or bf16 storage (act16), from the recorded type: 3 and 5 elements moved per output element
    "swiglu_fwd_kernel": K("swiglu.cu", "out inp F N", "memory", lambda a: 8 * a.N * a.F,
                           lambda a: 3 * _elem(a.types["out"]) * a.N * a.F),
    "swiglu_bwd_kernel": K("swiglu.cu", "dinp inp dout F N", "memory",
                           lambda a: 14 * a.N * a.F, lambda a: 5 * _elem(a.types["dinp"]) * a.N * a.F),
    # gather.cu: the fused head's row gather / scatter (n rows of C elements, one index per row)
    "copy_rows_kernel": K("gather.cu", "out inp idx C n scatter", "memory",
                          lambda a: 0, lambda a: 2 * _elem(a.types["out"]) * a.n * a.C + F4 * a.n),
    # gemm.cu: the bias when cuBLASLt's epilogue cannot take it
    "add_bias_kernel": K("gemm.cu", "C bias M N ldc", "memory", lambda a: a.M * a.N,
                         lambda a: 8 * a.M * a.N + F4 * a.N),
    # gemm.cu, the act16 GEMM's fallbacks: the epilogue on the fp32 product z (read) into a bf16 D (written), with
    # the bf16 bias (GELU_AUX_BIAS also writes aux; DGELU reads it); kind 3 is DGELU (Gemm16Epilogue::Kind)
    "epilogue_bf16_kernel": K("gemm.cu", "kind z bias aux ld_aux D ldd M N", "memory",
                              lambda a: 30 * a.M * a.N,
                              lambda a: a.M * a.N * (F4 + 2 + (2 if a.kind >= 2 else 0))
                              + (0 if a.null("bias") else 2 * a.N)),
    # the row sums of op(A) of a bf16 [K, M] matrix when BGRADB is off or refused: A read once, M sums written
    "column_sums_bf16_kernel": K("gemm.cu", "out A ld M K", "memory", lambda a: a.M * a.K,
                                 lambda a: 2 * a.M * a.K + F4 * a.M),
    # matmul.cu: a bias gradient (from the GEMM's BGRADB, in scratch) added to its sums
    "add_vector_kernel": K("matmul.cu", "dst src n", "memory", lambda a: a.n, lambda a: 3 * F4 * a.n),
    # encoder.cu: gather of wte (and wpe) rows; backward adds each bucket's rows of dout into its table row
    "encoder_fwd_kernel": K("encoder.cu", "out inp pos wte wpe T C BT", "memory",
                            lambda a: 0 if a.null("wpe") else a.BT * a.C,
                            lambda a: F4 * a.BT * a.C * (2 if a.null("wpe") else 3) + F4 * a.BT),
    # grid (n positions, ...), U <= n buckets (U is on the device: n, an upper bound, e.g. random tokens): U table
    # rows read and written; the n tokens' dout rows read once; n also from the bucket layout (order | starts | rows,
    # ints): starts begins n ints after order
    "scatter_add_buckets_kernel": K("encoder.cu", "table dout count order starts rows C", "memory",
                                    lambda a: (a.starts["offset"] - a.order["offset"]) // 4 * a.C,
                                    lambda a: 2 * F4 * a.grid[0] * a.C
                                    + F4 * (a.starts["offset"] - a.order["offset"]) // 4 * (a.C + 1)),
    # layernorm.cu (GPT-2): a warp per row
    "layernorm_fwd_kernel": K("layernorm.cu", "out mean rstd inp weight bias N C", "memory",
                              lambda a: 8 * a.N * a.C, lambda a: 8 * a.N * a.C + 8 * a.C + 8 * a.N),
    "layernorm_bwd_dinp_kernel": K("layernorm.cu", "dinp dout inp weight mean rstd N C", "memory",  # dinp +=
                                   lambda a: 12 * a.N * a.C, lambda a: 16 * a.N * a.C + F4 * a.C + 8 * a.N),
    "layernorm_bwd_partials_kernel": K("layernorm.cu", "partials dout inp mean rstd N C R", "memory",
                                       lambda a: 5 * a.N * a.C, lambda a: 8 * a.N * a.C + 8 * a.N + 8 * a.R * a.C),
    # rmsnorm.cu (Llama family)
    "rmsnorm_fwd_kernel": K("rmsnorm.cu", "out rstd inp weight N C eps", "memory",
                            lambda a: 4 * a.N * a.C, lambda a: 8 * a.N * a.C + F4 * a.C + F4 * a.N),
    "rmsnorm_bwd_dinp_kernel": K("rmsnorm.cu", "dinp dout inp weight rstd N C", "memory",  # dinp +=
                                 lambda a: 8 * a.N * a.C, lambda a: 16 * a.N * a.C + F4 * a.C + F4 * a.N),
    # Qwen3's q/k norms over the fused qkv rows (v copied through)
    "qk_rmsnorm_fwd_kernel": K("rmsnorm.cu", "out rstd qkv q_weight k_weight N NH KVH HS eps", "memory",
                               lambda a: 4 * a.N * (a.NH + a.KVH) * a.HS,
                               lambda a: 8 * a.N * (a.NH + 2 * a.KVH) * a.HS + 8 * a.HS + F4 * a.N * (a.NH + a.KVH)),
    "qk_rmsnorm_bwd_dinp_kernel": K("rmsnorm.cu", "dqkv dout qkv q_weight k_weight rstd N NH KVH HS", "memory",
                                    lambda a: 8 * a.N * (a.NH + a.KVH) * a.HS,
                                    lambda a: 8 * a.N * (a.NH + 2 * a.KVH) * a.HS + F4 * a.N * (a.NH + a.KVH) * a.HS
                                    + 8 * a.HS + F4 * a.N * (a.NH + a.KVH)),
    # grid (R chunks, ...): M vectors of n channels of dout and inp, one rstd each
    "weight_partials_kernel": K("rmsnorm.cu", "partials dout inp rstd M H h0 row_stride rstd_stride n", "memory",
                                lambda a: 3 * a.M * a.n, lambda a: 8 * a.M * a.n + F4 * a.M + F4 * a.grid[0] * a.n),
    # the act16 norms (kernels/act16.h), one launch each: bf16 out/dout/dres16/qkv (2 bytes), fp32 inp, dres,
    # dres_in, statistics and sums; a backward's column sums through per-block partials (_act16_column_sums)
    "layernorm_act16_fwd_kernel": K("layernorm.cu", "out mean rstd inp weight bias N C P", "memory",
                                    lambda a: 8 * a.N * a.C, lambda a: 6 * a.N * a.C + 8 * a.C + 8 * a.N),
    "layernorm_act16_bwd_kernel": K(
        "layernorm.cu", "dres dres16 dweight dbias dres_in_sum dres_in dout inp weight mean rstd partials "
        "blocks_done N C P", "memory", lambda a: 14 * a.N * a.C,
        lambda a: a.N * a.C * (10 + (0 if a.null("dres16") else 2) + (0 if a.null("dres_in") else 4))
        + F4 * a.C + 8 * a.N
        + _act16_column_sums(a, ["dweight", "dbias"] + ([] if a.null("dres_in") else ["dres_in_sum"]), a.C)),
    "rmsnorm_act16_fwd_kernel": K("rmsnorm.cu", "out rstd inp weight N C eps P", "memory",
                                  lambda a: 4 * a.N * a.C, lambda a: 6 * a.N * a.C + F4 * a.C + F4 * a.N),
    "rmsnorm_act16_bwd_kernel": K(
        "rmsnorm.cu", "dres dres16 dweight dres_in dout inp weight rstd partials blocks_done N C P", "memory",
        lambda a: 10 * a.N * a.C,
        lambda a: a.N * a.C * (10 + (0 if a.null("dres16") else 2) + (0 if a.null("dres_in") else 4))
        + F4 * a.C + F4 * a.N + _act16_column_sums(a, ["dweight"], a.C)),
    # q and k heads normalised, v heads copied: the whole bf16 row read and written
    "qk_rmsnorm_act16_fwd_kernel": K("rmsnorm.cu", "out rstd qkv q_weight k_weight N NH KVH HS eps P", "memory",
                                     lambda a: 4 * a.N * (a.NH + a.KVH) * a.HS,
                                     lambda a: 4 * a.N * (a.NH + 2 * a.KVH) * a.HS + 8 * a.HS
                                     + F4 * a.N * (a.NH + a.KVH)),
    "qk_rmsnorm_act16_bwd_kernel": K(
        "rmsnorm.cu", "dqkv dq_weight dk_weight dout qkv q_weight k_weight rstd partials blocks_done N NH KVH HS P",
        "memory", lambda a: 10 * a.N * (a.NH + a.KVH) * a.HS,
        lambda a: 4 * a.N * (a.NH + 2 * a.KVH) * a.HS + 2 * a.N * (a.NH + a.KVH) * a.HS + 8 * a.HS
        + F4 * a.N * (a.NH + a.KVH) + _act16_column_sums(a, ["dq_weight", "dk_weight"], a.HS)),
    # rope.cu: in place over the q and k heads of BT tokens, BT·(NH+KVH)·HS/2 pairs
    "rope_kernel": K("rope.cu", "qkv positions inv_freq T NH KVH HS BT transpose", "memory",
                     lambda a: 6 * a.BT * (a.NH + a.KVH) * (a.HS // 2),
                     lambda a: 4 * _elem(a.types["qkv"]) * a.BT * (a.NH + a.KVH) * (a.HS // 2) + F4 * a.HS // 2
                     + (0 if a.null("positions") else F4 * a.BT)),
    # cross_entropy.cu: one block per row (grid.x rows); logits read once, dlogits written in place, in their
    # storage (fp32, or bf16 on the act16 path)
    "cross_entropy_rows_kernel": K("cross_entropy.cu", "row_loss row_weight dlogits logits ld targets weights V",
                                   "memory", lambda a: 5 * a.grid[0] * a.V,
                                   lambda a: _elem(a.types["logits"]) * a.grid[0] * a.V
                                   * (1 if a.null("dlogits") else 2) + 24 * a.grid[0]),
    "finish_two_sums_kernel": K("cross_entropy.cu", "sums row_loss row_weight N", "memory",
                                lambda a: 2 * a.N, lambda a: 16 * a.N + 16),
    # lora.cu
    "lora_dropout_kernel": K("lora.cu", "out inp rows index key_p p keep_scale T C N", "memory",
                             lambda a: 2 * a.N * a.C, lambda a: 8 * a.N * a.C + (0 if a.null("index") else 4 * a.N)),
    # attention.cu, CUDA cores (fp32 math; the bf16 instances round q, k, v, dO as they read them; the act16 ones read
    # and write bf16: E bytes per element of q|k|v, dO, O and dqkv, from the recorded type). Per visible pair:
    # forward q·k and p·v (4·HS); dq: q·k, dO·v, ds·k (6·HS); dk/dv: q·k, dO·v, ds·q, p·dO (8·HS). Causal pairs
    # without segments; with segments (seg not null) fewer pairs are visible: an upper bound.
    "attention_fwd_kernel": K(
        "attention.cu", "out lse qkv seg T NH KVH HS", "attention_cuda",
        lambda a: 4 * a.HS * _attn_b(a, a.NH) * a.NH * causal_pairs(a.T),
        lambda a: _attn_b(a, a.NH) * a.T * (_elem(a.types["qkv"]) * (2 * a.NH + 2 * a.KVH) * a.HS + F4 * a.NH)),
    "attention_bwd_delta_kernel": K(
        "attention.cu", "delta dout out B T NH HS", "attention_cuda",
        lambda a: 2 * a.B * a.NH * a.T * a.HS,
        lambda a: a.B * a.NH * a.T * (2 * _elem(a.types["dout"]) * a.HS + F4)),
    "attention_bwd_dq_kernel": K(
        "attention.cu", "dqkv delta dout qkv lse seg T NH KVH HS", "attention_cuda",
        lambda a: 6 * a.HS * _attn_b(a, a.NH) * a.NH * causal_pairs(a.T),
        lambda a: _attn_b(a, a.NH) * a.T * (_elem(a.types["qkv"]) * (3 * a.NH + 2 * a.KVH) * a.HS + 2 * F4 * a.NH)),
    "attention_bwd_dkv_kernel": K(
        "attention.cu", "dqkv delta dout qkv lse seg T NH KVH HS", "attention_cuda",
        lambda a: 8 * a.HS * _attn_b(a, a.KVH) * a.NH * causal_pairs(a.T),
        lambda a: _attn_b(a, a.KVH) * a.T * (_elem(a.types["qkv"]) * (2 * a.NH + 4 * a.KVH) * a.HS
                                             + 2 * F4 * a.NH)),
    # attention_tc.cu, tensor cores on bf16 q|k|v and dO: the fp32 interface's copies (the casts are
    # fp32_to_bf16_kernel lines) or act16's tensors themselves. Outputs fp32 (out, dqkv) or bf16 (out16, dqkv16,
    # act16), the other pointer null (_tc_out). Grid (tiles, heads, B); whole 64x64 tiles on and below the
    # diagonal are computed (tile_pairs): forward S = QKᵀ and O += PV (2 GEMMs), dK/dV: Sᵀ, dPᵀ, dV, dK (4), dQ: S,
    # dP, dQ (3), each 2·64·64·HS per tile pair. HS from the dynamic shared memory (the template argument is not a
    # kernel argument; its bytes past the tiles: kFwdExtraBytes, kDkvExtraBytes, kDqExtraBytes). With segments tiles
    # whose segment ranges do not meet are skipped: an upper bound then.
    "attention_tc_fwd_kernel": K(
        "attention_tc.cu", "out out16 lse qkv seg ranges T NH KVH scale scale_log2", "attention_tc",
        lambda a: 2 * 2 * 64 * 64 * tc_head_size(a.smem, 5, 10496) * a.grid[2] * a.NH * tile_pairs(a.T),
        lambda a: a.grid[2] * a.T * ((2 * (a.NH + 2 * a.KVH) + _tc_out(a, "out") * a.NH)
                                     * tc_head_size(a.smem, 5, 10496) + F4 * a.NH)),
    "attention_tc_bwd_dkv_kernel": K(
        "attention_tc.cu", "dqkv dqkv16 qkv dout lse delta seg ranges T NH KVH scale scale_log2", "attention_tc",
        lambda a: 4 * 2 * 64 * 64 * tc_head_size(a.smem, 6, 9728) * a.grid[2] * a.NH * tile_pairs(a.T),
        lambda a: a.grid[2] * a.T * ((2 * (2 * a.NH + 2 * a.KVH) + 2 * _tc_out(a, "dqkv") * a.KVH)
                                     * tc_head_size(a.smem, 6, 9728) + 2 * F4 * a.NH)),
    "attention_tc_bwd_dq_kernel": K(
        "attention_tc.cu", "dqkv dqkv16 qkv dout lse delta seg ranges T NH KVH scale scale_log2", "attention_tc",
        lambda a: 3 * 2 * 64 * 64 * tc_head_size(a.smem, 6, 8704) * a.grid[2] * a.NH * tile_pairs(a.T),
        lambda a: a.grid[2] * a.T * ((2 * (2 * a.NH + 2 * a.KVH) + _tc_out(a, "dqkv") * a.NH)
                                     * tc_head_size(a.smem, 6, 8704) + 2 * F4 * a.NH)),
    # D = Σ bf16(dO)·O per (b, t, h) row, O fp32 (the fp32 interface) or bf16 (act16)
    "attention_tc_bwd_delta_kernel": K("attention_tc.cu", "delta dout out rows T NH HS", "attention_tc",
                                       lambda a: 2 * a.rows * a.HS,
                                       lambda a: a.rows * ((2 + _elem(a.types["out"])) * a.HS + F4)),
    # kv_cache.cu (generation): kv_append copies n = Tq·KVH·HS floats of the new rows' k and v into the caches
    "kv_append_kernel": K("kv_cache.cu", "k_cache v_cache qkv p NH KVH HS n", "memory",
                          lambda a: 0, lambda a: 4 * F4 * a.n),
    # kv_attention: grid Tq·NH, new token t sees p + t + 1 keys, q·k and w·v per key (4·HS); the cache's
    # p + Tq rows of k and v read once, q read and the output written once
    "kv_attention_kernel": K(
        "kv_cache.cu", "out qkv k_cache v_cache p NH KVH HS scale", "attention_cuda",
        lambda a: 4 * a.HS * a.NH * ((a.grid[0] // a.NH) * a.p + causal_pairs(a.grid[0] // a.NH)),
        lambda a: F4 * ((a.p + a.grid[0] // a.NH) * 2 * a.KVH * a.HS + 2 * a.grid[0] * a.HS)),
    # attention_cp.cu (context parallelism, issue 37): a rank's Tq query rows against Tk gathered keys. Block
    # (b, t, h) of the forward and the dq pass, (b, key j, k/v head) of the dk/dv pass; under the load-balanced
    # layout a query row sees Tk/2 keys on average, and a key is seen by Tq/2 of the rank's rows. Per visible
    # (query, key, head): forward q·k and P·v (4·HS flops), dq pass q·k, dO·v and dS·k (6·HS), dk/dv pass dO·O,
    # q·k, dO·v, dS·q and P·dO (10·HS). Bytes: what must move at least once (each launch's q, dO, O and out
    # rows, the gathered k/v of its rows, lse).
    "cp_fwd_kernel": K("attention_cp.cu", "out lse qkv kv qpos seg_q seg_k Tq Tk NH KVH HS scale", "attention_cuda",
                       lambda a: 4 * a.HS * a.grid[0] * a.Tk // 2,
                       lambda a: F4 * (2 * a.grid[0] * a.HS + a.grid[0]
                                       + a.grid[0] // (a.Tq * a.NH) * a.Tk * 2 * a.KVH * a.HS)),
    "cp_dq_kernel": K("attention_cp.cu", "dqkv dout qkv kv out lse qpos seg_q seg_k Tq Tk NH KVH HS scale",
                      "attention_cuda", lambda a: 6 * a.HS * a.grid[0] * a.Tk // 2,
                      lambda a: F4 * (4 * a.grid[0] * a.HS + a.grid[0]
                                      + a.grid[0] // (a.Tq * a.NH) * a.Tk * 2 * a.KVH * a.HS)),
    "cp_dkv_kernel": K("attention_cp.cu", "dkv dout qkv kv out lse qpos seg_q seg_k Tq Tk NH KVH HS scale",
                       "attention_cuda", lambda a: 10 * a.HS * (a.NH // a.KVH) * a.grid[0] * a.Tq // 2,
                       lambda a: F4 * (a.grid[0] // (a.Tk * a.KVH) * (a.Tq * (3 * a.NH * a.HS + a.NH)
                                                                        + 2 * a.Tk * 2 * a.KVH * a.HS))),
    # gather.cu: context parallelism's k/v moves, n rows of C floats (an index per listed side)
    "copy_strided_rows_kernel": K("gather.cu", "out ldo oidx inp ldi iidx n C", "memory", lambda a: 0,
                                  lambda a: 2 * F4 * a.n * a.C
                                  + F4 * a.n * ((not a.null("oidx")) + (not a.null("iidx")))),
    "attention_tc_segment_ranges_kernel": K("attention_tc.cu", "ranges seg T", "memory",
                                            lambda a: 0, lambda a: F4 * a.grid[1] * a.T + 8 * a.grid[0] * a.grid[1]),
}


# ---- the device's constants ----------------------------------------------------------------------------
def device_for(name):
    """(DEVICES key, note) for a GPU's name as CUDA reports it ("NVIDIA H200", "NVIDIA H100 80GB HBM3"): an H200
    (GH200 included) or an H100 (SXM's constants; a PCIe or NVL card is slower, which the note says); any other
    name gets H100 SXM's constants and a note saying so."""
    if "H200" in name:
        return "H200", ""
    if "H100" in name:
        if "PCIe" in name or "NVL" in name:
            return "H100 SXM", f"{name} is not an SXM card: H100 SXM's constants overstate it"
        return "H100 SXM", ""
    return "H100 SXM", f"no constants for {name!r}: H100 SXM's used"


def use_device(key):
    """Makes DEVICES[key] the device every prediction below is made for."""
    global DEVICE, PEAK_BF16_TFLOPS, PEAK_FP32_TFLOPS, HBM_TBPS
    d = DEVICES[key]
    DEVICE, PEAK_BF16_TFLOPS, PEAK_FP32_TFLOPS, HBM_TBPS = key, d["peak_bf16"], d["peak_fp32"], d["hbm_tbps"]


# ---- costing ------------------------------------------------------------------------------------------
def elem_bytes(t):
    return {"bf16": 2, "fp32": 4}[t]


def roofline_us(flops, bytes_, tflops):
    """(µs, whether the FLOPs rather than the bytes set it) at `tflops` and the usable HBM bandwidth."""
    flop_us, byte_us = flops / (tflops * 1e6), bytes_ / (HBM_TBPS * BANDWIDTH_EFFICIENCY * 1e6)
    return max(flop_us, byte_us), flop_us > byte_us


class Item:
    """One costed operation: the group it is tabled under, its class, FLOPs, bytes, predicted µs (launch
    overhead included), whether FLOPs bound it, and a shape detail for the largest-items list."""

    def __init__(self, group, cls, flops, bytes_, roof, launch_us, detail=""):
        self.group, self.cls, self.flops, self.bytes, self.detail = group, cls, flops, bytes_, detail
        self.us, self.flop_bound = roof[0] + launch_us, roof[1]


def cost_kernel(r):
    name = r["name"]  # as written at the launch, template arguments included
    k = KERNELS.get(name.split("<")[0])
    if k is None:
        raise SystemExit(f"gpu_cost: no formula for kernel {name} (launched at {r['site']}): add it to KERNELS "
                         "in bench/gpu_cost.py, written from the kernel's source")
    if len(k.params) != len(r["args"]):
        raise SystemExit(f"gpu_cost: kernel {name} ({r['site']}) has {len(r['args'])} arguments, KERNELS names "
                         f"{len(k.params)} ({' '.join(k.params)}): its signature changed, update its formula")
    a = Args(k.params, r)
    flops, bytes_ = k.flops(a), k.bytes(a)
    rate = {"memory": PEAK_FP32_TFLOPS, "attention_cuda": ATTN_CUDA_TFLOPS, "attention_tc": ATTN_TC_TFLOPS}[k.cls]
    scalars = " ".join(f"{n}={getattr(a, n)}" for n in k.params if isinstance(getattr(a, n), (int, float))
                       and not isinstance(getattr(a, n), bool) and a.types[n] in ("int", "unsigned long", "long"))
    return Item(name, k.cls, flops, bytes_, roofline_us(flops, bytes_, rate), LAUNCH_US, scalars)


def cost_gemm(r):
    if r["a_type"] != r["b_type"]:
        raise SystemExit(f"gpu_cost: a GEMM with A {r['a_type']} and B {r['b_type']}")
    m, n, k, batch = r["m"], r["n"], r["k"], r["batch"]
    flops = 2 * m * n * k * batch
    # A and B read, D written, C read when beta != 0 (in its own type), the epilogue's vector (a bias read, a
    # bias gradient written: m elements, n for BGRADB) and aux matrix (m·n, written by GELU_AUX*, read by DGELU*).
    bytes_ = batch * (elem_bytes(r["a_type"]) * m * k + elem_bytes(r["b_type"]) * k * n
                      + elem_bytes(r["d_type"]) * m * n
                      + (elem_bytes(r.get("c_type", r["d_type"])) * m * n if r["beta"] != 0 else 0))
    if "bias" in r:
        bytes_ += batch * elem_bytes(r["bias_type"]) * (n if r["epilogue"] == "bgradb" else m)
    if "aux" in r:
        bytes_ += batch * elem_bytes(r["aux_type"]) * m * n
    peak = PEAK_BF16_TFLOPS if r["a_type"] == "bf16" else PEAK_FP32_TFLOPS
    return Item(f"cuBLASLt GEMM, {r['a_type']} inputs", "gemm_" + r["a_type"], flops, bytes_,
                roofline_us(flops, bytes_, peak * GEMM_EFFICIENCY), LAUNCH_US,
                f"m={m} n={n} k={k}" + (f" batch={batch}" if batch > 1 else "") + (" beta=1" if r["beta"] else ""))


def cost_memcpy(r):
    b = r["bytes"]
    if r["kind"] == "DtoD":
        return Item("cudaMemcpyAsync DtoD", "memory", 0, 2 * b, roofline_us(0, 2 * b, 1), LAUNCH_US)
    if r["kind"] == "HtoH":
        return Item("cudaMemcpy HtoH", "host", 0, 0, (0.0, False), 0.0)
    return Item(f"cudaMemcpyAsync {r['kind']}", "host_copy", 0, 0, (b / (PCIE_GBPS * 1e3), False), COPY_LATENCY_US,
                f"{b} bytes")


def cost_memset(r):
    return Item("cudaMemsetAsync", "memory", 0, r["bytes"], roofline_us(0, r["bytes"], 1), LAUNCH_US)


def cost_nccl(r):
    w, bytes_ = r["ranks"], r["count"] * {"fp32": 4, "bf16": 2, "fp16": 2, "fp64": 8, "int64": 8,
                                           "uint64": 8, "int32": 4, "uint32": 4, "int8": 1, "uint8": 1}[r["dtype"]]
    factor = {"ncclAllReduce": 2.0 * (w - 1) / w, "ncclReduceScatter": (w - 1.0), "ncclAllGather": (w - 1.0),
              "ncclBroadcast": 1.0 if w > 1 else 0.0, "ncclReduce": 1.0 if w > 1 else 0.0}[r["call"]]
    return Item(f"{r['call']} ({w} rank{'s' if w > 1 else ''})", "collective", 0, 0,
                (factor * bytes_ / (NVLINK_BUS_GBPS * 1e3), False), LAUNCH_US, f"count={r['count']}")


COST = {"kernel": cost_kernel, "gemm": cost_gemm, "memcpy": cost_memcpy, "memset": cost_memset, "nccl": cost_nccl}


def load(path):
    """(the "step begin" mark or None, the step's operation records) of one record file."""
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    starts = [r for r in lines if r["op"] == "start"]
    if len(starts) != 1:
        raise SystemExit(f"gpu_cost: {path} holds {len(starts)} processes' records (remove it before recording; "
                         "one file per rank: SFTDP_SIM_RECORD=step_%r.jsonl)")
    begin = next((i for i, r in enumerate(lines) if r["op"] == "mark" and r["label"] == "step begin"), None)
    end = next((i for i, r in enumerate(lines) if r["op"] == "mark" and r["label"] == "step end"), None)
    if begin is None or end is None or end < begin:
        return None, [r for r in lines if r["op"] not in ("start", "mark")]
    return lines[begin], [r for r in lines[begin + 1:end] if r["op"] != "mark"]


def cost(records):
    items = []
    for r in records:
        f = COST.get(r["op"])
        if f is None:
            raise SystemExit(f"gpu_cost: no cost for a record of op {r['op']!r}")
        items.append(f(r))
    return items


def class_names():
    return OrderedDict([
        ("gemm_bf16", f"GEMMs, bf16 inputs (tensor cores, {GEMM_EFFICIENCY:.0%} of {PEAK_BF16_TFLOPS:.0f} TFLOP/s)"),
        ("gemm_fp32", f"GEMMs, fp32 inputs (CUDA cores, {GEMM_EFFICIENCY:.0%} of {PEAK_FP32_TFLOPS:.0f} TFLOP/s)"),
        ("attention_tc", f"attention, tensor cores ({ATTN_TC_TFLOPS:.0f} TFLOP/s)"),
        ("attention_cuda", f"attention, CUDA cores ({ATTN_CUDA_TFLOPS:.0f} TFLOP/s)"),
        ("memory", f"memory-bound kernels, memsets, device copies ({BANDWIDTH_EFFICIENCY:.0%} of {HBM_TBPS} TB/s)"),
        ("collective", "NCCL collectives"),
        ("host_copy", "host<->device copies"),
        ("host", "host-only copies"),
    ])


def summarize(mark, items):
    total_us = sum(i.us for i in items)
    flops = mark["train_flops"] if mark else None
    launched = sum(1 for i in items if i.cls not in ("host_copy", "host"))
    return {"device": DEVICE, "predicted_ms": total_us / 1e3, "operations": len(items),
            "launch_overhead_ms": launched * LAUNCH_US / 1e3,
            "model_tflop": flops / 1e12 if flops else None,
            "mfu": flops / (total_us * 1e-6) / (PEAK_BF16_TFLOPS * 1e12) if flops else None,
            "gemm_tflop": sum(i.flops for i in items if i.cls.startswith("gemm")) / 1e12,
            "by_class_ms": {c: sum(i.us for i in items if i.cls == c) / 1e3 for c in class_names()
                            if any(i.cls == c for i in items)}}


def fmt(x, digits=1):
    return f"{x:,.{digits}f}"


def report(title, mark, items, top=8):
    s = summarize(mark, items)
    total = s["predicted_ms"] * 1e3
    out = [f"### {title}", ""]
    if mark:
        out.append(f"{mark['model_name']} ({mark['block']}: L={mark['L']} C={mark['C']} F={mark['F']} V={mark['V']} "
                   f"NH={mark['NH']} KVH={mark['KVH']} HS={mark['HS']}), B={mark['B']}, T={mark['T']}, dtype "
                   f"{mark['dtype']}, {mark['weighted_positions']} of {mark['B'] * mark['T']} positions weighted.")
    out.append(f"Predicted step on an {DEVICE} ({LAUNCH_US:g} µs per launch): **{fmt(s['predicted_ms'], 2)} ms**"
               + (f", MFU **{100 * s['mfu']:.1f}%** ({fmt(s['model_tflop'], 2)} TFLOP of model FLOPs per step, "
                  "bench::train_flops)" if mark else "") +
               f"; {s['operations']} device operations, {fmt(s['launch_overhead_ms'], 2)} ms of it launch overhead.")
    out += ["", "| class | operations | TFLOP | GB moved | predicted ms | share |", "|---|--:|--:|--:|--:|--:|"]
    for c, label in class_names().items():
        sel = [i for i in items if i.cls == c]
        if not sel:
            continue
        us = sum(i.us for i in sel)
        out.append(f"| {label} | {len(sel)} | {fmt(sum(i.flops for i in sel) / 1e12, 3)} | "
                   f"{fmt(sum(i.bytes for i in sel) / 1e9, 2)} | {fmt(us / 1e3, 2)} | {100 * us / total:.1f}% |")
    groups = defaultdict(list)
    for i in items:
        groups[i.group].append(i)
    out += ["", "| kernel / operation | launches | GFLOP | MB moved | predicted µs | share |",
            "|---|--:|--:|--:|--:|--:|"]
    for g, sel in sorted(groups.items(), key=lambda kv: -sum(i.us for i in kv[1])):
        us = sum(i.us for i in sel)
        out.append(f"| {g} | {len(sel)} | {fmt(sum(i.flops for i in sel) / 1e9, 2)} | "
                   f"{fmt(sum(i.bytes for i in sel) / 1e6, 1)} | {fmt(us, 1)} | {100 * us / total:.1f}% |")
    shapes = defaultdict(list)
    for i in items:
        shapes[(i.group, i.detail)].append(i)
    out += ["", f"Largest items (one kernel at one shape, all its launches):", ""]
    for n, ((g, d), sel) in enumerate(sorted(shapes.items(), key=lambda kv: -sum(i.us for i in kv[1]))[:top], 1):
        us = sum(i.us for i in sel)
        bound = "FLOP-bound" if sel[0].flop_bound else "byte-bound"
        out.append(f"{n}. {g}" + (f" ({d})" if d else "") + f": {len(sel)}× → {fmt(us / 1e3, 2)} ms "
                   f"({100 * us / total:.1f}%)" + ("" if sel[0].cls.startswith("host") else f", {bound}"))
    return "\n".join(out) + "\n", s


# ---- a profile of the same step on a GPU, joined with its record ----------------------------------------
HOST_BOUND_GAP_US = 1.0  # an idle gap longer than this while the host had not yet queued the op: host-bound


def load_profile(path):
    """(header, operations, footer) of a profile file (kernels/cuda/profile.cuh): its one window."""
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    heads = [i for i, r in enumerate(lines) if r["op"] == "profile"]
    ends = [i for i, r in enumerate(lines) if r["op"] == "profile_end"]
    if len(heads) != 1 or len(ends) != 1 or ends[0] < heads[0]:
        raise SystemExit(f"gpu_cost: {path} holds {len(heads)} profile windows ({len(ends)} closed): one is expected "
                         "(remove the file before profiling; one file per rank: SFTDP_GPU_PROFILE=prof_%r.jsonl)")
    ops = lines[heads[0] + 1:ends[0]]
    if len(ops) != lines[ends[0]]["ops"]:
        raise SystemExit(f"gpu_cost: {path}: the footer counts {lines[ends[0]]['ops']} operations, the file has "
                         f"{len(ops)}")
    return lines[heads[0]], ops, lines[ends[0]]


def record_key(r):
    """What a record line and a profile line of the same operation share: the op and its name."""
    name = {"kernel": lambda: r["name"], "gemm": lambda: "cublasLtMatmul", "memcpy": lambda: r["kind"],
            "memset": lambda: "cudaMemsetAsync", "nccl": lambda: r["call"]}[r["op"]]()
    return r["op"], name


def join(records, profiled):
    """[(record or None, profile line or None)] in step order: equal (op, name) runs matched in order
    (difflib's longest matching blocks), so a launch only one side has (cuBLASLt finding no fused-bias algorithm
    on the GPU, say: an add_bias_kernel the simulator did not need) stays unmatched instead of shifting the rest."""
    a = [record_key(r) for r in records]
    b = [(p["op"], p["name"]) for p in profiled]
    out, i, j = [], 0, 0
    for block in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        out += [(records[k], None) for k in range(i, block.a)] + [(None, profiled[k]) for k in range(j, block.b)]
        out += [(records[block.a + k], profiled[block.b + k]) for k in range(block.size)]
        i, j = block.a + block.size, block.b + block.size
    return out


class Measured:
    """One profiled operation: its group (as the cost tables group), class, measured µs, the idle gap before it
    (device time since every earlier operation ended, any stream), whether the host queued it late (host-bound),
    and its predicted Item (None when the record has no such line)."""

    def __init__(self, p, item, gap_us, host_bound):
        self.p, self.item, self.us, self.gap_us, self.host_bound = p, item, p["us"], gap_us, host_bound
        self.group = item.group if item else (p["name"] if p["op"] == "kernel" else f"{p['op']} {p['name']}")
        self.cls = item.cls if item else "unrecorded"


def measure(pairs):
    """Measured items of the joined lines, in the profile's order, with their gaps and host-bound flags."""
    out, busy_until = [], 0.0
    for r, p in pairs:
        if p is None:
            continue
        gap = max(0.0, p["start_us"] - busy_until)
        # The device sat idle and the host queued this op only after the device had run out of work.
        host_bound = gap > HOST_BOUND_GAP_US and p["enqueue_us"] >= busy_until - HOST_BOUND_GAP_US
        out.append(Measured(p, cost([r])[0] if r else None, gap, host_bound))
        busy_until = max(busy_until, p["start_us"] + p["us"])
    return out


def rate(x, us, unit):
    return f"{x / (us * 1e-6) / unit:,.1f}" if us > 0 and x else ""


def profile_report(title, head, foot, pairs, top=8):
    """Markdown: the measured step beside the prediction, per class, per kernel, the largest gaps, what did
    not join, and each class's efficiency as measured; and the totals as a dict."""
    ms = measure(pairs)
    busy = sum(m.us for m in ms)
    idle = sum(m.gap_us for m in ms)
    host_idle = sum(m.gap_us for m in ms if m.host_bound)
    matched = [m for m in ms if m.item]
    predicted = sum(m.item.us for m in matched)
    unmatched_records = [r for r, p in pairs if p is None]
    s = {"device_name": head.get("device"), "constants": DEVICE, "operations": len(ms),
         "measured_ms": foot["device_us"] / 1e3, "busy_ms": busy / 1e3, "idle_ms": idle / 1e3,
         "host_bound_idle_ms": host_idle / 1e3, "host_ms": foot["host_us"] / 1e3,
         "predicted_ms": predicted / 1e3 if matched else None, "joined": len(matched),
         "unmatched_profile": len(ms) - len(matched), "unmatched_record": len(unmatched_records)}
    out = [f"### {title}", ""]
    out.append(f"Profiled on **{head.get('device')}** ({head.get('sms')} SMs), predicted with {DEVICE}'s constants."
               + (f" Warm-up steps before it: {', '.join(f'{x:.1f}' for x in head.get('warmup_ms', []))} ms."
                  if head.get("warmup_ms") else ""))
    out.append(f"Step on the device: **{s['measured_ms']:.2f} ms** from the window's start to the last operation's "
               f"end ({len(ms)} operations: busy {busy / 1e3:.2f} ms, idle {idle / 1e3:.2f} ms, of it "
               f"{host_idle / 1e3:.2f} ms waiting for the host); the host queued it in {s['host_ms']:.2f} ms."
               + (f" Predicted for the joined operations: {predicted / 1e3:.2f} ms (busy/predicted "
                  f"{busy / predicted:.2f})." if matched and predicted else ""))
    if s["unmatched_profile"] or s["unmatched_record"]:
        out.append(f"Not joined: {s['unmatched_profile']} profiled operation(s) without a record line, "
                   f"{s['unmatched_record']} record line(s) not profiled.")
    out += ["", "| class | operations | measured ms | predicted ms | measured / predicted | achieved TB/s | "
            "achieved TFLOP/s |", "|---|--:|--:|--:|--:|--:|--:|"]
    labels = dict(class_names(), unrecorded="operations the record does not have")
    for c, label in labels.items():
        sel = [m for m in ms if m.cls == c]
        if not sel:
            continue
        mus = sum(m.us for m in sel)
        pus = sum(m.item.us for m in sel if m.item)
        b = sum(m.item.bytes for m in sel if m.item)
        f = sum(m.item.flops for m in sel if m.item)
        out.append(f"| {label} | {len(sel)} | {mus / 1e3:.3f} | {pus / 1e3:.3f} | "
                   f"{mus / pus if pus else float('nan'):.2f} | {rate(b, mus, 1e12)} | {rate(f, mus, 1e12)} |")
    groups = defaultdict(list)
    for m in ms:
        groups[m.group].append(m)
    out += ["", "| kernel / operation | launches | measured µs | predicted µs | measured / predicted | GB/s | "
            "TFLOP/s | idle before, µs | host-bound |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for g, sel in sorted(groups.items(), key=lambda kv: -sum(m.us for m in kv[1])):
        mus = sum(m.us for m in sel)
        pus = sum(m.item.us for m in sel if m.item)
        b = sum(m.item.bytes for m in sel if m.item)
        f = sum(m.item.flops for m in sel if m.item)
        out.append(f"| {g} | {len(sel)} | {mus:,.1f} | {pus:,.1f} | {mus / pus if pus else float('nan'):.2f} | "
                   f"{rate(b, mus, 1e9)} | {rate(f, mus, 1e12)} | {sum(m.gap_us for m in sel):,.1f} | "
                   f"{sum(m.host_bound for m in sel)} |")
    out += ["", "Largest idle gaps (the operation after the gap):", ""]
    for n, m in enumerate(sorted(ms, key=lambda m: -m.gap_us)[:top], 1):
        if m.gap_us <= 0:
            break
        out.append(f"{n}. {m.gap_us:,.1f} µs before {m.group} ({m.p['site']}, operation {m.p['i']})"
                   + (": the host queued it late" if m.host_bound else ""))
    out += ["", "Efficiency as measured (what each class's constant would be for the prediction to match):", ""]
    for c, const, peak in (("memory", "BANDWIDTH_EFFICIENCY", HBM_TBPS * 1e12),
                           ("gemm_bf16", "GEMM_EFFICIENCY (bf16)", PEAK_BF16_TFLOPS * 1e12),
                           ("gemm_fp32", "GEMM_EFFICIENCY (fp32)", PEAK_FP32_TFLOPS * 1e12),
                           ("attention_tc", "ATTN_TC_TFLOPS", 1e12), ("attention_cuda", "ATTN_CUDA_TFLOPS", 1e12)):
        sel = [m for m in matched if m.cls == c]
        mus = sum(max(m.us, 1e-3) for m in sel)
        amount = sum((m.item.bytes if c == "memory" else m.item.flops) for m in sel)
        if sel and amount:
            value = amount / (mus * 1e-6) / peak
            s[f"measured_{c}"] = value
            out.append(f"- {const}: {value:.3g}" + (f" of {peak / 1e12:g} TB/s" if c == "memory" else
                                                    "" if c.startswith("attention") else f" of {peak / 1e12:g} TFLOP/s")
                       + f" ({len(sel)} operations)")
    short = sorted(m.us for m in ms if m.p["op"] == "kernel")
    if short:
        s["shortest_kernel_us"] = short[0]
        out.append(f"- the shortest kernel took {short[0]:.1f} µs; the median idle gap between operations "
                   f"{sorted(m.gap_us for m in ms)[len(ms) // 2]:.1f} µs (LAUNCH_US is {LAUNCH_US:g})")
    return "\n".join(out) + "\n", s


def write_ops_csv(path, pairs):
    """Every joined line: index, op, name, site, measured and predicted µs, gap, host-bound, bytes, FLOPs."""
    ms = {id(m.p): m for m in measure(pairs)}
    with open(path, "w") as f:
        f.write("i,op,name,site,measured_us,predicted_us,gap_us,host_bound,bytes,flops\n")
        for r, p in pairs:
            m = ms.get(id(p)) if p else None
            item = m.item if m else (cost([r])[0] if r else None)
            name = (p["name"] if p else record_key(r)[1]).replace('"', "'")
            f.write(",".join(str(x) for x in (
                p["i"] if p else "", p["op"] if p else r["op"], f'"{name}"', p["site"] if p else r.get("site", ""),
                f"{m.us:.3f}" if m else "", f"{item.us:.3f}" if item else "", f"{m.gap_us:.3f}" if m else "",
                int(m.host_bound) if m else "", item.bytes if item else "", item.flops if item else "")) + "\n")


# ---- recording ----------------------------------------------------------------------------------------
def default_build():
    """$SFTDP_BUILD_DIR, else the repository's build-sim-b or build-sim that has the recorder."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    candidates = [os.environ.get("SFTDP_BUILD_DIR")] + [os.path.join(root, d) for d in ("build-sim-b", "build-sim")]
    for d in candidates:
        if d and os.path.exists(os.path.join(d, "bench", "gpu_step_record")):
            return d
    return os.environ.get("SFTDP_BUILD_DIR") or os.path.join(root, "build-sim")


def record_step(build, overrides, path, real=False, extra_env=None, warmup=0):
    """Runs bench/gpu_step_record with `overrides` (a list of key=value), after `warmup` steps it does not record,
    into a fresh record at `path`."""
    exe = os.path.join(build, "bench", "gpu_step_record")
    if not os.path.exists(exe):
        raise SystemExit(f"gpu_cost: {exe} not found: build it in a simulator build "
                         "(-DSFTDP_CUDA_SIM=ON, target gpu_step_record)")
    if os.path.exists(path):
        os.remove(path)
    env = dict(os.environ, SFTDP_SIM_RECORD=path, SFTDP_SIM_DEVICE_MEMORY="80G",  # an H100's 80 GB
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **(extra_env or {}))
    env["SFTDP_SIM_RECORD_ONLY"] = "0" if real else "1"
    p = subprocess.run([exe] + (["--warmup", str(warmup)] if warmup else []) + list(overrides), env=env,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"gpu_cost: {exe} {' '.join(overrides)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return path


def main(argv=None):
    global LAUNCH_US, GEMM_EFFICIENCY, BANDWIDTH_EFFICIENCY
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("records", nargs="*", help="record files to cost (default: record the default steps)")
    ap.add_argument("--step", action="append", help="key=value ... of a step to record (repeatable)")
    ap.add_argument("--build", default=None, help="simulator build with bench/gpu_step_record")
    ap.add_argument("--keep", default=None, help="directory to keep the records in")
    ap.add_argument("--real", action="store_true", help="run the kernels while recording (slow)")
    ap.add_argument("--json", action="store_true", help="print the totals as JSON")
    ap.add_argument("--top", type=int, default=8, help="largest items listed per step")
    ap.add_argument("--launch-us", type=float, help=f"per-operation overhead, µs (default {LAUNCH_US})")
    ap.add_argument("--gemm-efficiency", type=float, help=f"of the GEMM peak (default {GEMM_EFFICIENCY})")
    ap.add_argument("--bandwidth-efficiency", type=float, help=f"of HBM (default {BANDWIDTH_EFFICIENCY})")
    ap.add_argument("--device", choices=[k.split()[0].lower() for k in DEVICES],
                    help="the device predicted for (default: H100 SXM; with --profile: the profiled one's)")
    ap.add_argument("--profile", help="a profile of the step on a GPU (SFTDP_GPU_PROFILE) to join with its record")
    ap.add_argument("--record", help="with --profile: the step's record (default: recorded now from the profile's "
                                     "overrides)")
    ap.add_argument("--no-record", action="store_true", help="with --profile: the measured tables alone")
    ap.add_argument("--ops-csv", help="with --profile: write every joined line to this CSV file")
    args = ap.parse_args(argv)
    LAUNCH_US = LAUNCH_US if args.launch_us is None else args.launch_us
    GEMM_EFFICIENCY = GEMM_EFFICIENCY if args.gemm_efficiency is None else args.gemm_efficiency
    BANDWIDTH_EFFICIENCY = BANDWIDTH_EFFICIENCY if args.bandwidth_efficiency is None else args.bandwidth_efficiency
    if args.device:
        use_device(next(k for k in DEVICES if k.split()[0].lower() == args.device))
    if args.profile:
        return main_profile(args)
    paths = list(args.records)
    if not paths:
        build = args.build or default_build()
        out = args.keep or tempfile.mkdtemp(prefix="gpu_cost_")
        os.makedirs(out, exist_ok=True)
        for n, step in enumerate(args.step or DEFAULT_STEPS):
            paths.append(record_step(build, step.split(), os.path.join(out, f"step_{n}.jsonl"), real=args.real))
    results = []
    for path in paths:
        mark, records = load(path)
        items = cost(records)
        title = (f"{mark['model_name']}, B={mark['B']}, T={mark['T']}, {mark['dtype']}" if mark
                 else os.path.basename(path))
        text, s = report(title, mark, items, args.top)
        results.append(dict(s, record=path, title=title))
        if not args.json:
            print(text)
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


def main_profile(args):
    """--profile: the measured step joined with its record (made now if not given) and the prediction."""
    head, profiled, foot = load_profile(args.profile)
    key, note = device_for(head.get("device", ""))
    if not args.device:
        use_device(key)
    records = []
    if not args.no_record:
        path = args.record
        if not path:
            out = args.keep or tempfile.mkdtemp(prefix="gpu_cost_")
            os.makedirs(out, exist_ok=True)
            path = record_step(args.build or default_build(), head["overrides"], os.path.join(out, "profiled.jsonl"),
                               warmup=len(head.get("warmup_ms", [])))
        mark, records = load(path)
        if mark and any(mark.get(k) != head.get(k) for k in ("model_name", "B", "T", "dtype", "remat")):
            raise SystemExit(f"gpu_cost: the record {path} is of another step than the profile {args.profile}")
    pairs = join(records, profiled)
    title = f"{head.get('model_name')}, B={head.get('B')}, T={head.get('T')}, {head.get('dtype')} (profiled)"
    text, s = profile_report(title, head, foot, pairs, args.top)
    if note:
        text = text.replace("\n", f"\n\nNote: {note}.\n", 1)
        s["note"] = note
    if args.ops_csv:
        write_ops_csv(args.ops_csv, pairs)
    print(json.dumps([dict(s, profile=args.profile, title=title)], indent=1) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
