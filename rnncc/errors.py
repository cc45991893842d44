"""Errors raised by rnncc, one class per stage so callers can tell where a problem began."""


class RnnccError(Exception):
    """Base class of every error rnncc raises on purpose."""


class SpecError(RnnccError, ValueError):
    """The model description is invalid. The message names the layer, the field, the
    value and what was expected."""


class PlanError(RnnccError, ValueError):
    """The model cannot be planned for the chosen target."""


class CompileError(RnnccError, RuntimeError):
    """nvcc rejected generated source (a bug in rnncc: please report it with the source)."""


class RuntimeCheckError(RnnccError, ValueError):
    """Arguments of a call do not match the compiled model (shape, dtype, device, layout)."""


class DeviceUnavailable(RnnccError, RuntimeError):
    """Running kernels needs PyCUDA and an NVIDIA GPU, and one of them is missing."""


class DeviceTimeout(RnnccError, RuntimeError):
    """A kernel's spin-wait passed its bound (``RNNCC_SPIN_TIMEOUT_MS``) and the kernel gave
    up: that call's outputs are invalid. Raised by the next call of the model (or
    ``check_errors()``), like a device-side assert; the model stays usable."""
