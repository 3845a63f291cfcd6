"""Bad input to the nn functions (convolutions, pooling, interpolate, attention, losses, dropout, gelu): the
exception class torch raises for the same mistake (RuntimeError/ValueError for shapes, TypeError for a wrong argument
type), and a message that names the offending shapes or values."""
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 -- the usual name
from helpers import f23, raises_like, tf23

from refgrad import Tensor, nn

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device


def img():
  return Tensor.ones(1, 2, 5, 5)


# name: (our call, the same mistake in torch or None, expected exception class (or classes), message fragments)
ERRORS = {
  "conv_channels": (lambda: img().conv2d(Tensor.ones(4, 3, 3, 3)), None, RuntimeError,
                    ["(1, 2, 5, 5)", "(4, 3, 3, 3)"]),
  "conv_groups": (lambda: img().conv2d(Tensor.ones(3, 1, 3, 3), groups=2), None, ValueError, ["groups=2", "3"]),
  "conv_rank": (lambda: Tensor.ones(2, 5, 5).conv2d(Tensor.ones(4, 2, 3, 3)), None, RuntimeError, ["(2, 5, 5)"]),
  "conv_kernel_too_big": (lambda: img().conv2d(Tensor.ones(1, 2, 7, 7)), None, RuntimeError, ["(7, 7)", "(5, 5)"]),
  "conv_bias_shape": (lambda: img().conv2d(Tensor.ones(4, 2, 3, 3), Tensor.ones(3)), None, RuntimeError,
                      ["(3,)", "(4,)"]),
  "conv_stride_type": (lambda: img().conv2d(Tensor.ones(4, 2, 3, 3), stride=1.5), None, TypeError, ["stride", "1.5"]),
  # tinygrad's ValueError and torch's RuntimeError
  "conv_padding_length": (lambda: img().conv2d(Tensor.ones(4, 2, 3, 3), padding=(1, 1, 1)), None,
                          (ValueError, RuntimeError), ["(1, 1, 1)"]),
  "conv_transpose_padding_length": (lambda: img().conv_transpose2d(Tensor.ones(2, 1, 3, 3), padding=(1, 1, 1)), None,
                                    (ValueError, RuntimeError), ["padding", "(1, 1, 1)"]),
  "conv_stride_length": (lambda: img().conv2d(Tensor.ones(4, 2, 3, 3), stride=(1, 2, 1)), None, RuntimeError,
                         ["stride", "(1, 2, 1)"]),
  "conv_transpose_output_padding": (lambda: img().conv_transpose2d(Tensor.ones(2, 1, 3, 3), output_padding=1),
                                    lambda: F.conv_transpose2d(torch.ones(1, 2, 5, 5), torch.ones(2, 1, 3, 3),
                                                               output_padding=1),
                                    (ValueError, RuntimeError), ["output_padding", "stride"]),
  "conv_transpose_channels": (lambda: img().conv_transpose2d(Tensor.ones(3, 1, 3, 3)), None, RuntimeError,
                              ["(1, 2, 5, 5)", "(3, 1, 3, 3)"]),
  "max_pool_kernel_too_big": (lambda: img().max_pool2d(6), None, RuntimeError, ["(6, 6)", "(5, 5)"]),
  "avg_pool_padding": (lambda: img().avg_pool2d(2, padding=(1, 2, 3)), None, ValueError, ["(1, 2, 3)"]),
  # a window in the padding alone: -inf (max) or 0/0 (avg without the padding) before
  "max_pool_padding_over_half": (lambda: img().max_pool2d(2, padding=2), lambda: F.max_pool2d(torch.ones(1, 2, 5, 5), 2,
                                 padding=2), RuntimeError, ["padding 2", "(1, 1)"]),
  "avg_pool_padding_over_half": (lambda: img().avg_pool2d(3, padding=(1, 2), dilation=1),
                                 lambda: F.avg_pool2d(torch.ones(1, 2, 5, 5), 3, padding=(1, 2)), RuntimeError,
                                 ["(1, 2)", "(1, 1)"]),
  "interpolate_mode": (lambda: img().interpolate((3, 3), mode="cubic"), None, ValueError, ["'cubic'"]),
  "interpolate_align_corners": (lambda: img().interpolate((3, 3), mode="nearest", align_corners=True), None,
                                ValueError, ["align_corners", "'nearest'"]),
  "interpolate_size": (lambda: img().interpolate((0, 3)), lambda: F.interpolate(torch.ones(1, 2, 5, 5), (0, 3)),
                       (ValueError, RuntimeError), ["(0, 3)"]),
  # a stride, dilation or kernel size of 0: ZeroDivisionError inside, or (dilation, a transposed stride) no error
  "conv_stride_0": (lambda: img().conv2d(Tensor.ones(1, 2, 1, 1), stride=0),
                    lambda: F.conv2d(torch.ones(1, 2, 5, 5), torch.ones(1, 2, 1, 1), stride=0), RuntimeError,
                    ["stride", "(0, 0)"]),
  "conv_dilation_0": (lambda: img().conv2d(Tensor.ones(1, 2, 1, 1), dilation=(1, 0)),
                      lambda: F.conv2d(torch.ones(1, 2, 5, 5), torch.ones(1, 2, 1, 1), dilation=(1, 0)), RuntimeError,
                      ["dilation", "(1, 0)"]),
  "conv_transpose_stride_0": (lambda: img().conv_transpose2d(Tensor.ones(2, 1, 1, 1), stride=0),
                              lambda: F.conv_transpose2d(torch.ones(1, 2, 5, 5), torch.ones(2, 1, 1, 1), stride=0),
                              RuntimeError, ["stride", "(0, 0)"]),
  "max_pool_stride_0": (lambda: img().max_pool2d(2, 0), lambda: F.max_pool2d(torch.ones(1, 2, 5, 5), 2, 0),
                        RuntimeError, ["stride", "(0, 0)"]),
  "avg_pool_kernel_0": (lambda: img().avg_pool2d((2, 0)), lambda: F.avg_pool2d(torch.ones(1, 2, 5, 5), (2, 0)),
                        RuntimeError, ["kernel_size", "(2, 0)"]),
  "cross_entropy_0d": (lambda: Tensor(1.0).cross_entropy(Tensor(0)),
                       lambda: F.cross_entropy(torch.tensor(1.0), torch.tensor(0)), RuntimeError, ["0-d"]),
  "nll_loss_0d": (lambda: Tensor(1.0).nll_loss(Tensor(0)), lambda: F.nll_loss(torch.tensor(1.0), torch.tensor(0)),
                  ValueError, ["0-d"]),
  "sparse_ce_0d": (lambda: Tensor(1.0).sparse_categorical_crossentropy(Tensor(0)), None, RuntimeError, ["0-d"]),
  "sdpa_causal_and_mask": (lambda: Tensor.ones(2, 3, 4).scaled_dot_product_attention(
    Tensor.ones(2, 3, 4), Tensor.ones(2, 3, 4), attn_mask=Tensor.ones(3, 3), is_causal=True), None, RuntimeError,
    ["is_causal"]),
  "sdpa_shapes": (lambda: Tensor.ones(2, 3, 4).scaled_dot_product_attention(Tensor.ones(2, 3, 5), Tensor.ones(2, 3, 4)),
                  None, RuntimeError, ["2x3x4", "2x5x3"]),
  "loss_reduction": (lambda: f23().binary_crossentropy(f23(), reduction="avg"), None, ValueError, ["'avg'", "mean"]),
  "bce_shapes": (lambda: f23().binary_crossentropy(Tensor.ones(3)), None, RuntimeError, ["(3,)", "(2, 3)"]),
  "sparse_ce_shapes": (lambda: f23().sparse_categorical_crossentropy(Tensor([0, 1, 2])), None, RuntimeError,
                       ["(3,)", "(2, 3)"]),
  "cross_entropy_shapes": (lambda: f23().cross_entropy(Tensor([0, 1, 2])), None, RuntimeError, ["(3,)", "(2, 3)"]),
  "cross_entropy_smoothing": (lambda: f23().cross_entropy(Tensor([0, 1]), label_smoothing=1.5),
                              lambda: F.cross_entropy(tf23(), torch.tensor([0, 1]), label_smoothing=1.5),
                              (ValueError, RuntimeError, AssertionError), ["1.5"]),
  "sparse_ce_smoothing": (lambda: f23().sparse_categorical_crossentropy(Tensor([0, 1]), label_smoothing=1.5), None,
                          (RuntimeError, AssertionError), ["1.5"]),
  "nll_loss_shapes": (lambda: f23().nll_loss(Tensor([[0, 1]])), None, RuntimeError, ["(1, 2)", "(2, 3)"]),
  "nll_loss_float_targets": (lambda: f23().nll_loss(Tensor([0.0, 1.0])),
                             lambda: F.nll_loss(tf23(), torch.tensor([0.0, 1.0])), RuntimeError, ["float32"]),
  "dropout_p": (lambda: f23().dropout(1.5), None, ValueError, ["1.5"]),
  "gelu_approximate": (lambda: f23().gelu("erf"), None, ValueError, ["'erf'"]),
  # layers
  "layernorm_layer_shape": (lambda: nn.LayerNorm(6)(Tensor.ones(3, 5)), lambda: torch.nn.LayerNorm(6)(torch.ones(3, 5)),
                            RuntimeError, ["(6,)", "(3, 5)"]),
  "batchnorm_one_value_per_channel": (lambda: Tensor.train()(lambda: nn.BatchNorm(3)(Tensor.ones(1, 3, 1, 1)))(),
                                      lambda: torch.nn.BatchNorm2d(3)(torch.ones(1, 3, 1, 1)), ValueError,
                                      ["(1, 3, 1, 1)"]),
  "groupnorm_groups": (lambda: nn.GroupNorm(3, 4), lambda: torch.nn.GroupNorm(3, 4), ValueError, ["(4)", "(3)"]),
  "embedding_float_indices": (lambda: nn.Embedding(5, 3)(Tensor([1.0])),
                              lambda: torch.nn.Embedding(5, 3)(torch.tensor([1.0])), (RuntimeError, TypeError),
                              ["float32"]),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_error(name):
  raises_like(*ERRORS[name])
