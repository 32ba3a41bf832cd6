/* The reference interpreter: evaluates any valid graph op by op, in double
 * precision rounded to each value's dtype after every op.  Simple and
 * obviously correct; the oracle that generated code is checked against. */
#ifndef COIL_INTERP_H
#define COIL_INTERP_H

#include "common/graph.h"
#include "common/tensor.h"

/* inputs[i] binds g->inputs[i], params[i] binds g->params[i] (dtype and shape
 * are checked, symbols bound from the inputs).  outputs[i] receives
 * g->outputs[i] in freshly malloc'd data: release with tensor_free. */
int interp_run(coil_graph *g, const coil_tensor *inputs, const coil_tensor *params, coil_tensor *outputs,
	       coil_err *err);

/* Binds the symbols of g from concrete input shapes; vals gets one value per
 * symbol.  Checks every static dim. */
int bind_symbols(const coil_graph *g, const coil_tensor *inputs, int64_t *vals, coil_err *err);

void tensor_free(coil_tensor *t); /* frees data; accepts NULL */

#endif
