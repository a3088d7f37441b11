"""Checking an executor against float mode Z: op vectors, a conformance pack, and a diagnosing check.

- :mod:`.ops`: TestFloat-style vectors for add, sub, mul, div, from_u32 (generate, verify, classify);
- :mod:`.faults`: the fault models (one registry) and a simulated executor that runs any of them;
- :mod:`.mutants`: the op space (every op of a step under every alternative rule), single-op mutants;
- :mod:`.pack`: the conformance pack (cases as one table; pages, traces, digests, manifest);
- :mod:`.suite`: a whole pack (:mod:`.check` for each case) against an executor or its outputs; table, JSON, JUnit;
- :mod:`.check`: an executor's page and trace against a case: diff, first differing step, diagnosis, the op;
- :mod:`.gpu`: the CUDA image on a device against the CPU, bit for bit (``meshnb gpu-check``'s checks).

Their commands (``meshnb ops|pack|check|gpu-check``) are :mod:`meshnb.cli`'s: it parses and prints.
"""
