"""Bad input to the elementwise, reduction, nn functional and random API: the exception type torch raises for the
same mistake (IndexError for a bad dim, RuntimeError/ValueError for shapes, TypeError for a wrong argument type),
and a message naming the shapes, dims or values involved."""
import numpy as np
import pytest

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device


def f23():
  return Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))


def i23():
  return Tensor(np.arange(6, dtype=np.int32).reshape(2, 3))


def img():
  return Tensor.ones(1, 2, 5, 5)


# name: (the mistake, expected exception, fragments the message must contain)
ERRORS = {
  "clamp_no_bounds": (lambda: f23().clamp(), RuntimeError, ["min_", "max_"]),
  "lerp_ints": (lambda: i23().lerp(i23(), 0.5), TypeError, ["int32"]),
  "shift_float_tensor": (lambda: f23() << 1, TypeError, ["float32"]),
  "shift_by_float": (lambda: i23() << 1.5, TypeError, ["1.5"]),
  "shift_bool": (lambda: Tensor([True]) >> 1, TypeError, ["bool"]),
  "inplace_broadcast_grows": (lambda: Tensor.ones(3).__iadd__(Tensor.ones(2, 3)), RuntimeError, ["(3,)", "(2, 3)"]),
  "inplace_float_into_int": (lambda: i23().__iadd__(0.5), RuntimeError, ["float32", "int32"]),
  "isclose_broadcast": (lambda: f23().isclose(Tensor.ones(4)), ValueError, ["(2, 3)", "(4,)"]),
  "var_bad_dim": (lambda: f23().var(2), IndexError, ["2"]),
  "std_bad_negative_dim": (lambda: f23().std(-3), IndexError, ["-3"]),
  "any_repeated_dim": (lambda: f23().any((0, -2)), RuntimeError, ["(0, -2)"]),
  "logsumexp_bad_dim": (lambda: f23().logsumexp(5), IndexError, ["5"]),
  "cumsum_bad_dim": (lambda: f23().cumsum(2), IndexError, ["2"]),
  "cummax_bad_dim_type": (lambda: f23().cummax(1.0), TypeError, ["float"]),
  "triu_1d": (lambda: Tensor.ones(3).triu(), RuntimeError, ["(3,)", "2 dimensions"]),
  "tril_bad_diagonal": (lambda: f23().tril(0.5), TypeError, ["float"]),
  "softmax_bad_dim": (lambda: f23().softmax(3), IndexError, ["3"]),
  "matmul_shapes": (lambda: f23() @ f23(), RuntimeError, ["2x3", "2x3"]),
  "linear_shapes": (lambda: f23().linear(Tensor.ones(2, 4)), RuntimeError, ["2x3", "2x4"]),
  "einsum_operand_count": (lambda: Tensor.einsum("ij,jk->ik", f23()), ValueError, ["2 operands", "1"]),
  "einsum_rank": (lambda: Tensor.einsum("ijk->i", f23()), ValueError, ["'ijk'", "(2, 3)"]),
  "einsum_unknown_output": (lambda: Tensor.einsum("ij->iz", f23()), ValueError, ["'iz'"]),
  "einsum_size_mismatch": (lambda: Tensor.einsum("ij,ij->i", f23(), Tensor.ones(2, 4)), RuntimeError,
                           ["(2, 3)", "(2, 4)"]),
  "einsum_diagonal_sizes": (lambda: Tensor.einsum("ii->i", f23()), RuntimeError, ["'i'", "2", "3"]),
  "einsum_formula_type": (lambda: Tensor.einsum(3, f23()), TypeError, ["int"]),
  # tinygrad's tests catch AssertionError for these
  "einsum_too_many_operands": (lambda: Tensor.einsum("ij,jk->ij", f23(), f23().T, f23()), AssertionError,
                               ["2 operands", "3"]),
  "einsum_too_few_operands": (lambda: Tensor.einsum("ij,jk->ij", f23()), AssertionError, ["2 operands", "1"]),
  "einsum_sizes_across_operands": (lambda: Tensor.einsum("pqrs,tuqvr->pstuv", Tensor.zeros(3, 8, 10, 5),
                                                         Tensor.zeros(11, 5, 13, 16, 8)), AssertionError,
                                   ["'q'", "8", "13", "(3, 8, 10, 5)", "(11, 5, 13, 16, 8)"]),
  "einsum_ellipsis_sizes": (lambda: Tensor.einsum("...i,...i->...", Tensor.ones(4, 3), Tensor.ones(5, 3)),
                            RuntimeError, ["'...'", "4", "5"]),
  "sum_acc_dtype_name": (lambda: f23().sum(acc_dtype=""), AttributeError, ["''"]),  # tinygrad's type
  "prod_acc_dtype_name": (lambda: f23().prod(acc_dtype="floot"), AttributeError, ["'floot'"]),
  "cast_dtype_name": (lambda: f23().cast("f32"), TypeError, ["'f32'", "float32"]),  # torch's type
  "conv_channels": (lambda: img().conv2d(Tensor.ones(4, 3, 3, 3)), RuntimeError, ["(1, 2, 5, 5)", "(4, 3, 3, 3)"]),
  "conv_groups": (lambda: img().conv2d(Tensor.ones(3, 1, 3, 3), groups=2), ValueError, ["groups=2", "3"]),
  "conv_rank": (lambda: Tensor.ones(2, 5, 5).conv2d(Tensor.ones(4, 2, 3, 3)), RuntimeError, ["(2, 5, 5)"]),
  "conv_kernel_too_big": (lambda: img().conv2d(Tensor.ones(1, 2, 7, 7)), RuntimeError, ["(7, 7)", "(5, 5)"]),
  "conv_bias_shape": (lambda: img().conv2d(Tensor.ones(4, 2, 3, 3), Tensor.ones(3)), RuntimeError, ["(3,)", "(4,)"]),
  "conv_stride_type": (lambda: img().conv2d(Tensor.ones(4, 2, 3, 3), stride=1.5), TypeError, ["stride", "1.5"]),
  "conv_padding_length": (lambda: img().conv2d(Tensor.ones(4, 2, 3, 3), padding=(1, 1, 1)), ValueError,
                          ["(1, 1, 1)"]),
  "conv_padding_length_torch": (lambda: img().conv2d(Tensor.ones(4, 2, 3, 3), padding=(1, 1, 1)), RuntimeError,
                                ["(1, 1, 1)"]),
  "conv_transpose_padding_length": (lambda: img().conv_transpose2d(Tensor.ones(2, 1, 3, 3), padding=(1, 1, 1)),
                                    RuntimeError, ["padding", "(1, 1, 1)"]),
  "conv_transpose_padding_length_tinygrad": (lambda: img().conv_transpose2d(Tensor.ones(2, 1, 3, 3),
                                             padding=(1, 1, 1)), ValueError, ["padding", "(1, 1, 1)"]),
  "conv_stride_length": (lambda: img().conv2d(Tensor.ones(4, 2, 3, 3), stride=(1, 2, 1)), RuntimeError,
                         ["stride", "(1, 2, 1)"]),
  "conv_transpose_output_padding": (lambda: img().conv_transpose2d(Tensor.ones(2, 1, 3, 3), output_padding=1),
                                    ValueError, ["output_padding", "stride"]),
  "conv_transpose_channels": (lambda: img().conv_transpose2d(Tensor.ones(3, 1, 3, 3)), RuntimeError,
                              ["(1, 2, 5, 5)", "(3, 1, 3, 3)"]),
  "max_pool_kernel_too_big": (lambda: img().max_pool2d(6), RuntimeError, ["(6, 6)", "(5, 5)"]),
  "avg_pool_padding": (lambda: img().avg_pool2d(2, padding=(1, 2, 3)), ValueError, ["(1, 2, 3)"]),
  "interpolate_mode": (lambda: img().interpolate((3, 3), mode="cubic"), ValueError, ["'cubic'"]),
  "interpolate_align_corners": (lambda: img().interpolate((3, 3), mode="nearest", align_corners=True), ValueError,
                                ["align_corners", "'nearest'"]),
  "interpolate_size": (lambda: img().interpolate((0, 3)), ValueError, ["(0, 3)"]),
  "sdpa_causal_and_mask": (lambda: Tensor.ones(2, 3, 4).scaled_dot_product_attention(
    Tensor.ones(2, 3, 4), Tensor.ones(2, 3, 4), attn_mask=Tensor.ones(3, 3), is_causal=True), RuntimeError,
    ["is_causal"]),
  "sdpa_shapes": (lambda: Tensor.ones(2, 3, 4).scaled_dot_product_attention(Tensor.ones(2, 3, 5), Tensor.ones(2, 3, 4)),
                  RuntimeError, ["2x3x4", "2x5x3"]),
  "loss_reduction": (lambda: f23().binary_crossentropy(f23(), reduction="avg"), ValueError, ["'avg'", "mean"]),
  "bce_shapes": (lambda: f23().binary_crossentropy(Tensor.ones(3)), RuntimeError, ["(3,)", "(2, 3)"]),
  "sparse_ce_shapes": (lambda: f23().sparse_categorical_crossentropy(Tensor([0, 1, 2])), RuntimeError,
                       ["(3,)", "(2, 3)"]),
  "cross_entropy_shapes": (lambda: f23().cross_entropy(Tensor([0, 1, 2])), RuntimeError, ["(3,)", "(2, 3)"]),
  "cross_entropy_smoothing": (lambda: f23().cross_entropy(Tensor([0, 1]), label_smoothing=1.5), ValueError, ["1.5"]),
  "nll_loss_shapes": (lambda: f23().nll_loss(Tensor([[0, 1]])), RuntimeError, ["(1, 2)", "(2, 3)"]),
  "dropout_p": (lambda: f23().dropout(1.5), ValueError, ["1.5"]),
  "gelu_approximate": (lambda: f23().gelu("erf"), ValueError, ["'erf'"]),
  "manual_seed_type": (lambda: Tensor.manual_seed(1.5), TypeError, ["float"]),
  "rand_int_dtype": (lambda: Tensor.rand(3, dtype=dtypes.int32), TypeError, ["int32"]),
  "rand_negative_shape": (lambda: Tensor.rand(2, -1), ValueError, ["(2, -1)"]),
  "randint_bounds": (lambda: Tensor.randint(3, low=5, high=5), ValueError, ["low=5", "high=5"]),
  "randint_float_bound": (lambda: Tensor.randint(3, high=2.5), TypeError, ["2.5"]),
  "randint_float_dtype": (lambda: Tensor.randint(3, dtype=dtypes.float32), TypeError, ["float32"]),
  "multinomial_rank": (lambda: Tensor.ones(2, 2, 2).multinomial(), RuntimeError, ["(2, 2, 2)"]),
  "multinomial_too_many": (lambda: Tensor.ones(3).multinomial(4), RuntimeError, ["4", "3"]),
  "multinomial_num_samples": (lambda: Tensor.ones(3).multinomial(0, replacement=True), ValueError, ["0"]),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_bad_input(name):
  call, exc, fragments = ERRORS[name]
  with pytest.raises(exc) as info:
    call()
  message = str(info.value)
  for fragment in fragments:
    assert fragment in message, f"{fragment!r} not in {message!r}"


def test_there_are_enough_cases():
  assert len(ERRORS) >= 20
