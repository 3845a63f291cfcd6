"""refgrad: a tensor library whose PYTHON interpreter is the ground truth for every backend."""
__version__ = "0.1.0"

from refgrad import plugins  # noqa: E402
from refgrad.device import Device  # noqa: E402
from refgrad.dtype import DType, dtypes  # noqa: E402
from refgrad.interp import plugin as _python_plugin  # noqa: E402
from refgrad.tensor import Tensor  # noqa: E402

plugins.register(_python_plugin, name="refgrad-python")
plugins.load_entry_points()

__all__ = ["Tensor", "dtypes", "DType", "Device", "plugins"]
