"""Optimizers. `step()` builds every parameter's update lazily and realizes them all in one schedule, so a
step costs a small fixed number of kernels per parameter (the update and each state buffer).

Updates of half-precision (float16, bfloat16) parameters are computed in float32, with float32 gradients and
state, and cast to the parameter's dtype once at the end (torch's float32 "master" math).
"""
from __future__ import annotations

from refgrad.dtype import DType, dtypes, least_upper_dtype
from refgrad.frontend.templates import graph_template
from refgrad.tensor import Tensor


def _master_dtype(p: Tensor) -> DType:
  """The dtype an update of p is computed in: float32, or float64 for float64 parameters."""
  return least_upper_dtype(p.dtype, dtypes.float32)


def _zeros(p: Tensor) -> Tensor:
  return Tensor.zeros(*p.shape, dtype=_master_dtype(p), device=p.device, requires_grad=False)


def _master(p: Tensor, grad: Tensor) -> tuple[Tensor, Tensor]:
  """The parameter and its gradient in the master dtype."""
  return p.detach().cast(_master_dtype(p)), grad.cast(_master_dtype(p))


class Optimizer:
  """`lr` is a one-element float tensor on the parameters' device (`.device`), as in tinygrad: the update reads
  it from its buffer, so an LR schedule assigns into it (`opt.lr.assign(Tensor([0.01], device=opt.device))`) and
  the next step, or the next replay of a jitted step, uses the new rate without a new kernel."""

  def __init__(self, params: list[Tensor], lr: float):
    if not params:
      raise ValueError("optimizer got an empty parameter list")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)):
      raise TypeError(f"lr must be a Python number, got {type(lr).__name__} {lr!r}")
    for p in params:
      if p.requires_grad is None:  # tinygrad's rule: an undecided tensor handed to an optimizer wants gradients
        p.requires_grad = True
    self.params = [p for p in params if p.requires_grad]
    if not self.params:
      raise ValueError(f"optimizer got {len(params)} parameters, none with requires_grad")
    self.buffers = [p for p in params if not p.requires_grad]
    self.device = self.params[0].device
    # the widest update dtype: float32 for a half model (its rate is not rounded to half: 1e-4 would become
    # 1.0002e-4), float64 for float64 parameters (tinygrad rounds it to float32 there; torch's math is float64)
    dtype = least_upper_dtype(dtypes.default_float, *(_master_dtype(p) for p in self.params))
    self.lr = Tensor([lr], dtype=dtype, device=self.device, requires_grad=False)

  def _lr(self, p: Tensor) -> Tensor:
    """The learning rate as a scalar on p's device, read from self.lr's buffer."""
    return self.lr.to(p.device).reshape(())

  def zero_grad(self) -> None:
    for p in self.params:
      p.grad = None

  def _check_ready(self) -> None:
    if not Tensor.training:
      raise RuntimeError("Optimizer.step() needs training mode, but Tensor.training is False: "
                         "run the training step inside `with Tensor.train():`")
    for p in self.params:
      if p.grad is None:
        raise RuntimeError(f"a parameter of shape {p.shape} has no gradient: call backward() before step()")

  def step(self) -> None:
    """Apply one update to every parameter; everything is realized together. Needs training mode."""
    self._check_ready()
    updates = self._updates()
    Tensor.realize(*updates)
    for p, new in zip(self.params, updates[:len(self.params)]):
      p.replace(new)

  def _updates(self) -> list[Tensor]:
    """New values: the parameters first (in their own dtype), then any state buffers (already replaced in place
    by subclasses)."""
    raise NotImplementedError


class OptimizerGroup(Optimizer):
  """Several optimizers used as one (tinygrad's): zero_grad and step run each in turn; `group[i]` is the i-th."""

  def __init__(self, *optimizers: Optimizer):  # no Optimizer.__init__: the members own the parameters and rates
    if not optimizers:
      raise ValueError("OptimizerGroup needs at least one optimizer")
    self.optimizers = optimizers
    self.params = [p for o in optimizers for p in o.params]
    self.buffers = [b for o in optimizers for b in o.buffers]

  def __getitem__(self, i: int) -> Optimizer:
    return self.optimizers[i]

  def zero_grad(self) -> None:
    for o in self.optimizers:
      o.zero_grad()

  def step(self) -> None:
    """Every member's step, once all are checked: a missing gradient anywhere changes no parameter."""
    for o in self.optimizers:
      o._check_ready()
    for o in self.optimizers:
      o.step()


class LARS(Optimizer):
  """SGD with momentum and LARS trust ratio (tcoef=0 turns the trust ratio off: plain SGD)."""

  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4,
               nesterov: bool = False, classic: bool = True, tcoef: float = 0.001):
    super().__init__(params, lr)
    self.momentum, self.wd, self.nesterov, self.classic, self.tcoef = momentum, weight_decay, nesterov, classic, tcoef
    self.b = [_zeros(p) for p in self.params] if momentum else []

  def _updates(self) -> list[Tensor]:
    news, states = [], []
    for i, p in enumerate(self.params):
      new, *b = _lars_update(p, p.grad, self.b[i] if self.momentum else None, self._lr(p), self.momentum, self.wd,
                             self.nesterov, self.classic, self.tcoef)
      news.append(new)
      states += [self.b[i].replace(b[0])] if b else []
    return news + states


@graph_template
def _lars_update(p: Tensor, grad: Tensor, b: Tensor | None, lr: Tensor, momentum: float, wd: float, nesterov: bool,
                 classic: bool, tcoef: float) -> tuple[Tensor, ...]:
  """LARS's new value of one parameter, and its new momentum buffer b if it has one. Templated, as _lamb_update."""
  w, g = _master(p, grad)
  if tcoef:
    r1, r2 = w.square().sum().sqrt(), g.square().sum().sqrt()
    ratio = (r1 > 0).where((r2 > 0).where(tcoef * r1 / (r2 + wd * r1), 1.0), 1.0)
  else:
    ratio = 1.0
  g = g + wd * w
  # tinygrad's order: classic scales by the trust ratio and rate before the momentum (b holds scaled steps); the
  # default scales after it, so b holds raw gradients, as torch's SGD does, and a changed lr applies to all of b
  if classic:
    g = g * ratio * lr
  if b is not None:
    b = momentum * b + g
    g = g + momentum * b if nesterov else b
  if not classic:
    g = g * ratio * lr
  new = (w - g).cast(p.dtype)
  return (new,) if b is None else (new, b)


def SGD(params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,  # noqa: N802
        nesterov: bool = False, classic: bool = False) -> LARS:
  """Stochastic gradient descent, with optional momentum, Nesterov momentum and weight decay."""
  return LARS(params, lr, momentum, weight_decay, nesterov, classic, tcoef=0.0)


class LAMB(Optimizer):
  """LAMB; with adam=True it is Adam(W): the trust ratio is 1. weight_decay is decoupled (AdamW's, tinygrad's);
  l2 is added to the gradient before the moments (torch's Adam(weight_decay=...))."""

  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
               weight_decay: float = 0.0, adam: bool = False, *, l2: float = 0.0):
    super().__init__(params, lr)
    self.b1, self.b2, self.eps, self.wd, self.adam, self.l2 = b1, b2, eps, weight_decay, adam, l2
    self.m, self.v = [_zeros(p) for p in self.params], [_zeros(p) for p in self.params]
    # b1**t and b2**t live in buffers, so every step runs the same kernels (a constant would change the source)
    device, dtype = self.params[0].device, least_upper_dtype(*(_master_dtype(p) for p in self.params))
    self.b1_t = Tensor.full((), 1.0, dtype=dtype, device=device, requires_grad=False).contiguous().realize()
    self.b2_t = Tensor.full((), 1.0, dtype=dtype, device=device, requires_grad=False).contiguous().realize()

  def _updates(self) -> list[Tensor]:
    b1_t, b2_t = self.b1_t.replace(self.b1_t * self.b1), self.b2_t.replace(self.b2_t * self.b2)
    news, states = [], [b1_t, b2_t]
    per_device: dict[str, tuple[Tensor, Tensor, Tensor]] = {}  # built once a step, not once per parameter
    for i, p in enumerate(self.params):
      if p.device not in per_device:
        per_device[p.device] = (1 - b1_t.to(p.device), 1 - b2_t.to(p.device), self._lr(p))
      new, m, v = _lamb_update(p, p.grad, self.m[i], self.v[i], *per_device[p.device], self.b1, self.b2, self.eps,
                               self.wd, self.adam, self.l2)
      states += [self.m[i].replace(m), self.v[i].replace(v)]
      news.append(new)
    return news + states


@graph_template
def _lamb_update(p: Tensor, grad: Tensor, m: Tensor, v: Tensor, correct1: Tensor, correct2: Tensor, lr: Tensor,
                 b1: float, b2: float, eps: float, wd: float, adam: bool, l2: float) -> tuple[Tensor, Tensor, Tensor]:
  """LAMB's new value of one parameter, and its new moments; the bias corrections are 1 - b1**t and 1 - b2**t. The
  same Tensor ops every step on new tensors: templated."""
  w, g = _master(p, grad)
  if l2:
    g = g + l2 * w
  m = b1 * m + (1 - b1) * g
  v = b2 * v + (1 - b2) * g * g
  m_hat, v_hat = m / correct1, v / correct2
  up = m_hat / (v_hat.sqrt() + eps) + wd * w
  if not adam:
    r1, r2 = w.square().sum().sqrt(), up.square().sum().sqrt()
    up = up * (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0)
  return (w - lr * up).cast(p.dtype), m, v


def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,  # noqa: N802
         weight_decay: float = 0.0) -> LAMB:
  """Adam. tinygrad's has no weight_decay; this one's is torch's Adam's (L2: added to the gradient before the
  moments), not AdamW's decoupled decay, so a program written for torch gets torch's weights."""
  return LAMB(params, lr, b1, b2, eps, adam=True, l2=weight_decay)


def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,  # noqa: N802
          weight_decay: float = 0.01) -> LAMB:
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True)


__all__ = ["Optimizer", "SGD", "LARS", "LAMB", "Adam", "AdamW"]
