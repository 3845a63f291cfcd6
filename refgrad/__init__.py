"""refgrad: a tensor library whose PYTHON interpreter is the ground truth for every backend."""
from refgrad import plugin_loader
from refgrad.dtype import DType, dtypes
from refgrad.interp import plugin as _python_plugin
from refgrad.jit import TinyJit
from refgrad.registry import Device
from refgrad.symbolic_shapes import Variable
from refgrad.tensor import Tensor
from refgrad.version import __version__

plugin_loader.register(_python_plugin, name="refgrad-python")
plugin_loader.load_entry_points()

__all__ = ["Tensor", "TinyJit", "Variable", "dtypes", "DType", "Device", "plugins", "__version__"]
