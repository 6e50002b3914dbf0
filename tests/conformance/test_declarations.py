"""Loading an implementation: its declarations are read once and checked (``adapter.Declared``),
and whatever its code does while it is imported, looked up or built — raise, exit, interrupt —
is a one-line usage error (exit 2), never a verdict, a silent exit 0 or a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from plga.conformance import Adapter, as_adapter, check_kernel
from plga.conformance.adapter import Declared
from plga.conformance.adapters import EagerAdapter
from plga.errors import ImplementationLoadError

PLGA = str(Path(sys.executable).parent / "plga")

MODULES = {
    "exits_on_import": "import sys\nsys.exit(0)\n",
    "exits_3_on_import": "raise SystemExit(3)\n",
    "interrupts_on_import": "raise KeyboardInterrupt\n",
    "getattr_raises": "def __getattr__(name):\n    raise RuntimeError('boom ' + name)\n",
    "getattr_recurses": "def __getattr__(name):\n    return __getattr__(name)\n",
    "decl": textwrap.dedent('''
        import sys
        from plga.conformance import Adapter, adapter_factory

        @adapter_factory
        def factory_exits():
            sys.exit(0)

        class StringDtypes(Adapter):
            dtypes, capabilities = "bfloat16", frozenset({"attention"})

        class Typo(Adapter):
            capabilities = frozenset({"attention", "casual"})

        class NameRaises(Adapter):
            capabilities = frozenset({"attention"})

            @property
            def name(self):
                raise RuntimeError("no name today")
    '''),
}


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("impls")
    for name, text in MODULES.items():
        (d / f"{name}.py").write_text(text)
    return d


@pytest.mark.parametrize("impl, fragment", [
    ("exits_on_import:x", "SystemExit(0)"),
    ("exits_3_on_import:x", "SystemExit(3)"),
    ("interrupts_on_import:x", "KeyboardInterrupt"),
    ("getattr_raises:x", "RuntimeError: boom x"),
    ("getattr_raises", "RuntimeError: boom"),
    ("getattr_recurses:x", "RecursionError"),
    ("decl:factory_exits", "SystemExit(0)"),
    ("decl:StringDtypes", "dtypes must be a collection of names"),
    ("decl:Typo", "unknown capabilities ['casual']"),
    ("decl:NameRaises", "no name today"),
])
def test_load_failures_are_one_line_exit_2(module_dir, impl, fragment):
    r = subprocess.run([PLGA, "conformance", "--impl", impl], capture_output=True, text=True, cwd=module_dir,
                       timeout=300, env={**os.environ, "PLGA_NO_PROGRESS": "1"})
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and fragment in r.stderr, r.stderr


class Flip(Adapter):
    """Declares more capabilities the first time they are read than later."""

    name, dtypes = "flip", ("float32",)
    reads = 0

    @property
    def capabilities(self):
        Flip.reads += 1
        return frozenset({"attention", "sdpa_bitwise", "backward"} if Flip.reads == 1 else {"attention"})

    def attention(self, q, k, v, G, **kw):
        from plga import kernels as K

        return K.plga_attention(q, k, v, G, causal=kw["causal"], key_padding_mask=kw["key_padding_mask"], scale=kw["scale"])


def test_declarations_are_read_once_and_what_is_printed_is_what_ran():
    adapter = as_adapter(Flip())
    assert isinstance(adapter, Declared) and Flip.reads == 1
    report = check_kernel(adapter, checks=["sdpa_identity", "attention_backward"], dtypes=["float32"], profile="quick")
    assert Flip.reads == 1  # never read again: the header below is what the checks enforced
    assert {r.check: r.status for r in report.results} == {"sdpa_identity": "passed", "attention_backward": "passed"}
    assert "backward, sdpa_bitwise" in report.summary()


def test_a_subclass_of_the_suites_baseline_is_refused_too():
    class Wrapped(EagerAdapter):
        name = "not really mine"

    with pytest.raises(ImplementationLoadError, match="own baseline"):
        check_kernel(Wrapped)


def _maskless(scale_bug: bool = False):
    """Attention without masks, declared so: refuses a mask it never offered (as a real kernel
    would); ``scale_bug`` forgets 1/√d."""
    from plga.conformance import eager

    def attn(q, k, v, G, *, causal=False, key_padding_mask=None, scale=None):
        if causal or key_padding_mask is not None:
            raise NotImplementedError("masks are not supported (not declared)")
        return eager.plga_attention(q, k, v, G, scale=1.0 if scale_bug else scale)

    attn.plga_capabilities, attn.plga_dtypes = ("attention",), ("float32",)
    return attn


def test_checks_draw_only_the_masks_an_implementation_declares():
    """The structure checks and trained-G attention require only ``attention``; they used to pass
    causal masks and padding anyway, failing a correct kernel that declares neither."""
    report = check_kernel(_maskless(), profile="quick")
    assert report.verdict == "PASS", report.summary()
    ran = {r.check for r in report.results if r.status == "passed"}
    assert {"batched_equals_slices", "sdpa_identity", "strided_inputs", "sentinel_g"} <= ran
    assert set(report.coverage()["structure"]["mask"]) == {"none"}
    # control: the same kernel with a wrong scale fails those checks
    assert check_kernel(_maskless(scale_bug=True), profile="quick").verdict == "FAIL"


def test_collapsed_decoding_is_judged_without_a_g_cache():
    """``collapsed_equals_kvg`` needs ``collapsed`` and a KV cache, ``cache_kv`` or
    ``cache_kvg``: it used to need ``cache_kvg`` and skipped a decoder declaring collapsed
    decoding on a KV cache alone (only ``state_between_calls`` decoded it then). Declaring
    neither cache skips it."""
    from plga.conformance.adapters import kernels
    from plga.conformance.controls import CONTROLS

    caps = frozenset({"forward", "collapsed", "cache_kv"})
    wrong = CONTROLS["collapsed_steps_plain_sdpa"].make()
    wrong.capabilities = caps
    report = check_kernel(wrong, checks=["collapsed_equals_kvg"], dtypes=["float32"], profile="quick", shrink=False)
    assert report.failed_checks() == {"collapsed_equals_kvg"}, report.summary()
    right = kernels()  # the project's kernels, declaring no G-cache
    right.capabilities = caps
    report = check_kernel(right, checks=["collapsed_equals_kvg"], dtypes=["float32"], profile="quick")
    assert report.verdict == "PASS" and {r.status for r in report.results} == {"passed"}, report.summary()
    wrong.capabilities = frozenset({"forward", "collapsed", "cache_nocache"})
    report = check_kernel(wrong, checks=["collapsed_equals_kvg"], dtypes=["float32"], profile="quick")
    assert {r.status for r in report.results} == {"skipped"}, report.summary()
    message = report.results[0].message  # the any-of requirement, named with what each capability means
    assert "declares neither capability 'cache_kv' (greedy generation" in message and " nor 'cache_kvg' (" in message, message
