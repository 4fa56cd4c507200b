"""The training sweeps' files (bench kinds ddp, fsdp, strategy): results.csv, one row per configuration, and
samples.csv, one per timed step. Global rates (samples_per_s, tokens_per_s) count all ranks; the *_per_rank ones one."""

from commbench.schema import gpu
from commbench.schema.column import Column, without
from commbench.schema.common import BACKEND, BENCH, DEVICE, N_WRONG, STAMP, WORLD_SIZE

CONFIG_INDEX = Column("config_index", "int", "The configuration's place in the sweep.")
CONFIG = Column("config", "str", "The configuration's label: strategy, implementation and the settings that apply.")
STRATEGY = Column("strategy", "str", "The sharding strategy: ddp, zero1, zero2, zero3 or hsdp.")
IMPL = Column("impl", "str", "How the strategy is implemented: ddp, zero1, zero2, fsdp2 or fsdp1.")
MODEL_KIND = Column("model_kind", "str", "The synthetic model: transformer or mlp.")
PARAMS = Column("params", "int", "The model's parameters.")
LAYERS = Column("layers", "int", "The model's blocks.")
HIDDEN = Column("hidden", "int", "The model's hidden size.")
HEADS = Column("heads", "int", "Attention heads.")
SEQ_LEN = Column("seq_len", "int", "Tokens per sample.")
MICRO_BATCH = Column("micro_batch", "int", "Samples per rank per micro-batch.")
ACCUM_STEPS = Column("accum_steps", "int", "Micro-batches per optimizer step.")
GLOBAL_BATCH = Column("global_batch", "int", "Samples per optimizer step over all ranks.")

# the configuration's settings (training/spec.py TrainConfig, same names); empty where a setting does not apply
BUCKET_CAP_MB = Column("bucket_cap_mb", "str", "DDP's bucket cap in MiB, or default (DDP's own buckets).", unit="MiB")
FIRST_BUCKET_MB = Column("first_bucket_mb", "float", "DDP's first bucket's cap.", unit="MiB")
GRADIENT_AS_BUCKET_VIEW = Column("gradient_as_bucket_view", "bool", "DDP: gradients as views into the buckets.")
STATIC_GRAPH = Column("static_graph", "bool", "DDP's static_graph.")
COMM_HOOK = Column("comm_hook", "str", "DDP's communication hook (bf16, fp16, powersgd).")
RESHARD_AFTER_FORWARD = Column("reshard_after_forward", "str", "FSDP: True, False, or the mesh size it reshards to.")
FORWARD_PREFETCH = Column("forward_prefetch", "int", "FSDP: blocks gathered ahead in forward.")
BACKWARD_PREFETCH = Column("backward_prefetch", "str", "FSDP: backward prefetch (default, 1, 2; FSDP1 pre, post, "
                           "none).")
LIMIT_ALL_GATHERS = Column("limit_all_gathers", "bool", "FSDP1's limit_all_gathers.")
WRAP = Column("wrap", "str", "FSDP units: block (one per block) or model.")
MIXED_PRECISION = Column("mixed_precision", "str", "fp32, tf32 or bf16 (empty reads as fp32).")
MASTER_WEIGHTS = Column("master_weights", "bool", "bf16 parameters with an fp32 master copy in the optimizer.")
SHARD_GROUP = Column("shard_group", "int", "HSDP: ranks per shard group.")
COMPILE = Column("compile", "bool", "DDP under torch.compile.")
OVERLAP_WITH_DDP = Column("overlap_with_ddp", "bool", "ZeRO-1's optimizer step run from DDP's comm hook.")
REDUCE_DTYPE = Column("reduce_dtype", "str", "FSDP: the dtype gradients are reduced in (empty reads as fp32).")
CPU_OFFLOAD = Column("cpu_offload", "bool", "FSDP: sharded state kept in host memory.")
ACTIVATION_CHECKPOINTING = Column("activation_checkpointing", "str", "FSDP: none or full.")
BLOCKS_PER_UNIT = Column("blocks_per_unit", "int", "FSDP2: consecutive blocks per fully_shard unit.")
ACCUM_SYNC = Column("accum_sync", "str", "FSDP under accumulation: which micro-batches reduce gradients.")
SETTING_COLUMNS = (BUCKET_CAP_MB, FIRST_BUCKET_MB, GRADIENT_AS_BUCKET_VIEW, STATIC_GRAPH, COMM_HOOK,
                   RESHARD_AFTER_FORWARD, FORWARD_PREFETCH, BACKWARD_PREFETCH, LIMIT_ALL_GATHERS, WRAP, MIXED_PRECISION,
                   MASTER_WEIGHTS, SHARD_GROUP, COMPILE, OVERLAP_WITH_DDP, REDUCE_DTYPE, CPU_OFFLOAD,
                   ACTIVATION_CHECKPOINTING, BLOCKS_PER_UNIT, ACCUM_SYNC)
"""Every TrainConfig setting but accum_steps (which stands with the batch columns), in its field order."""

STEPS = Column("steps", "int", "Timed optimizer steps.")
WARMUP_STEPS = Column("warmup_steps", "int", "Untimed steps first.")
STEP_TIME_MS_P50 = Column("step_time_ms_p50", "float", "Median step time (each step the slowest rank's).", unit="ms")
STEP_TIME_MS_P95 = Column("step_time_ms_p95", "float", "95th percentile of the step time.", unit="ms")
STEP_TIME_MS_MIN = Column("step_time_ms_min", "float", "Fastest step.", unit="ms")
STEP_TIME_MS_MEAN = Column("step_time_ms_mean", "float", "Mean step time.", unit="ms")
STEP_TIME_MS_CI_LO = Column("step_time_ms_ci_lo", "float", "Lower end of the 95 % CI of the median step time.",
                            unit="ms")
STEP_TIME_MS_CI_HI = Column("step_time_ms_ci_hi", "float", "Upper end of the 95 % CI of the median step time.",
                            unit="ms")
SAMPLES_PER_S = Column("samples_per_s", "float", "Samples per second over all ranks.", unit="samples/s")
TOKENS_PER_S = Column("tokens_per_s", "float", "Tokens per second over all ranks.", unit="tokens/s")
STEP_TIME_MS_NOSYNC_P50 = Column("step_time_ms_nosync_p50", "float", "DDP: median step time without gradient sync "
                                 "(no_sync), from the paired steps.", unit="ms")
EXPOSED_COMM_MS_NOSYNC = Column("exposed_comm_ms_nosync", "float", "DDP: median of the paired differences with and "
                                "without sync: the time the sync adds.", unit="ms")
COMM_MS = Column("comm_ms", "float", "Communication time per step from the trace (median over ranks).", unit="ms")
EXPOSED_COMM_MS = Column("exposed_comm_ms", "float", "Communication not overlapped with compute, from the trace "
                         "(median over ranks).", unit="ms")
OVERLAP_PCT = Column("overlap_pct", "float", "Share of the traced communication hidden under compute.", unit="%")
COMM_CALLS = Column("comm_calls", "float", "Communication calls per step in the trace.")
COMM_MSG_ELEMS = Column("comm_msg_elems", "float", "Elements the traced calls moved per step.")
COMM_MSG_ELEMS_PREDICTED = Column("comm_msg_elems_predicted", "int", "Elements the strategy's collectives move per "
                                  "step, predicted.")
COMM_BYTES_PER_RANK_PREDICTED = Column("comm_bytes_per_rank_predicted", "float", "Bytes each rank sends per step, "
                                       "predicted.", unit="bytes")
BUCKET_COUNT = Column("bucket_count", "int", "DDP's buckets after the rebuild.")
BUCKET_SIZES_BYTES = Column("bucket_sizes_bytes", "str", "DDP's bucket sizes, ;-separated.", unit="bytes")
DDP_BACKWARD_COMM_MS = Column("ddp_backward_comm_ms", "float", "DDP's own average backward communication time.",
                              unit="ms")
DDP_COMM_OVERLAP_MS = Column("ddp_comm_overlap_ms", "float", "DDP's own average compute-communication overlap.",
                             unit="ms")
PEAK_MEM_BYTES = Column("peak_mem_bytes", "int", "Peak memory allocated during the timed steps (the largest rank).",
                        unit="bytes")
PEAK_MEM_RESERVED_BYTES = Column("peak_mem_reserved_bytes", "int", "Peak memory the allocator reserved (the largest "
                                 "rank).", unit="bytes")
MEM_CARRYOVER_BYTES = Column("mem_carryover_bytes", "int", "Memory left over from earlier configurations when this "
                             "one started (the largest rank).", unit="bytes")
MEMORY_BUDGET_BYTES = Column("memory_budget_bytes", "float", "Peak memory per rank that counts as fitting.",
                             unit="bytes")
FITS = Column("fits", "bool", "Whether peak_mem_bytes is within memory_budget_bytes.")
MODEL_STATE_BYTES = Column("model_state_bytes", "int", "Parameters, gradients and optimizer state held (the largest "
                           "rank).", unit="bytes")
MODEL_PARAM_BYTES = Column("model_param_bytes", "int", "Parameter bytes of that rank.", unit="bytes")
MODEL_GRAD_BYTES = Column("model_grad_bytes", "int", "Gradient bytes of that rank.", unit="bytes")
MODEL_OPTIM_BYTES = Column("model_optim_bytes", "int", "Optimizer state bytes of that rank.", unit="bytes")
OPTIM_SCALAR_BYTES = Column("optim_scalar_bytes", "int", "Of those, the optimizer's scalars (step counters).",
                            unit="bytes")
MODEL_STATE_BYTES_PREDICTED = Column("model_state_bytes_predicted", "int", "That rank's model state as the shard "
                                     "layout predicts it.", unit="bytes")
MODEL_STATE_EXACT_RANKS = Column("model_state_exact_ranks", "int", "Ranks whose measured state equals the "
                                 "prediction.")
MODEL_STATE_FORMULA = Column("model_state_formula", "str", "The textbook formula the state is compared with.")
MODEL_STATE_BYTES_FORMULA = Column("model_state_bytes_formula", "float", "The model state per rank by that formula.",
                                   unit="bytes")
MODEL_STATE_HOST_BYTES = Column("model_state_host_bytes", "int", "GPU runs: model state in host memory (CPU "
                                "offload); empty on CPU runs.", unit="bytes")
MODEL_STATE_HOST_BYTES_PREDICTED = Column("model_state_host_bytes_predicted", "int", "GPU runs: the model state "
                                          "predicted in host memory.", unit="bytes")
LOSS_LAST = Column("loss_last", "float", "Rank 0's loss at the last timed step.")

TOKENS_PER_S_PER_RANK = Column("tokens_per_s_per_rank", "float", "Tokens per second per rank.", unit="tokens/s")
MODEL_FLOPS_PER_TOKEN = Column("model_flops_per_token", "int", "Model FLOPs per token (forward and backward).",
                               unit="FLOP")
MODEL_TFLOPS_PER_RANK = Column("model_tflops_per_rank", "float", "Achieved model TFLOP/s per rank.", unit="TFLOP/s")
PEAK_TFLOPS = Column("peak_tflops", "float", "The GPU's peak for the precision; empty where unknown.", unit="TFLOP/s")
MFU_PCT = Column("mfu_pct", "float", "Model FLOPs utilisation: model_tflops_per_rank / peak_tflops.", unit="%")
MFU_NOTE = Column("mfu_note", "str", "Why mfu_pct is empty (a CPU run, an unknown GPU).")
RATE_COLUMNS = (TOKENS_PER_S_PER_RANK, MODEL_FLOPS_PER_TOKEN, MODEL_TFLOPS_PER_RANK, PEAK_TFLOPS, MFU_PCT, MFU_NOTE)
"""Per-rank rates and MFU (commbench/training/flops.py)."""

COMM_MS_MAX = Column("comm_ms_max", "float", "Traced communication per step of the worst rank.", unit="ms")
EXPOSED_COMM_MS_MAX = Column("exposed_comm_ms_max", "float", "Traced exposed communication of the worst rank.",
                             unit="ms")
STEP_TIME_MS_BASELINE_P50 = Column("step_time_ms_baseline_p50", "float", "Median step time of the compute-only "
                                   "baseline (the same model on one rank, no communication).", unit="ms")
EXPOSED_COMM_MS_BASELINE = Column("exposed_comm_ms_baseline", "float", "Median of the paired differences real step − "
                                  "baseline step: communication's exposed cost.", unit="ms")
COMPUTE_BASELINE = Column("compute_baseline", "str", "How the baseline was made, or absent: why.")
EXPOSED_COLUMNS = (COMM_MS_MAX, EXPOSED_COMM_MS_MAX, STEP_TIME_MS_BASELINE_P50, EXPOSED_COMM_MS_BASELINE,
                   COMPUTE_BASELINE)
"""The trace's worst rank (comm_ms and exposed_comm_ms are the median over ranks), and the exposed cost against the
compute-only baseline for every implementation (training/compute_baseline.py)."""

PHASE = Column("phase", "str", "Which steps a sample is of: sync (the timed steps), paired_sync / paired_nosync "
               "(DDP's no_sync pairs), paired_step / paired_compute (the compute baseline's pairs).")
STEP = Column("step", "int", "The step's index within its phase (a pair's index for paired phases).")
STEP_TIME_MS = Column("step_time_ms", "float", "One step's time (the slowest rank's).", unit="ms")

KEY_COLUMNS = (BENCH, CONFIG_INDEX, CONFIG)
RESULT_COLUMNS = (
    *STAMP, *KEY_COLUMNS, STRATEGY, IMPL, BACKEND, DEVICE, WORLD_SIZE, MODEL_KIND, PARAMS, LAYERS, HIDDEN, HEADS,
    SEQ_LEN, MICRO_BATCH, ACCUM_STEPS, GLOBAL_BATCH, *SETTING_COLUMNS, STEPS, WARMUP_STEPS, STEP_TIME_MS_P50,
    STEP_TIME_MS_P95, STEP_TIME_MS_MIN, STEP_TIME_MS_MEAN, STEP_TIME_MS_CI_LO, STEP_TIME_MS_CI_HI, SAMPLES_PER_S,
    TOKENS_PER_S, STEP_TIME_MS_NOSYNC_P50, EXPOSED_COMM_MS_NOSYNC, COMM_MS, EXPOSED_COMM_MS, OVERLAP_PCT, COMM_CALLS,
    COMM_MSG_ELEMS, COMM_MSG_ELEMS_PREDICTED, COMM_BYTES_PER_RANK_PREDICTED, BUCKET_COUNT, BUCKET_SIZES_BYTES,
    DDP_BACKWARD_COMM_MS, DDP_COMM_OVERLAP_MS, PEAK_MEM_BYTES, PEAK_MEM_RESERVED_BYTES, gpu.GPU_MEM_USED_PEAK_BYTES,
    MEM_CARRYOVER_BYTES, MEMORY_BUDGET_BYTES, FITS, MODEL_STATE_BYTES, MODEL_PARAM_BYTES, MODEL_GRAD_BYTES,
    MODEL_OPTIM_BYTES, OPTIM_SCALAR_BYTES, MODEL_STATE_BYTES_PREDICTED, MODEL_STATE_EXACT_RANKS, MODEL_STATE_FORMULA,
    MODEL_STATE_BYTES_FORMULA, MODEL_STATE_HOST_BYTES, MODEL_STATE_HOST_BYTES_PREDICTED, LOSS_LAST, N_WRONG,
    *RATE_COLUMNS, *EXPOSED_COLUMNS)
"""results.csv, in file order."""
ADDED_COLUMNS = (*RATE_COLUMNS, FIRST_BUCKET_MB, *EXPOSED_COLUMNS, COMPILE, OVERLAP_WITH_DDP, REDUCE_DTYPE,
                 CPU_OFFLOAD, ACTIVATION_CHECKPOINTING, BLOCKS_PER_UNIT, ACCUM_SYNC, MODEL_STATE_HOST_BYTES,
                 MODEL_STATE_HOST_BYTES_PREDICTED)
"""Columns newer than the first training runs: an older results.csv lacks them and they read as missing (empty)."""
REQUIRED_COLUMNS = without(RESULT_COLUMNS, ADDED_COLUMNS)
SAMPLE_COLUMNS = (*STAMP, *KEY_COLUMNS, PHASE, STEP, STEP_TIME_MS)
