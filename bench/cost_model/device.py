"""bench/cost_model/device.py — the constants every prediction is made with: the device (NVIDIA's datasheets) and
the model's efficiencies and per-operation overheads. bench/gpu_cost.py's --device, --launch-us, --gemm-efficiency
and --bandwidth-efficiency set them for a run; read them as device.NAME (not copied by `from ... import`), so that
what use_device() or a flag set is what every later prediction uses."""

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
ATTN_CUDA_TFLOPS = 17.0    # today's CUDA-core attention kernels (attention/cuda_cores.cu)
LAUNCH_US = 2.5            # per device operation: launch and drain on one stream
COPY_LATENCY_US = 10.0     # per host<->device copy (a synchronising cudaMemcpyAsync of pageable memory)
PCIE_GBPS = 20.0           # pageable host<->device copies
NVLINK_BUS_GBPS = 360.0    # NCCL ring allreduce bus bandwidth between GPUs of one node (ranks > 1)


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
