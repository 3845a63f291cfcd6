"""refgrad: a tensor library whose PYTHON interpreter is the ground truth for every backend."""
from refgrad.device import Device
from refgrad.dtype import DType, dtypes
from refgrad.interp.device import make_python_device
from refgrad.tensor import Tensor

Device.register("PYTHON", make_python_device, plugin="refgrad")

__all__ = ["Tensor", "dtypes", "DType", "Device"]
__version__ = "0.1.0"
