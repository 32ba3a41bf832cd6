/* The op table: one line per ATen op coil understands.
 *
 *   X(ENUM, aten name, ATen schema (arguments), results, kind, shape rule, interpreter kernel)
 *
 * The schema is ATen's own argument list (PyTorch 1.13 native_functions.yaml,
 * alias annotations dropped; `SymScalar`, coil's, is a Scalar that may also be a
 * size expression, as arange's bounds trace): it drives argument parsing,
 * defaults and keyword arguments.  `results` is the number of tensors returned (-1: as many as the
 * node names, for split).  `kind` tells later passes what the op is made of:
 *   PW   pointwise (elementwise with broadcasting)
 *   RED  reduction over some dims
 *   VIEW pure index arithmetic (no data movement in generated code)
 *   MOVE data movement that is not a view (cat, pad, gather, ...)
 *   EXT  a library call (convolution, matrix products)
 *   COMP a composite, decomposed into the others before fusion
 * The shape rule infer_<rule> lives in common/infer.c and the kernel
 * eval_<kernel> in common/interp.c.  Adding an op is one line here plus, where
 * no existing rule or kernel fits, one function in each file. */
#ifndef COIL_OPS_H
#define COIL_OPS_H

#define COIL_OPS(X)                                                                                    \
	/* convolution and matrix products */                                                          \
	X(CONVOLUTION, "aten.convolution.default", "Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, bool transposed, int[] output_padding, int groups", 1, EXT, conv, conv) \
	X(ADDMM, "aten.addmm.default", "Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1", 1, EXT, addmm, matmul) \
	X(MM, "aten.mm.default", "Tensor self, Tensor mat2", 1, EXT, mm, matmul)                        \
	X(BMM, "aten.bmm.default", "Tensor self, Tensor mat2", 1, EXT, bmm, matmul)                     \
	X(BADDBMM, "aten.baddbmm.default", "Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1", 1, EXT, baddbmm, matmul) \
	/* softmax(q @ k^T * scale + mask) @ v over the last two dims; dropout_p must be 0 */         \
	X(SDPA, "aten.scaled_dot_product_attention.default", "Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, float? scale=None, float? masked_value=None", 1, EXT, sdpa, sdpa) \
	/* normalization */                                                                            \
	X(NATIVE_BATCH_NORM, "aten.native_batch_norm.default", "Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float momentum, float eps", 3, COMP, batch_norm, batch_norm) \
	X(BATCH_NORM, "aten.batch_norm.default", "Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float momentum, float eps, bool cudnn_enabled", 1, COMP, batch_norm, batch_norm) \
	X(NATIVE_LAYER_NORM, "aten.native_layer_norm.default", "Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps", 3, COMP, layer_norm, layer_norm) \
	X(LAYER_NORM, "aten.layer_norm.default", "Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True", 1, COMP, layer_norm, layer_norm) \
	X(NATIVE_GROUP_NORM, "aten.native_group_norm.default", "Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, int group, float eps", 3, COMP, group_norm, group_norm) \
	X(SOFTMAX_, "aten._softmax.default", "Tensor self, int dim, bool half_to_float", 1, COMP, softmax, softmax) \
	X(SOFTMAX, "aten.softmax.int", "Tensor self, int dim, ScalarType? dtype=None", 1, COMP, softmax, softmax) \
	X(LOG_SOFTMAX_, "aten._log_softmax.default", "Tensor self, int dim, bool half_to_float", 1, COMP, softmax, softmax) \
	X(LOG_SOFTMAX, "aten.log_softmax.int", "Tensor self, int dim, ScalarType? dtype=None", 1, COMP, softmax, softmax) \
	/* pooling */                                                                                  \
	X(MAX_POOL2D_WI, "aten.max_pool2d_with_indices.default", "Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False", 2, MOVE, pool2d, pool2d) \
	X(MAX_POOL2D, "aten.max_pool2d.default", "Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False", 1, MOVE, pool2d, pool2d) \
	X(AVG_POOL2D, "aten.avg_pool2d.default", "Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None", 1, MOVE, pool2d, pool2d) \
	X(MAX_POOL3D_WI, "aten.max_pool3d_with_indices.default", "Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, int[3] dilation=1, bool ceil_mode=False", 2, MOVE, pool2d, pool2d) \
	X(MAX_POOL3D, "aten.max_pool3d.default", "Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, int[3] dilation=1, bool ceil_mode=False", 1, MOVE, pool2d, pool2d) \
	X(AVG_POOL3D, "aten.avg_pool3d.default", "Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None", 1, MOVE, pool2d, pool2d) \
	X(ADAPTIVE_AVG_POOL2D_, "aten._adaptive_avg_pool2d.default", "Tensor self, SymInt[2] output_size", 1, MOVE, adaptive_pool2d, adaptive_pool2d) \
	X(ADAPTIVE_AVG_POOL2D, "aten.adaptive_avg_pool2d.default", "Tensor self, SymInt[2] output_size", 1, MOVE, adaptive_pool2d, adaptive_pool2d) \
	X(ADAPTIVE_MAX_POOL2D, "aten.adaptive_max_pool2d.default", "Tensor self, int[2] output_size", 2, MOVE, adaptive_pool2d, adaptive_pool2d) \
	/* resampling (N, C, H, W): bilinear and nearest, as PyTorch's CPU kernels */                 \
	X(UPSAMPLE_BILINEAR2D_VEC, "aten.upsample_bilinear2d.vec", "Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors", 1, MOVE, upsample2d, upsample2d) \
	X(UPSAMPLE_BILINEAR2D, "aten.upsample_bilinear2d.default", "Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None", 1, MOVE, upsample2d, upsample2d) \
	X(UPSAMPLE_NEAREST2D_VEC, "aten.upsample_nearest2d.vec", "Tensor input, SymInt[]? output_size, float[]? scale_factors", 1, MOVE, upsample2d, upsample2d) \
	X(UPSAMPLE_NEAREST2D, "aten.upsample_nearest2d.default", "Tensor self, SymInt[2] output_size, float? scales_h=None, float? scales_w=None", 1, MOVE, upsample2d, upsample2d) \
	/* activations and unary math */                                                               \
	X(RELU, "aten.relu.default", "Tensor self", 1, PW, unary, pointwise)                            \
	X(GELU, "aten.gelu.default", "Tensor self, *, str approximate='none'", 1, PW, unary_float, pointwise) \
	X(SILU, "aten.silu.default", "Tensor self", 1, PW, unary_float, pointwise)                      \
	X(SIGMOID, "aten.sigmoid.default", "Tensor self", 1, PW, unary_float, pointwise)                \
	X(TANH, "aten.tanh.default", "Tensor self", 1, PW, unary_float, pointwise)                      \
	X(HARDSWISH, "aten.hardswish.default", "Tensor self", 1, PW, unary_float, pointwise)            \
	X(HARDSIGMOID, "aten.hardsigmoid.default", "Tensor self", 1, PW, unary_float, pointwise)        \
	X(HARDTANH, "aten.hardtanh.default", "Tensor self, Scalar min_val=-1, Scalar max_val=1", 1, PW, unary, pointwise) \
	X(LEAKY_RELU, "aten.leaky_relu.default", "Tensor self, Scalar negative_slope=0.01", 1, PW, unary_float, pointwise) \
	X(ELU, "aten.elu.default", "Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1", 1, PW, unary_float, pointwise) \
	/* x > 0 ? x : weight[channel] * x; weight: one value, or one per channel (dim 1) */       \
	X(PRELU, "aten.prelu.default", "Tensor self, Tensor weight", 1, COMP, prelu, prelu)             \
	/* a * sigmoid(b), a and b the halves of dim (its size even) */                              \
	X(GLU, "aten.glu.default", "Tensor self, int dim=-1", 1, COMP, glu, glu)                        \
	/* affine quantization over plain u8/i8 tensors (PyTorch 2's quantized_decomposed ops):
	 * quantize: clamp(rint(x * (1 / scale)) + zero_point, quant_min, quant_max) in dtype, in f32
	 * as ATen; dequantize: (q - zero_point) * scale in f32.  .tensor: scale and zero_point are
	 * one-element tensors; per_channel: [C] of them along dim axis */                          \
	X(QUANTIZE_PT, "quantized_decomposed.quantize_per_tensor.default", "Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype", 1, COMP, quant, quant) \
	X(QUANTIZE_PT_T, "quantized_decomposed.quantize_per_tensor.tensor", "Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, ScalarType dtype", 1, COMP, quant, quant) \
	X(QUANTIZE_PC, "quantized_decomposed.quantize_per_channel.default", "Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, int quant_max, ScalarType dtype", 1, COMP, quant, quant) \
	X(DEQUANTIZE_PT, "quantized_decomposed.dequantize_per_tensor.default", "Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype", 1, COMP, quant, quant) \
	X(DEQUANTIZE_PT_T, "quantized_decomposed.dequantize_per_tensor.tensor", "Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, ScalarType dtype", 1, COMP, quant, quant) \
	X(DEQUANTIZE_PC, "quantized_decomposed.dequantize_per_channel.default", "Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, int quant_max, ScalarType dtype", 1, COMP, quant, quant) \
	/* per-tensor affine qparams from the input's range (dynamic quantization), in f32 as
	 * PyTorch's observers: lo = min(min(x), 0), hi = max(max(x), 0), scale = max((hi - lo) /
	 * (quant_max - quant_min), eps), zero_point = clamp(quant_min - rint(lo / scale)); results
	 * [1] f32 and [1] i64 */                                                                    \
	X(CHOOSE_QPARAMS, "quantized_decomposed.choose_qparams.tensor", "Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype", 2, COMP, choose_qparams, choose_qparams) \
	/* round half to even */                                                                       \
	X(ROUND, "aten.round.default", "Tensor self", 1, PW, unary, pointwise)                          \
	X(SOFTPLUS, "aten.softplus.default", "Tensor self, Scalar beta=1, Scalar threshold=20", 1, PW, unary_float, pointwise) \
	X(MISH, "aten.mish.default", "Tensor self", 1, PW, unary_float, pointwise)                      \
	X(EXP, "aten.exp.default", "Tensor self", 1, PW, unary_float, pointwise)                        \
	X(LOG, "aten.log.default", "Tensor self", 1, PW, unary_float, pointwise)                        \
	X(LOG1P, "aten.log1p.default", "Tensor self", 1, PW, unary_float, pointwise)                    \
	X(SQRT, "aten.sqrt.default", "Tensor self", 1, PW, unary_float, pointwise)                      \
	X(RSQRT, "aten.rsqrt.default", "Tensor self", 1, PW, unary_float, pointwise)                    \
	X(ERF, "aten.erf.default", "Tensor self", 1, PW, unary_float, pointwise)                        \
	X(SIN, "aten.sin.default", "Tensor self", 1, PW, unary_float, pointwise)                        \
	X(COS, "aten.cos.default", "Tensor self", 1, PW, unary_float, pointwise)                        \
	X(RECIPROCAL, "aten.reciprocal.default", "Tensor self", 1, PW, unary_float, pointwise)          \
	X(NEG, "aten.neg.default", "Tensor self", 1, PW, unary, pointwise)                              \
	X(ABS, "aten.abs.default", "Tensor self", 1, PW, unary, pointwise)                              \
	X(FLOOR, "aten.floor.default", "Tensor self", 1, PW, unary, pointwise)                          \
	X(CEIL, "aten.ceil.default", "Tensor self", 1, PW, unary, pointwise)                            \
	X(LOGICAL_NOT, "aten.logical_not.default", "Tensor self", 1, PW, unary_bool, pointwise)         \
	X(BITWISE_NOT, "aten.bitwise_not.default", "Tensor self", 1, PW, bitwise, pointwise)            \
	X(CLAMP, "aten.clamp.default", "Tensor self, Scalar? min=None, Scalar? max=None", 1, PW, unary, pointwise) \
	X(CLAMP_MIN, "aten.clamp_min.default", "Tensor self, Scalar min", 1, PW, unary, pointwise)      \
	X(CLAMP_MAX, "aten.clamp_max.default", "Tensor self, Scalar max", 1, PW, unary, pointwise)      \
	X(POW_TS, "aten.pow.Tensor_Scalar", "Tensor self, Scalar exponent", 1, PW, binary, pointwise)   \
	X(POW_TT, "aten.pow.Tensor_Tensor", "Tensor self, Tensor exponent", 1, PW, binary, pointwise)   \
	/* binary arithmetic with broadcasting */                                                      \
	X(ADD, "aten.add.Tensor", "Tensor self, Tensor other, *, Scalar alpha=1", 1, PW, binary, pointwise) \
	X(ADD_S, "aten.add.Scalar", "Tensor self, Scalar other, Scalar alpha=1", 1, PW, binary, pointwise) \
	X(SUB, "aten.sub.Tensor", "Tensor self, Tensor other, *, Scalar alpha=1", 1, PW, binary, pointwise) \
	X(SUB_S, "aten.sub.Scalar", "Tensor self, Scalar other, Scalar alpha=1", 1, PW, binary, pointwise) \
	X(RSUB, "aten.rsub.Tensor", "Tensor self, Tensor other, *, Scalar alpha=1", 1, PW, binary, pointwise) \
	X(RSUB_S, "aten.rsub.Scalar", "Tensor self, Scalar other, Scalar alpha=1", 1, PW, binary, pointwise) \
	X(MUL, "aten.mul.Tensor", "Tensor self, Tensor other", 1, PW, binary, pointwise)                \
	X(MUL_S, "aten.mul.Scalar", "Tensor self, Scalar other", 1, PW, binary, pointwise)              \
	X(DIV, "aten.div.Tensor", "Tensor self, Tensor other", 1, PW, div, pointwise)                   \
	X(DIV_S, "aten.div.Scalar", "Tensor self, Scalar other", 1, PW, div, pointwise)                 \
	X(DIV_MODE, "aten.div.Tensor_mode", "Tensor self, Tensor other, *, str? rounding_mode", 1, PW, div, pointwise) \
	X(MAXIMUM, "aten.maximum.default", "Tensor self, Tensor other", 1, PW, binary, pointwise)       \
	X(MINIMUM, "aten.minimum.default", "Tensor self, Tensor other", 1, PW, binary, pointwise)       \
	X(EQ, "aten.eq.Tensor", "Tensor self, Tensor other", 1, PW, compare, pointwise)                 \
	X(EQ_S, "aten.eq.Scalar", "Tensor self, Scalar other", 1, PW, compare, pointwise)               \
	X(NE, "aten.ne.Tensor", "Tensor self, Tensor other", 1, PW, compare, pointwise)                 \
	X(NE_S, "aten.ne.Scalar", "Tensor self, Scalar other", 1, PW, compare, pointwise)               \
	X(LT, "aten.lt.Tensor", "Tensor self, Tensor other", 1, PW, compare, pointwise)                 \
	X(LT_S, "aten.lt.Scalar", "Tensor self, Scalar other", 1, PW, compare, pointwise)               \
	X(LE, "aten.le.Tensor", "Tensor self, Tensor other", 1, PW, compare, pointwise)                 \
	X(LE_S, "aten.le.Scalar", "Tensor self, Scalar other", 1, PW, compare, pointwise)               \
	X(GT, "aten.gt.Tensor", "Tensor self, Tensor other", 1, PW, compare, pointwise)                 \
	X(GT_S, "aten.gt.Scalar", "Tensor self, Scalar other", 1, PW, compare, pointwise)               \
	X(GE, "aten.ge.Tensor", "Tensor self, Tensor other", 1, PW, compare, pointwise)                 \
	X(GE_S, "aten.ge.Scalar", "Tensor self, Scalar other", 1, PW, compare, pointwise)               \
	X(LOGICAL_AND, "aten.logical_and.default", "Tensor self, Tensor other", 1, PW, compare, pointwise) \
	X(LOGICAL_OR, "aten.logical_or.default", "Tensor self, Tensor other", 1, PW, compare, pointwise) \
	X(BITWISE_AND, "aten.bitwise_and.Tensor", "Tensor self, Tensor other", 1, PW, bitwise, pointwise) \
	X(BITWISE_OR, "aten.bitwise_or.Tensor", "Tensor self, Tensor other", 1, PW, bitwise, pointwise) \
	X(BITWISE_XOR, "aten.bitwise_xor.Tensor", "Tensor self, Tensor other", 1, PW, bitwise, pointwise) \
	X(BITWISE_AND_S, "aten.bitwise_and.Scalar", "Tensor self, Scalar other", 1, PW, bitwise, pointwise) \
	X(BITWISE_OR_S, "aten.bitwise_or.Scalar", "Tensor self, Scalar other", 1, PW, bitwise, pointwise) \
	X(BITWISE_XOR_S, "aten.bitwise_xor.Scalar", "Tensor self, Scalar other", 1, PW, bitwise, pointwise) \
	/* shifts of integers: a shift by a count outside [0, bits) gives 0 (left) or the sign (right) */ \
	X(LSHIFT, "aten.__lshift__.Tensor", "Tensor self, Tensor other", 1, PW, bitwise, pointwise)     \
	X(LSHIFT_S, "aten.__lshift__.Scalar", "Tensor self, Scalar other", 1, PW, bitwise, pointwise)   \
	X(RSHIFT, "aten.__rshift__.Tensor", "Tensor self, Tensor other", 1, PW, bitwise, pointwise)     \
	X(RSHIFT_S, "aten.__rshift__.Scalar", "Tensor self, Scalar other", 1, PW, bitwise, pointwise)   \
	X(LEFT_SHIFT, "aten.bitwise_left_shift.Tensor", "Tensor self, Tensor other", 1, PW, bitwise, pointwise) \
	X(RIGHT_SHIFT, "aten.bitwise_right_shift.Tensor", "Tensor self, Tensor other", 1, PW, bitwise, pointwise) \
	/* Python's modulo: the sign of the divisor (ATen: fmod, then + other where the signs differ) */ \
	X(REMAINDER, "aten.remainder.Tensor", "Tensor self, Tensor other", 1, PW, binary, pointwise)    \
	X(REMAINDER_S, "aten.remainder.Scalar", "Tensor self, Scalar other", 1, PW, binary, pointwise)  \
	X(WHERE, "aten.where.self", "Tensor condition, Tensor self, Tensor other", 1, PW, where, pointwise) \
	X(MASKED_FILL, "aten.masked_fill.Scalar", "Tensor self, Tensor mask, Scalar value", 1, PW, where, pointwise) \
	X(MASKED_FILL_T, "aten.masked_fill.Tensor", "Tensor self, Tensor mask, Tensor value", 1, PW, where, pointwise) \
	X(TO_COPY, "aten._to_copy.default", "Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None", 1, PW, to_copy, pointwise) \
	/* reductions */                                                                               \
	X(SUM, "aten.sum.default", "Tensor self, *, ScalarType? dtype=None", 1, RED, reduce, reduce)    \
	X(SUM_DIM, "aten.sum.dim_IntList", "Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None", 1, RED, reduce, reduce) \
	X(MEAN, "aten.mean.default", "Tensor self, *, ScalarType? dtype=None", 1, RED, reduce, reduce)  \
	X(MEAN_DIM, "aten.mean.dim", "Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None", 1, RED, reduce, reduce) \
	X(AMAX, "aten.amax.default", "Tensor self, int[1] dim=[], bool keepdim=False", 1, RED, reduce, reduce) \
	X(AMIN, "aten.amin.default", "Tensor self, int[1] dim=[], bool keepdim=False", 1, RED, reduce, reduce) \
	X(MAX_ALL, "aten.max.default", "Tensor self", 1, RED, reduce, reduce)                          \
	X(MIN_ALL, "aten.min.default", "Tensor self", 1, RED, reduce, reduce)                          \
	X(VAR_CORR, "aten.var.correction", "Tensor self, int[1]? dim, *, int? correction=None, bool keepdim=False", 1, RED, reduce, reduce) \
	X(VAR_DIM, "aten.var.dim", "Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False", 1, RED, reduce, reduce) \
	X(STD_CORR, "aten.std.correction", "Tensor self, int[1]? dim, *, int? correction=None, bool keepdim=False", 1, RED, reduce, reduce) \
	X(STD_DIM, "aten.std.dim", "Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False", 1, RED, reduce, reduce) \
	X(LOGSUMEXP, "aten.logsumexp.default", "Tensor self, int[1] dim, bool keepdim=False", 1, RED, reduce, reduce) \
	X(NORM, "aten.norm.ScalarOpt_dim", "Tensor self, Scalar? p, int[1] dim, bool keepdim=False", 1, RED, reduce, reduce) \
	X(MAX_DIM, "aten.max.dim", "Tensor self, int dim, bool keepdim=False", 2, RED, reduce, reduce)  \
	X(ARGMAX, "aten.argmax.default", "Tensor self, int? dim=None, bool keepdim=False", 1, RED, reduce, reduce) \
	X(MIN_DIM, "aten.min.dim", "Tensor self, int dim, bool keepdim=False", 2, RED, reduce, reduce)  \
	X(ARGMIN, "aten.argmin.default", "Tensor self, int? dim=None, bool keepdim=False", 1, RED, reduce, reduce) \
	/* views: index arithmetic */                                                                  \
	X(VIEW, "aten.view.default", "Tensor self, SymInt[] size", 1, VIEW, reshape, view)              \
	X(UNSAFE_VIEW, "aten._unsafe_view.default", "Tensor self, SymInt[] size", 1, VIEW, reshape, view) \
	X(RESHAPE, "aten.reshape.default", "Tensor self, SymInt[] shape", 1, VIEW, reshape, view)       \
	X(RESHAPE_ALIAS, "aten._reshape_alias.default", "Tensor self, SymInt[] size, SymInt[] stride", 1, VIEW, reshape, view) \
	X(FLATTEN, "aten.flatten.using_ints", "Tensor self, int start_dim=0, int end_dim=-1", 1, VIEW, reshape, view) \
	X(PERMUTE, "aten.permute.default", "Tensor self, int[] dims", 1, VIEW, permute, view)           \
	X(TRANSPOSE, "aten.transpose.int", "Tensor self, int dim0, int dim1", 1, VIEW, permute, view)   \
	X(T, "aten.t.default", "Tensor self", 1, VIEW, permute, view)                                   \
	X(EXPAND, "aten.expand.default", "Tensor self, SymInt[] size, *, bool implicit=False", 1, VIEW, expand, view) \
	X(SLICE, "aten.slice.Tensor", "Tensor self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1", 1, VIEW, slice, view) \
	X(SELECT, "aten.select.int", "Tensor self, int dim, SymInt index", 1, VIEW, slice, view)        \
	/* self with the slice (select) along dim replaced by src (in-place slice assignment, functionalized) */ \
	X(SLICE_SCATTER, "aten.slice_scatter.default", "Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1", 1, MOVE, slice_scatter, slice_scatter) \
	X(SELECT_SCATTER, "aten.select_scatter.default", "Tensor self, Tensor src, int dim, SymInt index", 1, MOVE, slice_scatter, slice_scatter) \
	X(SQUEEZE, "aten.squeeze.default", "Tensor self", 1, VIEW, squeeze, view)                       \
	X(SQUEEZE_DIM, "aten.squeeze.dim", "Tensor self, int dim", 1, VIEW, squeeze, view)              \
	X(UNSQUEEZE, "aten.unsqueeze.default", "Tensor self, int dim", 1, VIEW, squeeze, view)          \
	X(ALIAS, "aten.alias.default", "Tensor self", 1, VIEW, same, view)                              \
	X(DETACH, "aten.detach.default", "Tensor self", 1, VIEW, same, view)                            \
	X(CLONE, "aten.clone.default", "Tensor self, *, MemoryFormat? memory_format=None", 1, VIEW, same, view) \
	X(CONTIGUOUS, "aten.contiguous.default", "Tensor self, *, MemoryFormat memory_format=contiguous_format", 1, VIEW, same, view) \
	X(LIFT_FRESH_COPY, "aten.lift_fresh_copy.default", "Tensor self", 1, VIEW, same, view)          \
	X(DROPOUT, "aten.dropout.default", "Tensor input, float p, bool train", 1, VIEW, dropout, view) \
	X(NATIVE_DROPOUT, "aten.native_dropout.default", "Tensor input, float p, bool? train", 2, VIEW, dropout, view) \
	/* data movement */                                                                            \
	X(CAT, "aten.cat.default", "Tensor[] tensors, int dim=0", 1, MOVE, cat, cat)                    \
	/* [*, C*r*r, H, W] <-> [*, C, H*r, W*r]: reshape, permute, reshape */                       \
	X(PIXEL_SHUFFLE, "aten.pixel_shuffle.default", "Tensor self, int upscale_factor", 1, VIEW, pixel_shuffle, pixel_shuffle) \
	X(PIXEL_UNSHUFFLE, "aten.pixel_unshuffle.default", "Tensor self, int downscale_factor", 1, VIEW, pixel_shuffle, pixel_shuffle) \
	/* [N, C, *]: channel i*g + j is channel j*(C/g) + i (ShuffleNet's view, transpose, view) */  \
	X(CHANNEL_SHUFFLE, "aten.channel_shuffle.default", "Tensor self, int groups", 1, VIEW, channel_shuffle, channel_shuffle) \
	/* tiles: dim i repeated repeats[i] times (leading repeats add dims) */                         \
	X(REPEAT, "aten.repeat.default", "Tensor self, SymInt[] repeats", 1, VIEW, repeat, repeat)     \
	X(STACK, "aten.stack.default", "Tensor[] tensors, int dim=0", 1, MOVE, stack, stack)              \
	X(UNBIND, "aten.unbind.int", "Tensor self, int dim=0", -1, VIEW, unbind, unbind)                \
	X(SPLIT, "aten.split.Tensor", "Tensor self, SymInt split_size, int dim=0", -1, VIEW, split, split) \
	X(UNSAFE_SPLIT, "aten.unsafe_split.Tensor", "Tensor self, SymInt split_size, int dim=0", -1, VIEW, split, split) \
	X(SPLIT_WITH_SIZES, "aten.split_with_sizes.default", "Tensor self, SymInt[] split_sizes, int dim=0", -1, VIEW, split, split) \
	X(CONSTANT_PAD_ND, "aten.constant_pad_nd.default", "Tensor self, SymInt[] pad, Scalar value=0", 1, MOVE, pad, pad) \
	/* out[..., i, ...] = self[..., index[..., i, ...], ...] along dim; out has index's shape */   \
	X(GATHER, "aten.gather.default", "Tensor self, int dim, Tensor index, *, bool sparse_grad=False", 1, MOVE, gather, gather) \
	/* out = self; out[.., index[p], ..] (op)= src[p] along dim, p over index's shape; targets of
	 * different columns (coordinates off dim) never meet: parallel by column, no atomics */     \
	X(SCATTER_ADD, "aten.scatter_add.default", "Tensor self, int dim, Tensor index, Tensor src", 1, MOVE, scatter, scatter) \
	X(SCATTER_REDUCE, "aten.scatter_reduce.two", "Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True", 1, MOVE, scatter, scatter) \
	/* out = self; out[.., index[j], ..] += alpha * source[.., j, ..] along dim (scatter's kernel) */ \
	X(INDEX_ADD, "aten.index_add.default", "Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1", 1, MOVE, index_add, scatter) \
	/* out = self; out[.., index[j], ..] (reduce)= source[.., j, ..] along dim; reduce prod, mean,
	 * amax, amin as PyTorch's, and sum (coil's extension: scatter_reduce sum over a broadcast index) */ \
	X(INDEX_REDUCE, "aten.index_reduce.default", "Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True", 1, MOVE, index_add, scatter) \
	/* advanced indexing by integer tensors (broadcast together; negative ones count from the end) */ \
	X(INDEX_T, "aten.index.Tensor", "Tensor self, Tensor?[] indices", 1, MOVE, index_t, index_t)      \
	/* coil's: a CSR matrix [rows, C] (crow_indices, col_indices, values or 1) times dense [C, F],
	 * each row reduced by sum, mean, amax or amin over its entries (empty rows 0) */            \
	X(SPARSE_MM_REDUCE, "coil.sparse_mm_reduce.default", "Tensor crow_indices, Tensor col_indices, Tensor? values, Tensor other, str reduce='sum'", 1, MOVE, spmm, spmm) \
	/* recurrent layers as nn.LSTM / nn.GRU run them (the exporter's coil::lstm / coil::gru, which
	 * make_fx would otherwise unroll step by step): f32, inference */                         \
	X(LSTM, "coil.lstm.default", "Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, bool bidirectional, bool batch_first, Tensor? lengths=None", 3, MOVE, rnn, rnn) \
	X(GRU, "coil.gru.default", "Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, bool bidirectional, bool batch_first, Tensor? lengths=None", 2, MOVE, rnn, rnn) \
	X(RNN_TANH, "coil.rnn_tanh.default", "Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, bool bidirectional, bool batch_first, Tensor? lengths=None", 2, MOVE, rnn, rnn) \
	X(RNN_RELU, "coil.rnn_relu.default", "Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, bool bidirectional, bool batch_first, Tensor? lengths=None", 2, MOVE, rnn, rnn) \
	/* message passing in one: out = self; out[dst[e]] (reduce)= x[src[e]] (* weight[e]) along dim 0
	 * (scatter.c fuses index_select [* per-edge weight] into index_add/index_reduce this way) */   \
	X(GATHER_SCATTER, "coil.gather_scatter.default", "Tensor self, Tensor x, Tensor src, Tensor dst, Tensor? weight, str reduce='sum', bool include_self=True", 1, MOVE, gather_scatter, scatter) \
	X(INDEX_SELECT, "aten.index_select.default", "Tensor self, int dim, Tensor index", 1, MOVE, index_select, index_select) \
	X(EMBEDDING, "aten.embedding.default", "Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False", 1, MOVE, embedding, embedding) \
	/* the lower (upper) triangle of the last two dims: j - i <= diagonal (>=), else 0 */          \
	X(TRIL, "aten.tril.default", "Tensor self, int diagonal=0", 1, MOVE, tri, tri)                  \
	X(TRIU, "aten.triu.default", "Tensor self, int diagonal=0", 1, MOVE, tri, tri)                  \
	/* running sums along dim: floats accumulate in f64 (ATen's CPU acc type), integers in i64 */   \
	/* self, unchanged, once value (one integer element) is expected: the exporter's guard on a size
	 * read from a tensor's values (a lengths tensor's max), which the graph was specialised on;
	 * another value fails the run, naming the node */                                            \
	/* internal (microbatch.c; a graph that names it is refused): the chunk of images self into
	 * its place in a batch of `total` (dim 0), the chunk's index the run's; never in JSON */     \
	X(MB_JOIN, "coil.mb_join.internal", "Tensor self, int total", 1, MOVE, mb_join, mb_join)   \
	X(GUARD_EQ, "coil.guard_eq.default", "Tensor self, Tensor value, int expected", 1, MOVE, guard, guard) \
	X(CUMSUM, "aten.cumsum.default", "Tensor self, int dim, *, ScalarType? dtype=None", 1, MOVE, cumsum, cumsum) \
	X(PROD, "aten.prod.default", "Tensor self, *, ScalarType? dtype=None", 1, MOVE, prod, prod)      \
	X(PROD_DIM, "aten.prod.dim_int", "Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None", 1, MOVE, prod, prod) \
	/* values and i64 indices along dim, ordered by value then index (NaN above everything) */     \
	X(SORT, "aten.sort.default", "Tensor self, int dim=-1, bool descending=False", 2, MOVE, sort, sort) \
	X(SORT_STABLE, "aten.sort.stable", "Tensor self, *, bool? stable, int dim=-1, bool descending=False", 2, MOVE, sort, sort) \
	X(TOPK, "aten.topk.default", "Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True", 2, MOVE, sort, sort) \
	/* bags of weight rows: bag b holds indices[offsets[b] .. offsets[b+1]); sum, mean or max */  \
	X(EMBEDDING_BAG_FO, "aten._embedding_bag_forward_only.default", "Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1", 4, MOVE, embedding_bag, embedding_bag) \
	X(EMBEDDING_BAG, "aten._embedding_bag.default", "Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1", 4, MOVE, embedding_bag, embedding_bag) \
	/* self's elements (row-major) at storage_offset + sum(i_k * stride_k): a view of a contiguous
	 * tensor as torch.as_strided makes one (stft's frames); static sizes */                      \
	X(AS_STRIDED, "aten.as_strided.default", "Tensor self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None", 1, MOVE, as_strided, as_strided) \
	/* nn.Fold / nn.Unfold: [N, C*kh*kw, L] blocks summed into [N, C, H, W], and back */        \
	X(COL2IM, "aten.col2im.default", "Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride", 1, MOVE, col2im, col2im) \
	X(IM2COL, "aten.im2col.default", "Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride", 1, MOVE, col2im, col2im) \
	/* padding of the last 1, 2 or 3 dims by reflection (pad < size) or replication; static pads */ \
	X(REFLECTION_PAD1D, "aten.reflection_pad1d.default", "Tensor self, SymInt[2] padding", 1, MOVE, pad_mode, pad_mode) \
	X(REFLECTION_PAD2D, "aten.reflection_pad2d.default", "Tensor self, SymInt[4] padding", 1, MOVE, pad_mode, pad_mode) \
	X(REFLECTION_PAD3D, "aten.reflection_pad3d.default", "Tensor self, SymInt[6] padding", 1, MOVE, pad_mode, pad_mode) \
	X(REPLICATION_PAD1D, "aten.replication_pad1d.default", "Tensor self, SymInt[2] padding", 1, MOVE, pad_mode, pad_mode) \
	X(REPLICATION_PAD2D, "aten.replication_pad2d.default", "Tensor self, SymInt[4] padding", 1, MOVE, pad_mode, pad_mode) \
	X(REPLICATION_PAD3D, "aten.replication_pad3d.default", "Tensor self, SymInt[6] padding", 1, MOVE, pad_mode, pad_mode) \
	/* coil's discrete Fourier transforms over dims of f32 tensors whose complex values are real
	 * tensors with a last dim of 2 (torch.view_as_real's layout): ATen's _fft_r2c, _fft_c2r and
	 * _fft_c2c with their arguments (normalization 0 none, 1 by sqrt(n), 2 by n) */              \
	X(FFT_R2C, "coil.fft_r2c.default", "Tensor self, int[] dim, int normalization, bool onesided", 1, MOVE, fft, fft) \
	X(FFT_C2R, "coil.fft_c2r.default", "Tensor self, int[] dim, int normalization, SymInt last_dim_size", 1, MOVE, fft, fft) \
	X(FFT_C2C, "coil.fft_c2c.default", "Tensor self, int[] dim, int normalization, bool forward", 1, MOVE, fft, fft) \
	X(FLIP, "aten.flip.default", "Tensor self, int[] dims", 1, MOVE, flip, flip)                     \
	/* windows of size elements every step along dimension, as a new last dim (Tensor.unfold) */  \
	X(UNFOLD, "aten.unfold.default", "Tensor self, int dimension, int size, int step", 1, MOVE, unfold, unfold) \
	X(ROLL, "aten.roll.default", "Tensor self, int[1] shifts, int[1] dims=[]", 1, MOVE, same, roll) \
	X(NEW_ZEROS, "aten.new_zeros.default", "Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", 1, MOVE, fill, fill) \
	X(FULL, "aten.full.default", "SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", 1, MOVE, fill, fill) \
	X(ZEROS, "aten.zeros.default", "SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", 1, MOVE, fill, fill) \
	X(ZEROS_LIKE, "aten.zeros_like.default", "Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None", 1, MOVE, fill, fill) \
	X(ONES_LIKE, "aten.ones_like.default", "Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None", 1, MOVE, fill, fill) \
	X(FULL_LIKE, "aten.full_like.default", "Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None", 1, MOVE, fill, fill) \
	/* start + i * step, i < ceil((end - start) / step); integer bounds may be size expressions */ \
	X(ARANGE, "aten.arange.default", "SymScalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", 1, MOVE, arange, arange) \
	X(ARANGE_START, "aten.arange.start", "SymScalar start, SymScalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", 1, MOVE, arange, arange) \
	X(ARANGE_STEP, "aten.arange.start_step", "SymScalar start, SymScalar end, Scalar step=1, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None", 1, MOVE, arange, arange)

typedef enum coil_op {
#define X(e, name, schema, nres, kind, rule, kern) OP_##e,
	COIL_OPS(X)
#undef X
	COIL_NOPS
} coil_op;

enum op_kind { PW, RED, VIEW, MOVE, EXT, COMP };

/* Schema argument types. */
enum sch_type {
	S_TENSOR, S_TENSOR_LIST, S_INT, S_SYMINT, S_INT_LIST, S_SYMINT_LIST,
	S_FLOAT, S_FLOAT_LIST, S_SCALAR, S_SYMSCALAR, S_BOOL, S_STR, S_DTYPE, S_IGNORED
};

typedef struct sch_arg {
	char name[32];
	enum sch_type type;
	int optional;   /* T? */
	int list_len;   /* int[N]: N (a single int repeats); 0 otherwise */
	int kw_only;    /* after '*' */
	int has_default;
	char deflt[32]; /* default as JSON text: "1", "false", "null", "[0,0]", "\"none\"" */
} sch_arg;

#define COIL_MAX_ARGS 10

typedef struct op_info {
	const char *name;    /* "aten.add.Tensor" */
	const char *schema;
	int nres;            /* -1: variable (split) */
	enum op_kind kind;
	int nargs;
	sch_arg args[COIL_MAX_ARGS];
} op_info;

/* The parsed table (built once, then read-only; thread-safe). */
const op_info *op_get(coil_op op);
/* Look an op up by name; "aten.relu" finds "aten.relu.default" and in-place
 * spellings ("aten.relu_.default", "aten.add_.Tensor") find their pure op.
 * Returns -1 when unknown. */
int op_lookup(const char *name);
/* The compiler's own ops (coil.mb_join): never a graph's, not listed by `coil info --ops`. */
int op_internal(coil_op op);
const char *op_name(coil_op op);

/* coil.lstm, coil.gru, coil.rnn_tanh, coil.rnn_relu: 0, 1, 2, 3 (codegen/rnn.h's kinds), else -1;
 * their gates per unit: 4, 3, 1, 1. */
static inline int op_rnn_kind(coil_op op)
{
	return op == OP_LSTM ? 0 : op == OP_GRU ? 1 : op == OP_RNN_TANH ? 2 : op == OP_RNN_RELU ? 3 : -1;
}
static inline int op_rnn_gates(coil_op op) { return op == OP_LSTM ? 4 : op == OP_GRU ? 3 : 1; }

/* Shifts, and the bitwise ops (on bool: the logical ones; on integers: bits). */
static inline int op_is_shift(coil_op op)
{
	return op == OP_LSHIFT || op == OP_LSHIFT_S || op == OP_RSHIFT || op == OP_RSHIFT_S || op == OP_LEFT_SHIFT ||
	       op == OP_RIGHT_SHIFT;
}
static inline int op_is_bitwise(coil_op op)
{
	return op == OP_BITWISE_AND || op == OP_BITWISE_OR || op == OP_BITWISE_XOR || op == OP_BITWISE_AND_S ||
	       op == OP_BITWISE_OR_S || op == OP_BITWISE_XOR_S || op == OP_BITWISE_NOT || op_is_shift(op);
}
/* The quantization ops: whether op is one, a dequantize, per channel, with tensor qparams; the
 * arg index of quant_min (quant_max and dtype follow). */
static inline int op_is_quant(coil_op op) { return op >= OP_QUANTIZE_PT && op <= OP_DEQUANTIZE_PC; }
static inline int op_is_dequant(coil_op op) { return op >= OP_DEQUANTIZE_PT && op <= OP_DEQUANTIZE_PC; }
static inline int op_quant_pc(coil_op op) { return op == OP_QUANTIZE_PC || op == OP_DEQUANTIZE_PC; }
static inline int op_quant_tensor(coil_op op) { return op != OP_QUANTIZE_PT && op != OP_DEQUANTIZE_PT; }
static inline int op_quant_min_arg(coil_op op) { return op_quant_pc(op) ? 4 : 3; }
/* Left shifts (<<), else right (>>). */
static inline int op_is_lshift(coil_op op) { return op == OP_LSHIFT || op == OP_LSHIFT_S || op == OP_LEFT_SHIFT; }

#endif
