"""rnncc: compile stacked recurrent networks to CUDA kernels specialised to the network.

    import rnncc
    m = rnncc.compile("examples/gnmt_encoder.yaml", target="h100")
    print(m.plan.explain())           # the decisions and why
    print(m.kernels[0].source)        # the generated CUDA
    y, state = m(x)                   # on a GPU: NumPy, PyTorch, CuPy or PyCUDA arrays
"""

__version__ = "0.1.0"

from .errors import (CompileError, DeviceTimeout, DeviceUnavailable, PlanError,  # noqa: E402
                     RnnccError, RuntimeCheckError, SpecError)
from .ir import Model  # noqa: E402
from .spec import Concat, ModelBuilder, Sum, load  # noqa: E402
from .weights import from_torch  # noqa: E402
from .plan import CompileOptions  # noqa: E402
from .runtime import CompiledModel  # noqa: E402
from .compiler import compile  # noqa: E402
from .build import cache_info  # noqa: E402


def optimize(model, verbose: bool = True, launches: str = "eager"):
    """Swap every torch.nn.LSTM/GRU/RNN in a torch module for its rnncc.nn twin (see
    :func:`rnncc.nn.optimize`); imports PyTorch on first use."""
    from .nn import optimize as _optimize
    return _optimize(model, verbose, launches)

__all__ = ["compile", "CompiledModel", "CompileOptions", "Model", "ModelBuilder", "Sum",
           "Concat", "load", "from_torch", "RnnccError", "SpecError", "PlanError",
           "CompileError", "RuntimeCheckError", "DeviceUnavailable", "DeviceTimeout", "cache_info", "optimize",
           "__version__"]
