"""Validate a module before its first launch: the checks `ptxforge check` runs, once per module.

A launch of PTX the validator refuses raises `PTXValidationError` (every problem, at FILE:LINE:COL) before
anything is copied or run. `launch(validate=False)` skips it for one launch, `PTXFORGE_VALIDATE=0` in the
environment for all.
"""

from __future__ import annotations

from ptxforge import environment
from ptxforge.ptx import ir
from ptxforge.ptx.errors import Diagnostic, PTXValidationError
from ptxforge.ptx.validator import validate

# id(module) -> (that module, kept so the id stays its own; its problems)
_VERDICTS: dict[int, tuple[ir.Module, list[Diagnostic]]] = {}
MAX_VERDICTS = 256


def validation_enabled(validate_: bool = True) -> bool:
    """False when the launch says validate=False or the environment says PTXFORGE_VALIDATE=0."""
    return validate_ and environment.validate_launches()


def problems_of(module: ir.Module) -> list[Diagnostic]:
    """The validator's problems with `module`, computed on its first launch and remembered."""
    hit = _VERDICTS.get(id(module))
    if hit is not None and hit[0] is module:
        return hit[1]
    found = validate(module)
    if len(_VERDICTS) >= MAX_VERDICTS:
        del _VERDICTS[next(iter(_VERDICTS))]
    _VERDICTS[id(module)] = (module, found)
    return found


def check_before_launch(module: ir.Module, validate_: bool = True) -> None:
    """Raise PTXValidationError when `module` breaks a rule ptxas enforces (unless validation is off)."""
    if not validation_enabled(validate_):
        return
    found = problems_of(module)
    if found:
        raise PTXValidationError(found)
