"""bench/cost_model/kernels.py — one formula per __global__ function: its parameters (in order, as in its source;
tests/integration/test_gpu_cost_cuda.py checks them against the source), its class, and the FLOPs and fewest bytes
of one launch from its scalar arguments and launch shape."""

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
    (fwd_smem / dkv_smem / dq_smem of kernels/cuda/attention/tensor_cores.cu; the kernels' HS is a template argument)."""
    hs = (smem - extra) / (per_row_tiles * 64 * 2) - 8
    if hs != int(hs) or int(hs) % 16 or not 16 <= hs <= 128:
        raise SystemExit(f"gpu_cost: attention_tc shared memory {smem} gives head size {hs}: "
                         "its formula no longer matches attention/tensor_cores.cu's *_smem()")
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


def _tc_pairs(a):
    """(query tile, key tile) pairs an attention_tc launch visits per (b, h): the causal triangle of the whole rows, or
    with context parallelism (Tq < Tk) this rank's share of it: the balanced split (model/context_split.h) gives each
    of the Tk/Tq ranks of the group the same causal work, within a tile per chunk."""
    return tile_pairs(a.Tk) * a.Tq // a.Tk


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
    # attention/cuda_cores.cu, CUDA cores (fp32 math; the bf16 instances round q, k, v, dO as they read them; the act16 ones read
    # and write bf16: E bytes per element of q|k|v, dO, O and dqkv, from the recorded type). Per visible pair:
    # forward q·k and p·v (4·HS); dq: q·k, dO·v, ds·k (6·HS); dk/dv: q·k, dO·v, ds·q, p·dO (8·HS). Causal pairs
    # without segments; with segments (seg not null) fewer pairs are visible: an upper bound.
    "attention_fwd_kernel": K(
        "attention/cuda_cores.cu", "out lse qkv seg T NH KVH HS", "attention_cuda",
        lambda a: 4 * a.HS * _attn_b(a, a.NH) * a.NH * causal_pairs(a.T),
        lambda a: _attn_b(a, a.NH) * a.T * (_elem(a.types["qkv"]) * (2 * a.NH + 2 * a.KVH) * a.HS + F4 * a.NH)),
    "attention_bwd_delta_kernel": K(
        "attention/cuda_cores.cu", "delta dout out B T NH HS", "attention_cuda",
        lambda a: 2 * a.B * a.NH * a.T * a.HS,
        lambda a: a.B * a.NH * a.T * (2 * _elem(a.types["dout"]) * a.HS + F4)),
    "attention_bwd_dq_kernel": K(
        "attention/cuda_cores.cu", "dqkv delta dout qkv lse seg T NH KVH HS", "attention_cuda",
        lambda a: 6 * a.HS * _attn_b(a, a.NH) * a.NH * causal_pairs(a.T),
        lambda a: _attn_b(a, a.NH) * a.T * (_elem(a.types["qkv"]) * (3 * a.NH + 2 * a.KVH) * a.HS + 2 * F4 * a.NH)),
    "attention_bwd_dkv_kernel": K(
        "attention/cuda_cores.cu", "dqkv delta dout qkv lse seg T NH KVH HS", "attention_cuda",
        lambda a: 8 * a.HS * _attn_b(a, a.KVH) * a.NH * causal_pairs(a.T),
        lambda a: _attn_b(a, a.KVH) * a.T * (_elem(a.types["qkv"]) * (2 * a.NH + 4 * a.KVH) * a.HS
                                             + 2 * F4 * a.NH)),
    # attention/tensor_cores.cu (kernels in tc_forward.cuh, tc_backward.cuh), tensor cores on bf16 q|k|v and dO: the fp32 interface's copies (the casts are
    # fp32_to_bf16_kernel lines) or act16's tensors themselves. Outputs fp32 (out, dqkv, dkv) or bf16 (out16, dqkv16,
    # dkv16, act16), the other pointer null (_tc_out). Grid (tiles, heads, B); whole 64x64 tiles on and below the
    # diagonal are computed (_tc_pairs): forward S = QKᵀ and O += PV (2 GEMMs), dK/dV: Sᵀ, dPᵀ, dV, dK (4), dQ: S,
    # dP, dQ (3), each 2·64·64·HS per tile pair. Tq query rows against Tk key rows: the whole rows (Tq = Tk = T) or
    # context parallelism (a rank's Tq rows against the group's Tk gathered keys and values, laid out in `lay`). HS
    # from the dynamic shared memory (the template argument is not a kernel argument; its bytes past the tiles:
    # kFwdExtraBytes, kDkvExtraBytes, kDqExtraBytes). With segments tiles whose segment ranges do not meet are
    # skipped: an upper bound then.
    "attention_tc_fwd_kernel": K(
        "attention/tc_forward.cuh", "out out16 lse qkv lay Tq Tk NH KVH scale scale_log2", "attention_tc",
        lambda a: 2 * 2 * 64 * 64 * tc_head_size(a.smem, 5, 10496) * a.grid[2] * a.NH * _tc_pairs(a),
        lambda a: a.grid[2] * (a.Tq * ((2 + _tc_out(a, "out")) * a.NH * tc_head_size(a.smem, 5, 10496) + F4 * a.NH)
                               + a.Tk * 2 * 2 * a.KVH * tc_head_size(a.smem, 5, 10496))),
    "attention_tc_bwd_dkv_kernel": K(
        "attention/tc_backward.cuh", "dkv dkv16 qkv dout lse delta lay Tq Tk NH KVH scale scale_log2", "attention_tc",
        lambda a: 4 * 2 * 64 * 64 * tc_head_size(a.smem, 6, 10240) * a.grid[2] * a.NH * _tc_pairs(a),
        lambda a: a.grid[2] * (a.Tq * (2 * 2 * a.NH * tc_head_size(a.smem, 6, 10240) + 2 * F4 * a.NH)
                               + a.Tk * (2 + _tc_out(a, "dkv")) * 2 * a.KVH * tc_head_size(a.smem, 6, 10240))),
    "attention_tc_bwd_dq_kernel": K(
        "attention/tc_backward.cuh", "dqkv dqkv16 qkv dout lse delta lay Tq Tk NH KVH scale scale_log2", "attention_tc",
        lambda a: 3 * 2 * 64 * 64 * tc_head_size(a.smem, 6, 8704) * a.grid[2] * a.NH * _tc_pairs(a),
        lambda a: a.grid[2] * (a.Tq * ((2 * 2 + _tc_out(a, "dqkv")) * a.NH * tc_head_size(a.smem, 6, 8704) + 2 * F4 * a.NH)
                               + a.Tk * 2 * 2 * a.KVH * tc_head_size(a.smem, 6, 8704))),
    # D = Σ bf16(dO)·O per (b, t, h) row, O fp32 (the fp32 interface) or bf16 (act16)
    "attention_tc_bwd_delta_kernel": K("attention/tc_backward.cuh", "delta dout out rows T NH HS", "attention_tc",
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
    # attention/context_parallel.cu (context parallelism, issue 37): a rank's Tq query rows against Tk gathered keys. Block
    # (b, t, h) of the forward and the dq pass, (b, key j, k/v head) of the dk/dv pass; under the load-balanced
    # layout a query row sees Tk/2 keys on average, and a key is seen by Tq/2 of the rank's rows. Per visible
    # (query, key, head): forward q·k and P·v (4·HS flops), dq pass q·k, dO·v and dS·k (6·HS), dk/dv pass dO·O,
    # q·k, dO·v, dS·q and P·dO (10·HS). Bytes: what must move at least once (each launch's q, dO, O and out
    # rows, the gathered k/v of its rows, lse).
    "cp_fwd_kernel": K("attention/context_parallel.cu", "out lse qkv kv qpos seg_q seg_k Tq Tk NH KVH HS scale", "attention_cuda",
                       lambda a: 4 * a.HS * a.grid[0] * a.Tk // 2,
                       lambda a: F4 * (2 * a.grid[0] * a.HS + a.grid[0]
                                       + a.grid[0] // (a.Tq * a.NH) * a.Tk * 2 * a.KVH * a.HS)),
    "cp_dq_kernel": K("attention/context_parallel.cu", "dqkv dout qkv kv out lse qpos seg_q seg_k Tq Tk NH KVH HS scale",
                      "attention_cuda", lambda a: 6 * a.HS * a.grid[0] * a.Tk // 2,
                      lambda a: F4 * (4 * a.grid[0] * a.HS + a.grid[0]
                                      + a.grid[0] // (a.Tq * a.NH) * a.Tk * 2 * a.KVH * a.HS)),
    "cp_dkv_kernel": K("attention/context_parallel.cu", "dkv dout qkv kv out lse qpos seg_q seg_k Tq Tk NH KVH HS scale",
                       "attention_cuda", lambda a: 10 * a.HS * (a.NH // a.KVH) * a.grid[0] * a.Tq // 2,
                       lambda a: F4 * (a.grid[0] // (a.Tk * a.KVH) * (a.Tq * (3 * a.NH * a.HS + a.NH)
                                                                        + 2 * a.Tk * 2 * a.KVH * a.HS))),
    # gather.cu: context parallelism's k/v moves, n rows of C floats or bf16 (act16) (an index per listed side)
    "copy_strided_rows_kernel": K("gather.cu", "out ldo oidx inp ldi iidx n C", "memory", lambda a: 0,
                                  lambda a: 2 * _elem(a.types["out"]) * a.n * a.C
                                  + F4 * a.n * ((not a.null("oidx")) + (not a.null("iidx")))),
    "attention_tc_segment_ranges_kernel": K("attention/tc_forward.cuh", "ranges seg T", "memory",
                                            lambda a: 0, lambda a: F4 * a.grid[1] * a.T + 8 * a.grid[0] * a.grid[1]),
}
