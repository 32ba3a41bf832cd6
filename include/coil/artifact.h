/* The C ABI of a compiled coil artifact (a shared object), version 1.
 *
 * An artifact is built for one graph and one target.  Load it with dlopen and
 * look the functions up by name; check coil_abi_version() first.  Inputs,
 * params and outputs are dense row-major buffers in graph order (positions,
 * not names).  Symbolic dims are bound from the input shapes at each run.
 * See docs/abi.md. */
#ifndef COIL_ARTIFACT_H
#define COIL_ARTIFACT_H

#include <stdint.h>

#define COIL_ABI_VERSION 1

typedef struct coil_model coil_model;

/* COIL_ABI_VERSION of the artifact. */
int coil_abi_version(void);

/* Static JSON owned by the artifact: {"abi_version", "target", "graph_hash",
 * "symbols" (count), "inputs"/"params"/"outputs" ([{"dtype", "shape"}], shape
 * entries are integers or expressions over symbols s0..s7), "arena_bytes" (an
 * expression: the intermediate arena an instance needs), "peak_bytes" (same
 * form: arena + params + outputs), "kernels"}. */
const char *coil_artifact_describe(void);

/* Creates a model from params[nparams] (graph order; copied, the caller keeps
 * ownership).  nthreads <= 0: OpenMP's default.  0 on success, -1 on failure
 * (see coil_model_last_error).  Free with coil_model_destroy. */
int coil_model_create(const void *const *params, int nparams, int nthreads, coil_model **out);

/* The shape of output `output` for these input shapes (input_shapes[i] has
 * the rank of input i).  Writes rank entries to shape and returns the rank, or
 * -1 on failure. */
int coil_model_output_shape(coil_model *m, const int64_t *const *input_shapes, int output, int64_t *shape);

/* Runs the graph: inputs[i] with shape input_shapes[i]; outputs[j] must hold
 * the size that coil_model_output_shape gives.  0 on success, -1 on failure.
 * Separate models may run concurrently on different threads; one model runs
 * one call at a time (it owns the intermediate arena, grown as needed).
 * A run flushes denormals to zero on its threads and gives them back their
 * own floating-point bits (docs/abi.md; COIL_DENORMALS=keep at create: not). */
int coil_model_run(coil_model *m, const void *const *inputs, const int64_t *const *input_shapes,
		   void *const *outputs);

/* Frees a model; accepts NULL. */
void coil_model_destroy(coil_model *m);

/* The last failure of a call on this thread (a static, thread-local string). */
const char *coil_model_last_error(void);

/* The profile switch (docs/abi.md): with acc (3 x (kernels + 1) doubles) each
 * later run adds per kernel its seconds, bytes and flops; NULL turns it off.
 * Returns the kernel count (m may be NULL).  coil_model_kernel_name(k): kernel
 * k's kind and graph nodes; k = the count names the run's own part. */
int coil_model_profile(coil_model *m, double *acc);
const char *coil_model_kernel_name(int k);

/* With the profile on and r > 1, each kernel of a run runs r times in a row and
 * adds its fastest lap: its time with its inputs in cache (bench/models/limit.py).
 * The run's outputs then mean nothing (a kernel in place reads its own output).
 * r <= 1: once, as usual.  Returns the kernel count.  Artifacts since 2026-12-04. */
int coil_model_profile_repeat(coil_model *m, int r);

/* Autotuning (docs/abi.md): j < 0 returns the count of oneDNN fusions; else
 * fusion j's lowering becomes choice (when bit choice of *choices is set) for
 * models created after, and its kernel, choices and current choice are told. */
int coil_model_tune(int j, int choice, int *kernel, unsigned *choices);

#endif
