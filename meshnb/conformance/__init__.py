"""The executor-checking tools: op vectors, a conformance pack, a diagnosing check, the PTX and SASS audits.

This package is the tools' public face, as ``meshnb`` is the library's: ``__all__`` names each
tool's entry points and its public modules (with their submodules).  The tools use the library
only through its public face and a documented list of lower layers (the architecture page,
"Two audiences"); the library imports nothing of them.

- :mod:`.ops`: TestFloat-style vectors for add, sub, mul, div, from_u32 (generate, verify, classify);
- :mod:`.fpu`: the op rules on words (an independent oracle); :mod:`.model`: the step as data;
- :mod:`.faults`: the fault models (one registry) and a simulated executor that runs any of them;
- :mod:`.mutants`: the op space (every op of a step under every alternative rule), single-op mutants;
- :mod:`.mutation`: every mutant through the quick and the full pack: the packs' mutation score;
- :mod:`.pack`: the conformance pack (cases as one table; pages, traces, digests, manifest);
- :mod:`.check`: an executor's page and trace against a case: diff, first differing step, diagnosis, the op;
- :mod:`.suite`: a whole pack (:mod:`.check` for each case) against an executor or its outputs; table, JSON, JUnit;
- :mod:`.experiment`: experiments that tell the fault models apart, and their proofs;
- :mod:`.gpu`: the CUDA image on a device against the CPU, bit for bit (``meshnb gpu-check``'s checks);
- :mod:`.audit`: PTX read for every instruction that can break float mode Z (pure Python);
- :mod:`.sass`: the machine code ptxas makes of PTX, audited (the CUDA toolkit's ptxas and nvdisasm).

Their commands (``meshnb ops|pack|check|gpu-check|ptx``) are :mod:`meshnb.cli`'s: it parses and prints.
The names load on first use (PEP 562): the command line's parser imports this package alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_face

# public name -> the module of the package that holds it
_EXPORTS = {
    "generate": "ops",
    "verify": "ops",
    "MODELS": "faults",
    "Model": "faults",
    "PackError": "pack",
    "write_pack": "pack",
    "verify_pack": "pack",
    "Report": "check",
    "executor_run": "check",
    "setup_from_run": "check",
    "SuiteResult": "suite",
    "run_suite": "suite",
    "PtxError": "audit",
    "Violation": "audit",
    "audit_file": "audit",
    "audit_text": "audit",
    "SassFinding": "sass",
    "SassUnavailable": "sass",
    "audit_sass": "sass",
}
# the public modules, one a tool (``check`` is the checker's package: its function is ``check.check``)
_MODULES = (
    "audit",
    "check",
    "experiment",
    "faults",
    "fpu",
    "gpu",
    "model",
    "mutants",
    "mutation",
    "ops",
    "pack",
    "sass",
    "suite",
)
__all__ = [  # literal, for the API reference's static reading (griffe); _EXPORTS' names and _MODULES
    "MODELS",
    "Model",
    "PackError",
    "PtxError",
    "Report",
    "SassFinding",
    "SassUnavailable",
    "SuiteResult",
    "Violation",
    "audit",
    "audit_file",
    "audit_sass",
    "audit_text",
    "check",
    "executor_run",
    "experiment",
    "faults",
    "fpu",
    "generate",
    "gpu",
    "model",
    "mutants",
    "mutation",
    "ops",
    "pack",
    "run_suite",
    "sass",
    "setup_from_run",
    "suite",
    "verify",
    "verify_pack",
    "write_pack",
]


__getattr__, __dir__ = lazy_face(__name__, _EXPORTS, _MODULES)

if TYPE_CHECKING:
    from . import audit as audit
    from . import check as check
    from . import experiment as experiment
    from . import faults as faults
    from . import fpu as fpu
    from . import gpu as gpu
    from . import model as model
    from . import mutants as mutants
    from . import mutation as mutation
    from . import ops as ops
    from . import pack as pack
    from . import sass as sass
    from . import suite as suite
    from .audit import PtxError as PtxError
    from .audit import Violation as Violation
    from .audit import audit_file as audit_file
    from .audit import audit_text as audit_text
    from .check import Report as Report
    from .check import executor_run as executor_run
    from .check import setup_from_run as setup_from_run
    from .faults import MODELS as MODELS
    from .faults import Model as Model
    from .ops import generate as generate
    from .ops import verify as verify
    from .pack import PackError as PackError
    from .pack import verify_pack as verify_pack
    from .pack import write_pack as write_pack
    from .sass import SassFinding as SassFinding
    from .sass import SassUnavailable as SassUnavailable
    from .sass import audit_sass as audit_sass
    from .suite import SuiteResult as SuiteResult
    from .suite import run_suite as run_suite
