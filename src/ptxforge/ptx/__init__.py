"""The PTX language: types, the ISA table, the IR, parser, printer, validator and retargeting.

Importing the package binds the printer to `ir.Module.to_ptx` (the printer is built on the IR's nodes, so
the IR cannot import it without a cycle).
"""

from ptxforge.ptx import ir, printer

ir.bind_execution(printer=printer.print_module)
