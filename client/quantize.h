/* coil quantize: post-training int8 quantization of a graph file, the CLI's
 * form of coil.quantize (client/python/coil_quant.py holds the same rules).
 *
 *   qz_plan      folds inference batch norms into the convolutions before
 *                them (new params), finds the layers (convolutions, and
 *                mm/addmm by a parameter's transpose: nn.Linear) and what
 *                must be observed: each layer's input and its output after
 *                the activations fused into it;
 *   qz_calib     the graph calibration runs: the folded graph with those
 *                values appended to its outputs (NULL when nothing is to be
 *                observed: dynamic mode);
 *   qz_observe   feeds one run's extra outputs (and inputs) to the observers;
 *   qz_write     inserts the quantize / dequantize pairs (u8 activations per
 *                tensor, s8 weights per output channel, symmetric; dynamic:
 *                choose_qparams on each linear's input) and writes DIR/graph.json
 *                and DIR/weights.safetensors (every param the graph lists).
 *
 * Observers: "histogram" (the range between the 0.01 and 99.99 percentiles of
 * a deterministic sample), or "minmax". */
#ifndef COIL_CLIENT_QUANTIZE_H
#define COIL_CLIENT_QUANTIZE_H

#include <stdio.h>

#include "common/error.h"
#include "common/tensor.h"

typedef struct qz qz;

/* graph: the f32 graph's JSON text; weights: its params.  0, or -1 with err. */
int qz_plan(const char *graph, size_t len, const st_file *weights, int dynamic, qz **out, coil_err *err);
void qz_free(qz *q);
/* The calibration graph's JSON text (owned by q), or NULL when none is needed. */
const char *qz_calib(qz *q, size_t *len);
/* Param `name` of the calibration graph (the weights file's, or a folded one). */
const coil_tensor *qz_param(const qz *q, const char *name);
/* One calibration run: ins[i] binds the graph's input i (ninputs of them), outs
 * the calibration graph's outputs (the original ones first). */
int qz_observe(qz *q, const coil_tensor *ins, int ninputs, const coil_tensor *outs, int noutputs, coil_err *err);
/* 0 when method is "histogram" or "minmax" and percentile in (50, 100], else -1 with err. */
int qz_options(const char *method, double percentile, coil_err *err);
/* method: "histogram" or "minmax"; percentile in (50, 100].  Writes dir/graph.json and
 * dir/weights.safetensors; report gets one line per layer ("int8 ..." or "f32 ...: why"). */
int qz_write(qz *q, const char *method, double percentile, const char *dir, FILE *report, coil_err *err);

#endif
