/* stages/cuda/plugin_abi.h — the C ABI of libkvasir_cuda.so, the CUDA backend.
 *
 * The stage process (stages/cuda_plugin.cpp) dlopen()s the plugin only when
 * its plan says cuda:N, so the normal binaries never link libcudart or
 * cuBLAS: a build made with nvcc still runs CPU plans on a machine without a
 * GPU or driver. Everything crossing this line is plain C data; errors are
 * status codes plus a text in the caller's buffer, never exceptions.
 *
 * Status codes: every function but close returns an int whose values are
 * those of kvasir::ErrorCode (base/status.h): KVASIR_CUDA_OK (0, kOk) or the
 * code of what failed, with the text in err (err_cap bytes, NUL-terminated):
 *   kInvalidArgument  a config or batch field out of range (a malformed
 *                     batch fails that batch, the stage lives)
 *   kModelFormat      the model lacks a tensor or has one not handled
 *   kOutOfMemory      weights, scratch or the KV blocks do not fit
 *   kDevice           a CUDA / cuBLASLt call or a CUDA IPC boundary failed;
 *                     from probe: no usable driver (cudaGetDeviceCount failed)
 *   kNotFound         from probe: the ordinal is not a visible device, or
 *                     one the kernels cannot run on (compute capability < 8.0)
 *   kInternal         an unexpected exception inside the plugin
 * The loader turns a non-ok code into a kvasir::Error with that code; a
 * failed forward travels on the ring as that code (kInvalidArgument, a
 * malformed batch, as kStageFailed: what the CPU executor's checks give).
 *
 * Logging: the plugin links its own static copy of base/ (hidden symbols),
 * so its logger is not the stage's. open() hands it the stage's level and
 * process name (KvasirCudaStageConfig::log_level, log_process) and the
 * plugin calls log::init in its copy with them: its KV_LOG_* lines then look
 * like the stage's own and follow the same level. A null log_process leaves
 * the plugin's logger as it is (stderr, info, "kvasir").
 *
 * Versioning: kvasir_cuda_plugin_v1() returns a table whose abi_version must
 * equal KVASIR_CUDA_ABI_VERSION and whose struct_size must be at least the
 * caller's sizeof(KvasirCudaPluginV1); `build` must equal the caller's
 * KVASIR_CUDA_BUILD_TAG (the plugin links the same static kvasir libraries,
 * e.g. the ipc::CudaBoundaryTable it is handed, so it must come from the
 * same build). Any mismatch: the loader refuses the plugin, naming both.
 */
#ifndef KVASIR_STAGES_CUDA_PLUGIN_ABI_H
#define KVASIR_STAGES_CUDA_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 4: KvasirCudaBatch gained block copies (copy_src, copy_dst, n_copies).
 * 5: structured outputs (KvasirCudaSample::mask, KvasirCudaBatch::mask_words).
 * 6: the stage config gained cuda_graphs and weight_quant. */
#define KVASIR_CUDA_ABI_VERSION 6u
/* Same version and compiler, or refuse (see above). CMake defines
 * KVASIR_BUILD_TAG identically for the loader and the plugin. */
#ifndef KVASIR_BUILD_TAG
#define KVASIR_BUILD_TAG "untagged"
#endif
#define KVASIR_CUDA_BUILD_TAG "kvasir-cuda-abi4 " KVASIR_BUILD_TAG

/* Success: kvasir::ErrorCode::kOk. Any other status is a kvasir::ErrorCode. */
#define KVASIR_CUDA_OK 0

/* KvasirCudaStageConfig::weight_quant: the layers' matrices as stored (bf16
 * on the device; an FP8 checkpoint's FP8 matrices stay FP8), or quantised to
 * FP8 E4M3 at load, one scale per output row ([cuda] quantize = "fp8"). */
#define KVASIR_CUDA_QUANT_NONE 0
#define KVASIR_CUDA_QUANT_FP8 1

/* One stage's slice and widths (the plan). */
typedef struct KvasirCudaStageConfig {
  uint32_t struct_size; /* sizeof(KvasirCudaStageConfig) */
  int32_t device;       /* CUDA ordinal N of cuda:N */
  const char* model_path;
  int32_t first_layer, last_layer; /* inclusive */
  int32_t head, tail;              /* embeds tokens / final norm + output head */
  int32_t block_size;              /* KV tokens per block */
  int32_t max_rows, max_tokens, max_table;
  int32_t inflight;              /* ring slots: device boundary slots per link */
  double gpu_memory_utilization; /* (0, 1]: share of free memory (after weights) for KV */
  /* The stage's logger (see Logging above): a kvasir::log::Level value and
   * the process name, or log_process null to leave the plugin's as it is. */
  int32_t log_level;
  const char* log_process;
  /* Since ABI 6. cuda_graphs != 0: decode-only batches are replayed as CUDA
   * graphs per batch-shape bucket ([cuda] graphs); weight_quant: above. */
  int32_t cuda_graphs;
  int32_t weight_quant;
} KvasirCudaStageConfig;

typedef struct KvasirCudaRow {
  int32_t pos0, n_tokens;
  const int32_t* block_table; /* [n_table] host */
  int32_t n_table;
  int32_t want_logits; /* tail: this row's last token is sampled */
} KvasirCudaRow;

/* Tail: one row's sampling on the device (kernels/cuda/sampling.h). Rows
 * with on_device = 0 are sampled on the host from the copied logits (the
 * stage sends those with penalties or top-N logprobs there). */
typedef struct KvasirCudaSample {
  int32_t on_device;
  float temperature, top_p, min_p;
  int32_t top_k;
  uint64_t seed;
  uint64_t position; /* keys the (seed, position) draw, as on the host */
  /* Structured outputs (ABI 5): an on-device row's token mask, host memory,
   * KvasirCudaBatch::mask_words words (bit id%32 of word id/32: id may come
   * next), applied to its logits before it is sampled
   * (kernels/cuda/token_mask.h); null = unconstrained. */
  const uint32_t* mask;
} KvasirCudaSample;

/* One forward pass. Host pointers; device boundaries (attach_boundaries)
 * replace hidden_in / hidden_out for links between two GPU stages. */
typedef struct KvasirCudaBatch {
  uint64_t batch_id; /* the ring's, > 0, increasing: keys the boundary credits */
  uint32_t slot;     /* ring slot: which device boundary buffer */
  const KvasirCudaRow* rows;
  int32_t n_rows;
  const int32_t* tokens; /* [n_tokens] head only */
  int64_t n_tokens;
  int32_t all_logits;     /* tail: logits of every token */
  const float* hidden_in; /* [n_tokens, hidden] f32 host, or null (head / device input) */
  float* hidden_out;      /* [n_tokens, hidden] f32 host, or null (tail / device output) */
  float* logits;          /* tail: [sampled rows (or n_tokens), vocab] f32 host */
  /* Tail, optional (null: every sampled row's logits go to the host). Per
   * row: sample[r].on_device rows get token_out[r] / logprob_out[r] (the raw
   * log-softmax of the token) and their logits stay on the device; the
   * others' logits are copied to `logits` at their packed index as before. */
  const KvasirCudaSample* sample; /* [n_rows] */
  int32_t* token_out;             /* [n_rows] host */
  float* logprob_out;             /* [n_rows] host */
  /* Block copies before the forward (copy-on-write of a block the choices
   * of a parallel-sampling request share; ipc/batch.h BlockCopy): K and V
   * of block copy_src[i] to copy_dst[i], in every layer of the stage. */
  const int32_t* copy_src; /* [n_copies] host */
  const int32_t* copy_dst; /* [n_copies] host */
  int32_t n_copies;
  int32_t mask_words;      /* words of each KvasirCudaSample::mask (ABI 5) */
} KvasirCudaBatch;

typedef struct KvasirCudaStage KvasirCudaStage; /* opaque */

typedef struct KvasirCudaPluginV1 {
  uint32_t abi_version; /* KVASIR_CUDA_ABI_VERSION */
  uint32_t struct_size; /* sizeof(KvasirCudaPluginV1) */
  const char* build;    /* KVASIR_CUDA_BUILD_TAG of the plugin */

  /* Is there a driver (else kDevice), and is `device` one of the visible
   * devices the kernels can run on (else kNotFound)? */
  int (*probe)(int32_t device, char* err, size_t err_cap);
  /* Selects the device, uploads the slice's weights (bf16), and measures
   * the KV capacity in blocks from gpu_memory_utilization of what is free. */
  int (*open)(const KvasirCudaStageConfig* cfg, KvasirCudaStage** out, int64_t* capacity_blocks,
              char* err, size_t err_cap);
  /* Allocates n_blocks (<= capacity) KV blocks: the daemon's minimum. */
  int (*allocate_kv)(KvasirCudaStage* st, int32_t n_blocks, char* err, size_t err_cap);
  /* table: the segment's kvasir::ipc::CudaBoundaryTable (same build).
   * export_link >= 0: allocate and publish this stage's output slots;
   * import_link >= 0: open the previous stage's slots (waits until published
   * or until *stop becomes non-zero). -1 = that side is a host boundary. */
  int (*attach_boundaries)(KvasirCudaStage* st, void* table, int32_t import_link,
                           int32_t export_link, const volatile uint32_t* stop, char* err,
                           size_t err_cap);
  /* One batch. A malformed batch is kInvalidArgument; the stage goes on. */
  int (*forward)(KvasirCudaStage* st, const KvasirCudaBatch* batch, char* err, size_t err_cap);
  /* Frees everything of the stage (device memory, boundaries, stream). */
  void (*close)(KvasirCudaStage* st);
} KvasirCudaPluginV1;

typedef const KvasirCudaPluginV1* (*KvasirCudaPluginEntry)(void);
#define KVASIR_CUDA_PLUGIN_ENTRY "kvasir_cuda_plugin_v1"

#ifdef __cplusplus
}
#endif

#endif /* KVASIR_STAGES_CUDA_PLUGIN_ABI_H */
