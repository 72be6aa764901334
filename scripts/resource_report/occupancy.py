"""scripts/resource_report/occupancy.py — the warps per SM a kernel allows, as CUDA's occupancy calculator
(cuda_occupancy.h) computes it for an H100 SXM (compute capability 9.0)."""

# ---- the H100 SXM (compute capability 9.0) as CUDA's occupancy calculator models it ------------------
SM90 = dict(
    regs_per_sm=65536,
    regs_per_block=65536,
    reg_granularity=256,  # registers are allocated per warp, in units of 256
    max_regs_per_thread=255,
    sub_partitions=4,  # the register file is split in 4; a warp's registers come from one part
    max_warps_per_sm=64,
    max_blocks_per_sm=32,
    smem_per_sm=228 * 1024,  # the largest carveout
    max_smem_per_block=227 * 1024,
    reserved_smem_per_block=1024,
    smem_granularity=128,
    max_threads_per_block=1024,
)


def occupancy(regs, smem_static, block=None, smem_dynamic=0, gpu=SM90):
    """(warps per SM, limiting resources): CUDA's occupancy calculator for one kernel. Without a block
    size, the warps registers alone allow."""
    def round_up(x, g):
        return (x + g - 1) // g * g
    regs = max(regs or 0, 1)
    regs_per_warp = round_up(regs * 32, gpu["reg_granularity"])
    warps_by_regs = gpu["regs_per_sm"] // gpu["sub_partitions"] // regs_per_warp * gpu["sub_partitions"]
    if regs > gpu["max_regs_per_thread"]:
        warps_by_regs = 0
    if block is None:
        w = min(warps_by_regs, gpu["max_warps_per_sm"])
        return w, ["registers" if warps_by_regs < gpu["max_warps_per_sm"] else "warps"]
    warps = -(-block // 32)
    limits = {}
    limits["warps"] = gpu["max_warps_per_sm"] // warps if block <= gpu["max_threads_per_block"] else 0
    limits["blocks"] = gpu["max_blocks_per_sm"]
    fits_regs = (regs_per_warp * round_up(warps, gpu["sub_partitions"]) <= gpu["regs_per_block"])
    limits["registers"] = warps_by_regs // warps if fits_regs else 0
    smem = (smem_static or 0) + (smem_dynamic or 0)
    per_block = round_up(smem + gpu["reserved_smem_per_block"], gpu["smem_granularity"])
    limits["shared memory"] = gpu["smem_per_sm"] // per_block if smem <= gpu["max_smem_per_block"] else 0
    blocks = min(limits.values())
    return blocks * warps, [k for k, v in limits.items() if v == blocks]
