"""``python host.py BINARY CASE_DIR OUT_DIR``: runs a case (``case.json``) on the C port BINARY.

The C port takes its run on the command line (train_port.c's usage); this reads the case and passes it
on, so that the C stays free of a JSON parser. Only the standard library: nothing of meshnb is imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def argv(binary: str, case_dir: Path, out_dir: Path) -> list[str]:
    """The C port's command line for the case in ``case_dir``."""
    cj = json.loads((case_dir / "case.json").read_text())
    n = cj["systems"]
    return [
        binary,
        str(n),
        str(int(cj["group"])),
        str(cj["steps"]),
        str(cj["steps_per_task"]),
        str(int(cj["step_base"])),
        str(int(cj["start"] == "init")),
        str(out_dir),
        *(str(case_dir / f"in-{k}.page") for k in range(n)),
        *(f"{e['before_step']}:{e['word']}" for e in cj["set_lr"]),
        *(f"T:{e['system']}:{e['round']}" for e in cj.get("inject_timeouts", [])),
    ]


if __name__ == "__main__":
    binary, case_dir, out_dir = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    sys.exit(subprocess.run(argv(binary, case_dir, out_dir)).returncode)
