"""The op semantics moved to refgrad/alu.py, the layer below the IR. This name stays for code written against the
old path, and is that very module (so there is still one definition of every op)."""
import sys

from refgrad import alu

sys.modules[__name__] = alu
