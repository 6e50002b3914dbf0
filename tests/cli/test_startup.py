"""What a fresh process imports: the console script's parser and the reference audit load no
torch, and loading and running a kernels model loads neither torch._dynamo nor sympy (1 s of
every start).
Each case runs in a fresh interpreter and reports the modules it ended with; a positive control
shows that the probe sees a heavy import when one happens."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import json, sys
{body}
print(json.dumps({{m: m in sys.modules for m in ("torch", "torch._dynamo", "sympy", "matplotlib")}}))
"""


def _loaded(body: str) -> dict[str, bool]:
    out = subprocess.run([sys.executable, "-c", _PROBE.format(body=body)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_console_script_parser_imports_no_torch():
    assert _loaded("from plga.cli import build_parser; build_parser()")["torch"] is False


def test_the_audit_environment_record_imports_nothing_it_names():
    body = (
        "from types import SimpleNamespace\n"
        "from plga.audit.runner import _environment\n"
        "env = _environment(SimpleNamespace(name='reference'), 'cpu', 'float64')\n"
        "assert env['torch'] and env['numpy']"
    )
    loaded = _loaded(body)
    assert loaded["torch"] is False and loaded["matplotlib"] is False


def test_loading_and_running_a_kernels_model_imports_no_dynamo_and_no_sympy():
    body = (
        "import torch\n"
        "from plga.audit.model import builtin_config, random_params\n"
        "from plga.kernels import PLDRModel\n"
        "c = builtin_config()\n"
        "m = PLDRModel.from_reference(random_params(c, seed=0), c, dtype=torch.float64)\n"
        "with torch.no_grad():\n"
        "    m(torch.ones(1, 5, dtype=torch.long))\n"
        "    m.generate(torch.ones(1, 5, dtype=torch.long), 3, 'kv')"
    )
    loaded = _loaded(body)
    assert loaded["torch"] is True and loaded["torch._dynamo"] is False and loaded["sympy"] is False


def test_positive_control_the_probe_sees_dynamo_when_a_meta_random_fill_loads_it():
    """Building on the meta device without the fill guard runs torch's Python random fill."""
    body = "import torch\nwith torch.device('meta'):\n    torch.nn.Embedding(10, 4)"
    assert _loaded(body)["torch._dynamo"] is True
